"""Notebook 06's tables (edit_course/lessons/races.py) on hand-built run directories: the fake run of
tests/unit/viz_fake_run.py (2 × 2, 4 steps, warm-up 1, sync interval 2, an anchor at step 1, syncs at
steps 3 and 4), its metrics, summary or method_info rewritten to chosen values, every answer exact."""

from __future__ import annotations

import json
import math
from pathlib import Path

import pandas as pd
import pytest

from edit_course.claims.stragglers import pace_table
from edit_course.lessons import races as st
from edit_lab.records.run import Run
from tests.unit.viz_fake_run import make_fake_run


def _with_dt(path: Path, dts: dict[int, list[float]]) -> Run:
    """The fake run with replica r's step times replaced by dts[r] (step 0 first)."""
    rows = [json.loads(line) for line in (path / "metrics.jsonl").read_text().splitlines()]
    for m in rows:
        if m["kind"] == "train":
            m["dt"] = dts[m["replica"]][m["step"]]
    (path / "metrics.jsonl").write_text("".join(json.dumps(m) + "\n" for m in rows))
    return Run(path)


def _with_steps(path: Path, steps: list[int]) -> Run:
    """The fake run with summary.json's per-replica step counts set to `steps`."""
    summary = json.loads((path / "summary.json").read_text())
    for r, k in enumerate(steps):
        summary["per_replica"][str(r)]["steps"] = k
    (path / "summary.json").write_text(json.dumps(summary))
    return Run(path)


def test_fast_step_s_is_replica_0s_median_after_warm_up(tmp_path):
    # replica 0: step 0 (warm-up, left out) 9 s, then 0.2, 0.4, 1.0 s: median 0.4 (with step 0 it would be 0.7)
    run = _with_dt(make_fake_run(tmp_path / "dt"), {0: [9.0, 0.2, 0.4, 1.0], 1: [5.0, 5.0, 5.0, 5.0]})
    assert st.fast_step_s(run) == pytest.approx(0.4)
    assert st.fast_step_s(Run(make_fake_run(tmp_path / "plain"))) == pytest.approx(0.5)  # every dt of the fake is 0.5


def test_fast_step_s_without_a_step_after_warm_up_is_nan(tmp_path):
    path = make_fake_run(tmp_path / "short")
    rows = [json.loads(line) for line in (path / "metrics.jsonl").read_text().splitlines()]
    kept = [m for m in rows if m["kind"] != "train" or m["step"] == 0]  # warm-up's step 0 only
    (path / "metrics.jsonl").write_text("".join(json.dumps(m) + "\n" for m in kept))
    assert math.isnan(st.fast_step_s(Run(path)))


def test_aedit_sync_period(tmp_path):
    edit = _with_dt(make_fake_run(tmp_path / "edit"), {0: [9.0, 0.2, 0.4, 1.0], 1: [1.0] * 4})
    other = Run(make_fake_run(tmp_path / "other"))  # fast step 0.5 s
    assert st.aedit_sync_period({"edit": edit}, tau=4, fixed_s=0.8) == 0.8  # a fixed period wins
    assert st.aedit_sync_period({"edit": edit}, tau=4) == pytest.approx(4 * 0.4)
    assert st.aedit_sync_period({"sync": other, "edit": edit}, tau=4) == pytest.approx(1.6)  # EDiT's, not the first
    assert st.aedit_sync_period({"sync": other}, tau=3) == pytest.approx(3 * 0.5)  # no EDiT run: the first run's
    assert st.aedit_sync_period({}, tau=4) == 1.0  # nothing measured yet: the fallback
    assert st.aedit_sync_period({}, tau=4, fallback_s=2.5) == 2.5


def test_step_ratio_and_the_race_table(tmp_path):
    aedit = _with_steps(make_fake_run(tmp_path / "aedit"), [8, 4])
    edit = Run(make_fake_run(tmp_path / "edit"))  # 4 and 4 steps
    stalled = _with_steps(make_fake_run(tmp_path / "stalled"), [6, 0])
    assert st.step_ratio(aedit) == 2.0 and st.step_ratio(edit) == 1.0
    assert st.step_ratio(stalled) == 6.0  # a slow replica with no step counts as 1
    table = st.race_table({"edit": edit, "aedit": aedit})
    assert list(table.index) == ["edit", "aedit"]
    assert table.loc["aedit", "steps per replica"] == [8, 4] and table.loc["edit", "steps per replica"] == [4, 4]
    assert list(table["fast / slow steps"]) == [1.0, 2.0]
    # every other column is pace_table's, unchanged
    pd.testing.assert_frame_equal(table.drop(columns=["steps per replica", "fast / slow steps"]),
                                  pace_table({"edit": edit, "aedit": aedit}))


def _with_syncs(path: Path, steps: list[int]) -> Run:
    """The fake run with syncs.jsonl holding an anchor and one sync per step in `steps`."""
    rows = [{"kind": "anchor", "step": 1}] + [{"kind": "sync", "step": s} for s in steps]
    (path / "syncs.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows))
    return Run(path)


def test_sync_counts_and_their_line(tmp_path):
    edit = _with_syncs(make_fake_run(tmp_path / "edit"), [3, 6, 9, 12])
    aedit = _with_syncs(make_fake_run(tmp_path / "aedit"), [2, 4, 6, 8, 10, 12])
    assert st.syncs_of(edit) == 4 and st.syncs_of(aedit) == 6  # the anchor is not a sync
    line = st.sync_count_line(edit, aedit)
    assert "EDiT 4, A-EDiT 6 (1.50×)" in line and "synced more often here" in line
    assert "synced less often here" in st.sync_count_line(aedit, edit)  # the direction is the runs'
    assert "synced as often here" in st.sync_count_line(edit, edit)


def test_rounds_side_by_side(tmp_path):
    # EDiT's rounds from the fake's records: grad all-reduce at step 0, anchor 1, syncs 3 and 4 → rounds
    # [0, 1), [1, 3), [3, 4); from warm-up's end (step 1) on: 2 and 1 local steps for both replicas.
    edit = Run(make_fake_run(tmp_path / "edit"))
    # A-EDiT reports its rounds: replica 0 trained 3, 2, 2 local steps, replica 1 one step each
    aedit = Run(make_fake_run(tmp_path / "aedit", method_info={"local_steps_per_round": [[3, 1], [2, 1], [2, 1]]}))
    table = st.rounds_side_by_side({"sync": edit, "edit": edit, "aedit": aedit})
    assert list(table.columns) == [("edit", 0), ("edit", 1), ("aedit", 0), ("aedit", 1)]  # sync not asked for
    assert list(table.index) == [0, 1, 2]
    assert table[("edit", 0)].tolist()[:2] == [2, 1] and table[("edit", 1)].tolist()[:2] == [2, 1]
    assert table[("edit", 0)].isna().tolist() == [False, False, True]  # EDiT had two rounds: <NA> in the third
    assert table[("aedit", 0)].tolist() == [3, 2, 2] and table[("aedit", 1)].tolist() == [1, 1, 1]
    assert str(table[("aedit", 0)].dtype) == "Int64"
    assert list(st.rounds_side_by_side({"aedit": aedit}, rounds=2).index) == [0, 1]
    assert list(st.rounds_side_by_side({"aedit": aedit}).columns) == [("aedit", 0), ("aedit", 1)]  # edit absent
    assert st.rounds_side_by_side({"sync": edit}).empty
