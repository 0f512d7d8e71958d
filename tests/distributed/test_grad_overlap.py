"""Issue 48, item 1: `sync`'s gradient all-reduce overlaps the backward, as DDP's and HSDP's do.

Each unit's all-reduce over the sync group leaves as soon as the engine hands its gradient shard over
(`ShardedModel._after_reduce_scatter`: at the end of the unit's backward with one shard, at the end of the next
unit's with several) and travels under the rest of the backward; `after_backward` waits for what is left.

- **The overlap** is asserted on the virtual clock, so that it is the same on any machine: on the issue's run
  (nano, 1 shard x 2 replicas, 12 steps, a 20 MB/s link with 2 ms latency) every rank has a gradient
  all-reduce in flight under its own backward compute for at least half of min(all-reduce time, backward
  time) (`Overlap.under_work`), where the all-reduce after the backward had none; and every all-reduce
  leaves when the rule says, in every method that all-reduces gradients (sync, a Local-SGD method's warm-up).
- **The numbers** do not move: the same tensors are summed by the same collectives, so the final model
  (model.pt) and every loss are bit for bit those of a run with the overlap off (`base.OVERLAP_ENV` = "0",
  the old schedule), on real gloo processes and on the virtual clock.
- **The simulator** (`sim/programs.py`) follows the same schedule: it agrees with the virtual clock on the issue's
  run (the matrix of tests/distributed/test_sim_matches_virtual.py covers the rest).
"""

from __future__ import annotations

from typing import Any

import pytest
import torch

from edit_lab import launch
from edit_lab.config import RunConfig
from edit_lab.core.methods.base import OVERLAP_ENV
from edit_lab.records.run import Run
from tests.distributed.sim_crosscheck import compare
from tests.helpers import small

#: The issue's run: `python -m edit_lab run --method sync --model nano --shards 1 --replicas 2 --steps 12
#: --link-bandwidth-mb-s 20 --link-latency-ms 2` (seq_len, batch size: the config's defaults).
ISSUE = dict(method="sync", model="nano", shards=1, replicas=2, steps=12, link_bandwidth_mb_s=20.0,
             link_latency_ms=2.0, progress=False)


def _launch(tmp_path, name: str, monkeypatch, overlap: bool, cfg: RunConfig) -> Run:
    with monkeypatch.context() as m:
        if not overlap:
            m.setenv(OVERLAP_ENV, "0")
        return launch(cfg.replace(out=str(tmp_path / name)))


def _under_backward(run: Run) -> dict[int, dict[str, float]]:
    """Per rank: its gradient all-reduces' time in flight, its backward compute, and their overlap (seconds)."""
    ar = [e for e in run.events if e["kind"] == "grad_all_reduce"]
    return run.overlap.under_work(ar, {"compute_bwd"})


def _same_numbers(a: Run, b: Run) -> None:
    sa, sb = a.state_dict(), b.state_dict()
    assert sa.keys() == sb.keys()
    differ = [k for k in sa if not torch.equal(sa[k], sb[k])]
    assert not differ, f"model.pt differs in {differ}"
    assert [(m["step"], m["replica"], m["loss"]) for m in a.metrics if m["kind"] == "train"] == \
        [(m["step"], m["replica"], m["loss"]) for m in b.metrics if m["kind"] == "train"]


# ------------------------------------------------------------------------------------ the virtual clock
@pytest.fixture(scope="module")
def issue_runs(tmp_path_factory) -> dict[bool, Run]:
    """The issue's run on the virtual clock, with the overlap (True) and without it (False)."""
    root = tmp_path_factory.mktemp("issue")
    mp = pytest.MonkeyPatch()
    try:
        cfg = RunConfig(clock="virtual", **ISSUE)
        return {on: _launch(root, f"overlap-{on}", mp, on, cfg) for on in (True, False)}
    finally:
        mp.undo()


def test_the_gradient_all_reduce_travels_under_the_backward(issue_runs):
    on, off = (_under_backward(issue_runs[x]) for x in (True, False))
    assert sorted(on) == sorted(off) == [0, 1]
    for rank, u in on.items():
        assert u["under_s"] >= 0.5 * min(u["comm_s"], u["work_s"]), (rank, u)
        assert off[rank]["under_s"] == 0.0, (rank, off[rank])  # issued after the backward: nothing under it
        assert u["work_s"] == pytest.approx(off[rank]["work_s"], rel=1e-12)  # the backward itself is unchanged
    # and the replicas wait less for them (the step is shorter by the hidden part)
    wait = {x: sum(v["sync_wait_s"] for v in issue_runs[x].summary["per_replica"].values()) for x in (True, False)}
    assert wait[True] < wait[False]
    assert issue_runs[True].summary["wall_s"] < issue_runs[False].summary["wall_s"]


