"""Edges of today's survival changes on real processes (issue 50's edge review of 933ca62): a survivor that raises
in the same step as the kill, the lone survivor of R = 2 raising, and a slow replacement of a replica of two ranks
(`fault_join_delay_s` with shards = 2, the members meeting on the store before gloo's rendezvous). Each run ends
with the rank and its traceback, or trains the episode, and leaves no process behind. Structure, never speed."""

from __future__ import annotations

import time

import pytest

from edit_lab import WorkerError, launch
from edit_lab.records.events import read_jsonl
from tests.distributed.test_survive import _views, _workers, out  # noqa: F401 (the fixture that kills leftovers)
from tests.helpers import small

pytestmark = pytest.mark.slow


def _episode(out, **kw):
    cfg = dict(method="diloco", shards=1, replicas=3, steps=40, warmup_steps=10, sync_interval=5, eval_every=0,
               survive=True, fault_replica=1, fault_replica_step=20, rejoin_step=30, out=str(out), timeout_s=3.0)
    cfg.update(kw)
    return small(**cfg)


def _no_workers_left(out) -> None:
    deadline = time.monotonic() + 5
    while _workers(out) and time.monotonic() < deadline:
        time.sleep(0.1)
    assert not _workers(out), "worker processes left"


@pytest.mark.parametrize("replicas, rank", [
    (3, 2),  # a survivor raises at the start of the step its peer is killed at
    (2, 0),  # R = 2: the lone survivor raises, in the same step
])
def test_a_survivor_raising_in_the_kill_s_step_ends_the_run_with_its_traceback(out, replicas, rank):
    t0 = time.monotonic()
    with pytest.raises(WorkerError) as info:
        launch(_episode(out, replicas=replicas, fault_rank=rank, fault_step=20, fault_kind="raise"),
               stall_timeout_s=600)
    assert info.value.rank == rank, str(info.value)
    assert "InjectedFault" in info.value.traceback and "not a death" in info.value.traceback
    assert time.monotonic() - t0 < 300  # ended at the failure, far from the stall timeout
    _no_workers_left(out)


def test_the_lone_survivor_of_r2_raising_after_the_death_ends_the_run(out):
    with pytest.raises(WorkerError) as info:
        launch(_episode(out, replicas=2, rejoin_step=-1, fault_rank=0, fault_step=30, fault_kind="raise"),
               stall_timeout_s=600)
    assert info.value.rank == 0 and "InjectedFault" in info.value.traceback
    _no_workers_left(out)


def test_a_slow_replacement_of_two_ranks_is_waited_for(out):
    """shards = 2: both ranks of the replacement reach the view's group 6 s late (timeout_s 3 s); the survivors'
    four ranks gather on the store for them and the view with it is built once, without a detection after 30."""
    run = launch(_episode(out, shards=2, fault_join_delay_s=6.0))
    _no_workers_left(out)
    assert _views(run) == [[0, 1, 2], [0, 2], [0, 1, 2]]
    rows = read_jsonl(out / "syncs.jsonl")
    joins = [r for r in rows if r["kind"] == "view" and r.get("joined")]
    assert joins and all(r["ms"] > 6000 * 0.9 for r in joins)  # waited for, at the view change
    assert not [r for r in rows if r["kind"] == "detection" and r["step"] >= 30]
    assert [(x["replica"], x["rejoined_at_step"]) for x in run.summary["survival"]["lost"]] == [(1, 30)]
    assert {r: v["steps"] for r, v in run.summary["per_replica"].items()} == {"0": 40, "1": 10, "2": 40}


def test_a_replacement_later_than_the_gather_s_bound_is_fenced_twice_then_given_up(out):
    """timeout_s 3 s: the gather waits max(3·3, 60) = 60 s for a replacement 70 s late, then the attempt fails as a
    lost peer; the launcher fences the silent replacement as hung, starts another (as late), and after
    MAX_FAILED_JOINS = 2 stops replacing replica 1: the survivors train to the end. Before the fix the gather's
    TimeoutError was no peer loss and the run ended after 60 s with 'rank 0 raised'. Slow: two 60 s bounds."""
    run = launch(_episode(out, steps=40, fault_replica_step=15, rejoin_step=25, fault_join_delay_s=70.0),
                 stall_timeout_s=500)
    _no_workers_left(out)
    assert _views(run) == [[0, 1, 2], [0, 2], [0, 1, 2], [0, 2], [0, 1, 2], [0, 2]]
    causes = [d["cause"] for d in run.summary["survival"]["deaths"]]
    assert causes[0] == "rank 1: exit -9" and all(c.startswith("hung") for c in causes[1:]) and len(causes) == 3
    assert {r: v["steps"] for r, v in run.summary["per_replica"].items()} == {"0": 40, "1": 0, "2": 40}
