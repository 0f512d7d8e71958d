"""Warm workers (edit_lab/runtime/forkserver.py): a rank forked from the fork server is the same rank as a fresh one.

The fork server is how most runs of this suite and of a notebook start, so what it must never change is
checked on real runs: the same configuration gives bit-for-bit the same losses, penalty decisions and
final model either way; a changed source file replaces the server (the next run runs the edited code);
the server ends with its launcher (test_failures.py kills a launcher and checks both).
"""

from __future__ import annotations

import os

import pytest
import torch

from edit_lab import launch
from edit_lab.runtime import forkserver
from tests.helpers import small

pytestmark = pytest.mark.slow


def _ranks_started() -> int:
    server = forkserver._server
    return len(server.pids) if server is not None else 0


def test_a_forked_rank_trains_exactly_as_a_fresh_process(tmp_path, monkeypatch):
    cfg = small(method="edit", shards=2, replicas=2, steps=7, sync_interval=3, eval_every=4)
    before = _ranks_started()
    warm = launch(cfg.replace(out=str(tmp_path / "warm")))
    assert _ranks_started() == before + 4  # every rank came from the server
    monkeypatch.setenv(forkserver.ENABLE_ENV, "0")
    cold = launch(cfg.replace(out=str(tmp_path / "cold")))
    assert _ranks_started() == before + 4  # none did: four fresh `python -m edit_lab.runtime.worker`

    assert warm.train_losses() == cold.train_losses()
    assert warm.val_losses() == cold.val_losses()
    assert [(r["G"], r["weight"], r["outlier"]) for r in warm.penalty] == [(r["G"], r["weight"], r["outlier"]) for r in cold.penalty]
    assert warm.penalty  # the detector judged syncs
    a, b = warm.state_dict(), cold.state_dict()
    assert a.keys() == b.keys() and all(torch.equal(a[k], b[k]) for k in a)


def test_an_edited_source_file_replaces_the_server(tmp_path, monkeypatch):
    launch(small(shards=1, replicas=2, steps=2, out=str(tmp_path / "a")))
    first = forkserver._server
    assert first is not None and first.alive()
    real = forkserver.source_fingerprint
    monkeypatch.setattr(forkserver, "source_fingerprint", lambda: real() + (("edited.py", 1, 1),))
    launch(small(shards=1, replicas=2, steps=2, out=str(tmp_path / "b")))
    second = forkserver._server
    assert second is not first and second.proc.pid != first.proc.pid
    assert not first.alive() and first.proc.returncode is not None  # the stale server is gone, not leaked
    assert second.pids and all(second.exits.get(pid) == 0 for pid in second.pids)


def test_the_server_forks_only_single_threaded_and_reports_each_rank_end(tmp_path):
    # the server is shared by every launch of this test process: an earlier test's killed rank is in its pids too
    before = set(forkserver._server.pids) if forkserver._server is not None else set()
    launch(small(shards=1, replicas=2, steps=2, out=str(tmp_path / "a")))
    server = forkserver._server
    assert server.ready["threads"] == 1
    assert server.ready["pid"] == server.proc.pid != os.getpid()
    mine = [pid for pid in server.pids if pid not in before]
    assert len(mine) == 2 and all(server.exits.get(pid) == 0 for pid in mine)  # each rank reaped, exit code 0