def test_the_numbers_are_those_of_the_all_reduce_after_the_backward(issue_runs):
    _same_numbers(issue_runs[True], issue_runs[False])


def test_the_simulator_follows_the_same_schedule(issue_runs):
    check = compare(issue_runs[True])
    assert check.same_collectives, check.first_difference()
    assert check.timeline_error <= 1e-9, check.worst_time()


def _bwd_ends(events: list[dict[str, Any]]) -> dict[tuple[int, int], float]:
    """(step, unit): the end of the unit's backward compute (the root unit's: its embedding part, the last)."""
    out: dict[tuple[int, int], float] = {}
    for e in events:
        if e["kind"] == "compute_bwd" and (e["unit"] != 0 or (e["data"] or {}).get("part") == "embed"):
            out[(e["step"], e["unit"])] = e["t1"]
    return out


@pytest.mark.parametrize("kw", [dict(method="sync", shards=1), dict(method="sync", shards=2),
                                dict(method="edit", shards=1), dict(method="diloco", shards=2)],
                         ids=["sync-1x2", "sync-2x2", "edit-1x2", "diloco-2x2"])
def test_each_all_reduce_leaves_when_its_shard_is_handed_over(tmp_path, kw):
    """One shard: unit l's all-reduce is issued at the end of unit l's backward. Several: at the end of unit
    l−1's (unit l's reduce-scatter had that backward to land), the root unit's, the last, at the end of the
    backward. EDiT and DiLoCo: in their W warm-up steps only."""
    run = launch(small(clock="virtual", replicas=2, steps=6, warmup_steps=3, sync_interval=2, out=str(tmp_path / "r"),
                       **kw))
    S, units = run.config.shards, 3  # nano: the root unit and two blocks
    warm = range(run.config.steps) if kw["method"] == "sync" else range(run.config.schedule.warmup_steps)
    for rank in range(run.config.world_size):
        evs = [e for e in run.events if e["rank"] == rank]
        ends = _bwd_ends(evs)
        issued = {(e["step"], e["unit"]): e["t0"] for e in evs if e["kind"] == "grad_all_reduce"}
        assert sorted(issued) == [(s, u) for s in warm for u in range(units)]
        for (step, unit), t0 in issued.items():
            handed = unit if S == 1 else (unit - 1 if unit > 1 else 0)  # block 1's: at the embedding's end
            assert t0 == ends[(step, handed)], (rank, step, unit)
    assert compare(run).timeline_error <= 1e-9


# ------------------------------------------------------------------------------------ real processes
@pytest.mark.parametrize("cfg", [
    RunConfig(**ISSUE),
    small(method="sync", shards=2, replicas=2, steps=6, link_latency_ms=2.0),
    small(method="diloco", shards=1, replicas=2, steps=6, warmup_steps=3, sync_interval=2),
], ids=["sync-1x2-issue", "sync-2x2", "diloco-1x2-warmup"])
def test_real_runs_are_bit_for_bit_those_without_the_overlap(tmp_path, monkeypatch, cfg):
    """Real gloo processes: the overlapped run and the old schedule (the switch, in every rank's environment)
    train the same floats; only the all-reduces' times differ (the switch works: with it off none starts before
    the last backward compute of its step ends; with it on, some do at every step that all-reduces)."""
    on = _launch(tmp_path, "on", monkeypatch, True, cfg)
    off = _launch(tmp_path, "off", monkeypatch, False, cfg)
    _same_numbers(on, off)
    for run, early in ((on, True), (off, False)):
        for rank in range(cfg.world_size):
            evs = [e for e in run.events if e["rank"] == rank]
            last: dict[int, float] = {}
            for e in evs:
                if e["kind"] == "compute_bwd":
                    last[e["step"]] = max(last.get(e["step"], 0.0), e["t1"])
            starts: dict[int, list[bool]] = {}
            for e in evs:
                if e["kind"] == "grad_all_reduce":
                    starts.setdefault(e["step"], []).append(e["t0"] < last[e["step"]])
            assert starts and all(any(v) == early for v in starts.values()), (early, rank, starts)
