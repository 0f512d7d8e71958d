"""Merging the ranks' metric rows (`rundir.merge_metrics`) and the summary built from them, by hand.

Validation rows are covered by test_time_budget.py; here the training rows: one row per (step, replica)
from the rows of the replica's shards, and summary.json's per-replica accounting from those rows.
"""

from __future__ import annotations

import pytest

from edit_lab.config import RunConfig
from edit_lab.records.overlap import Overlap
from edit_lab.records.rundir import RankRecord, merge_metrics, summarize


def train(rank: int, replica: int, step: int, loss: float, t: float, dt: float = 0.1, tokens: int = 512,
          **kw) -> dict:
    return {"kind": "train", "rank": rank, "replica": replica, "shard": rank % 2, "step": step, "loss": loss,
            "tokens": tokens, "t": t, "dt": dt, **kw}


def test_a_replicas_shards_merge_into_one_row_per_step():
    rows = [train(1, 0, 2, 3.0, 1.25, dt=0.2), train(0, 0, 2, 2.0, 1.2, dt=0.3),
            train(2, 1, 1, 4.0, 0.6), train(3, 1, 1, 4.4, 0.7), train(0, 0, 1, 5.0, 0.5), train(1, 0, 1, 5.0, 0.55)]
    merged = merge_metrics(rows)
    assert [(m["step"], m["replica"]) for m in merged] == [(1, 0), (1, 1), (2, 0)]
    last = merged[-1]
    assert last["loss"] == pytest.approx(2.5)  # the mean over the shards
    assert last["tokens"] == 1024  # every shard's tokens
    assert last["t"] == 1.25 and last["dt"] == 0.3  # the latest end, the slowest shard
    assert merged[1]["loss"] == pytest.approx(4.2) and merged[1]["carried"] is False


def test_rows_carried_over_from_a_checkpoint_stay_marked():
    merged = merge_metrics([train(0, 0, 3, 2.0, 0.1, carried=True), train(1, 0, 3, 2.0, 0.1)])
    assert merged == [{"kind": "train", "step": 3, "replica": 0, "loss": 2.0, "tokens": 1024, "t": 0.1, "dt": 0.1,
                       "carried": True}]


def test_the_summary_counts_this_sessions_steps_per_replica_and_the_time_blocked_on_the_sync_group():
    cfg = RunConfig(method="diloco", shards=1, replicas=2, steps=3)
    metrics = merge_metrics([train(0, 0, 0, 9.0, 0.1, carried=True),  # from before a resume: not counted
                             train(0, 0, 1, 3.0, 1.0), train(0, 0, 2, 2.0, 2.0),
                             train(1, 1, 1, 3.5, 1.5), train(1, 1, 2, 2.5, 4.0)]
                            + [{"kind": "eval", "rank": 0, "replica": 0, "shard": 0, "step": 2, "val_loss": 2.2,
                                "t": 4.1, "final": True}])
    # replica 0 waits 1.5 s in the closing sync's all-reduce; replica 1 arrives last and waits 0.1 s
    events = [{"rank": 0, "replica": 0, "shard": 0, "step": 2, "unit": None, "kind": "sync_reduce", "t0": 2.5,
               "t1": 4.0, "bytes": 8, "group": "sync", "data": {}},
              {"rank": 1, "replica": 1, "shard": 0, "step": 2, "unit": None, "kind": "sync_reduce", "t0": 3.9,
               "t1": 4.0, "bytes": 8, "group": "sync", "data": {}}]
    ranks = [RankRecord(rank=r, events=[e for e in events if e["rank"] == r], records=[], metrics=[], memory={},
                        method_info={"r": r}, train_end_s=4.0) for r in (0, 1)]
    s = summarize(cfg, ranks, metrics, start_unix=100.0, overlap=Overlap(events))
    assert s["tokens"] == 4 * 512 and s["wall_s"] == 4.0 and s["tokens_per_s"] == pytest.approx(512.0)
    assert s["steps"] == 3 and s["step_time_s"] == pytest.approx(4.0 / 3)
    assert s["final_val_loss"] == 2.2 and s["final_train_loss"] == pytest.approx(2.25)
    r0, r1 = s["per_replica"]["0"], s["per_replica"]["1"]
    assert (r0["steps"], r0["tokens"], r0["tokens_per_s"]) == (2, 1024, pytest.approx(512.0))
    assert (r1["steps"], r1["tokens_per_s"]) == (2, pytest.approx(256.0))
    assert r0["sync_wait_s"] == pytest.approx(1.5) and r1["sync_wait_s"] == pytest.approx(0.1)
    assert s["method_info"] == {"r": 0} and s["train_end_s"] == 4.0
