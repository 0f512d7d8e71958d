"""The Chrome / Perfetto trace (`trace.chrome_trace`) of hand-written events of two ranks.

A real run's trace.json is only checked end to end by the distributed tests; here the lanes, the
process names, the times in microseconds and the hidden / exposed split of a collective are checked
value by value on events whose overlap is known by construction.
"""

from __future__ import annotations

import pytest

from edit_lab.config import RunConfig
from edit_lab.records.trace import chrome_trace, lane


def ev(rank: int, kind: str, t0: float, t1: float, group: str | None = None, unit: int | None = None,
       **data) -> dict:
    return {"rank": rank, "replica": rank, "shard": 0, "step": 4, "unit": unit, "kind": kind, "t0": t0, "t1": t1,
            "bytes": 1000 if group else 0, "group": group, "data": data}


def events() -> list[dict]:
    # rank 0: a 0.4 s forward; a sync all-reduce issued at 0.1, done at 0.6: hidden 0.3 s under the forward,
    # exposed 0.2 s (the wait at 0.4..0.6, after the forward ended)
    return [ev(0, "compute_fwd", 0.0, 0.4),
            ev(0, "sync_reduce", 0.1, 0.6, group="sync", unit=2, overlapped=True),
            ev(0, "wait", 0.4, 0.6, group="sync", unit=2, on="sync_reduce"),
            ev(1, "all_gather", 0.0, 0.05, group="shard", unit=0),
            ev(1, "compute_fwd", 0.05, 0.3)]


def test_lanes_compute_shard_group_sync_group():
    assert lane(ev(0, "compute_bwd", 0, 1)) == (1, "compute")
    assert lane(ev(0, "wait", 0, 1, group="sync")) == (1, "compute")  # a wait is the rank blocked, not a collective
    assert lane(ev(0, "all_gather", 0, 1, group="shard")) == (2, "comm: shard group")
    assert lane(ev(0, "sync_reduce", 0, 1, group="sync")) == (3, "comm: sync group")
    assert lane(ev(0, "barrier", 0, 1, group="world")) == (3, "comm: sync group")


def test_one_process_per_rank_named_by_replica_and_shard_and_one_thread_per_lane():
    trace = chrome_trace(events(), RunConfig(method="edit", shards=1, replicas=2))
    meta = [e for e in trace["traceEvents"] if e["ph"] == "M"]
    names = {(e["pid"], e["name"]): e["args"] for e in meta}
    assert names[(0, "process_name")] == {"name": "rank 0 (replica 0, shard 0)"}
    assert names[(1, "process_sort_index")] == {"sort_index": 1}
    threads = sorted((e["pid"], e["tid"], e["args"]["name"]) for e in meta if e["name"] == "thread_name")
    assert threads == [(0, 1, "compute"), (0, 3, "comm: sync group"), (1, 1, "compute"), (1, 2, "comm: shard group")]
    assert trace["otherData"] == {"method": "edit", "shards": 1, "replicas": 2}
    assert trace["displayTimeUnit"] == "ms"


def test_spans_are_in_microseconds_and_a_collective_carries_its_split():
    spans = [e for e in chrome_trace(events())["traceEvents"] if e["ph"] == "X"]
    assert len(spans) == 5
    reduce = next(e for e in spans if e["cat"] == "sync_reduce")
    assert reduce["name"] == "sync_reduce u2" and (reduce["pid"], reduce["tid"]) == (0, 3)
    assert reduce["ts"] == pytest.approx(0.1e6) and reduce["dur"] == pytest.approx(0.5e6)
    args = reduce["args"]
    assert args["hidden_ms"] == pytest.approx(300.0) and args["exposed_ms"] == pytest.approx(200.0)
    assert args["other_ms"] == pytest.approx(0.0, abs=1e-9)
    assert args["step"] == 4 and args["bytes"] == 1000 and args["group"] == "sync" and args["overlapped"] is True
    forward = next(e for e in spans if e["cat"] == "compute_fwd" and e["pid"] == 0)
    assert forward["name"] == "compute_fwd" and "hidden_ms" not in forward["args"]  # compute has no split
    # nothing of rank 1 was in flight under its compute: the all-gather is exposed in full
    gather = next(e for e in spans if e["cat"] == "all_gather")
    assert gather["args"]["exposed_ms"] == pytest.approx(50.0) and gather["args"]["hidden_ms"] == 0.0


def test_a_span_with_its_end_before_its_start_has_zero_duration_and_no_config_gives_no_meta():
    trace = chrome_trace([ev(0, "optimizer", 1.0, 0.999)])
    (span,) = [e for e in trace["traceEvents"] if e["ph"] == "X"]
    assert span["dur"] == 0.0
    assert trace["otherData"] == {}
