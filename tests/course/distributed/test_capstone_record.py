"""Recording a mystery for real: its trouble hidden in config.json, its answer only as a hash, still solvable."""

from __future__ import annotations

import json

import pytest

from edit_course.lessons import capstone
from edit_lab.config import RunConfig
from tests.capstone_solver import solve

pytestmark = pytest.mark.slow


def test_record_hides_the_trouble_and_keeps_it_diagnosable(tmp_path):
    m = capstone.Mystery("B", "slow_link", {"bandwidth_mb_s": capstone.BANDWIDTHS_MB_S[-1]})
    path = capstone.record(m, seed=11, root=tmp_path)
    assert path == capstone.mystery_dir("B", tmp_path)
    conf = json.loads((path / "config.json").read_text())
    assert conf["link"]["bandwidth_mb_s"] == RunConfig().link.bandwidth_mb_s == 0.0  # config.json in sections
    assert conf["link"]["latency_ms"] == 0.0
    assert "bandwidth" not in (path / "mystery.json").read_text().replace("answer_sha256", "")
    assert sorted(p.name for p in path.glob("events-rank*.jsonl.gz")) == [f"events-rank{r}.jsonl.gz" for r in range(4)]
    run = capstone.mysteries(tmp_path)["B"]
    assert solve(run) == (m.kind, m.detail)
    assert capstone.is_right("B", m.kind, tmp_path, **m.detail)
