"""Training for a wall-clock budget (edit-method.md §12): every method ends in time, on one agreed model.

One replica is made 2× slower. Every replica must stop at its first step start after the budget and
then only end the run: the run ends within the budget plus one (slow) step plus its final sync, without
a deadlock; its replicas must end on bit-identical anchors; the timed validations must happen at the
first step start after their scheduled times; and under A-EDiT the fast replica must train more steps.

Every bound is read from the run's own records (the clock read before a step, what came after the last
one, the run's own slowest step), not from fixed seconds: a busy machine makes every step and every sync
longer, never the protocol different. The one cross-process comparison (a replica stopped by another's
spent budget) allows for the ranks' clocks starting a barrier apart. A-EDiT's fast replica training
about twice the steps of the slow one depends on the machine's speed and load (its wait at a meeting
grows with the slow replica's step, against a fixed period): benchmarks/stragglers.py measures it, with
the period calibrated to the measured step time.
"""

from __future__ import annotations

import pytest

from edit_lab.config import METHODS
from edit_lab.viz import loss_figure
from tests.distributed import CLOCK_SKEW_S

BUDGET = 2.0
EVERY = 0.7
TRAINING_KINDS = ("compute_bwd", "optimizer", "straggle")  # only a training step has these (a validation: forwards)


def _last_checksums(run) -> dict[tuple[int, int], tuple[int, int]]:
    """(replica, unit) -> CRCs (anchor, θ) of shard 0 after the last recorded sync."""
    out: dict[tuple[int, int], tuple[int, int]] = {}
    for e in sorted(run.events_of("checksum"), key=lambda e: e["t0"]):
        if e["shard"] == 0:
            out[(e["replica"], e["unit"])] = (e["data"]["anchor"], e["data"]["theta"])
    return out


@pytest.mark.parametrize("method", METHODS)
def test_every_method_trains_for_its_budget_and_ends_on_one_model(run_small, method):
    # Streaming DiLoCo's H must be a multiple of its 2 fragments (small()'s τ is 3)
    extra = {"sync_interval": 4} if method == "streaming_diloco" else {}
    run = run_small(method=method, shards=1, replicas=2, time_budget=BUDGET, eval_every_s=EVERY, checksums=True,
                    straggler_replicas=(1,), straggler_factor=2.0, sync_period=0.15, steps=3, **extra)
    s = run.summary
    train = [m for m in run.metrics if m["kind"] == "train"]
    rows = {r: sorted((m for m in train if m["replica"] == r), key=lambda m: m["step"]) for r in (0, 1)}
    assert [[m["step"] for m in rows[r]] for r in (0, 1)] == [list(range(len(rows[r]))) for r in (0, 1)]
    slowest_step = max(m["dt"] for m in train)
    # the longest time a replica spent between two of its steps (its clock read, the stop decision, a
    # validation): what also stood between its last clock read and its last step
    between = max(b["t"] - b["dt"] - a["t"] for r in (0, 1) for a, b in zip(rows[r], rows[r][1:]))
    # Streaming DiLoCo: a replica whose budget runs out while a fragment travels trains on to its landing, at
    # most τ (fragment_sync_delay) steps more (edit_lab/core/methods/streaming.py), so that every replica lands it
    overrun = run.config.streaming.fragment_sync_delay if method == "streaming_diloco" else 0
    for r in (0, 1):  # shards=1: replica r is rank r
        last = rows[r][-1]
        # its last step began on a clock below the budget: the clock was read after the step before ended
        assert rows[r][-2 - overrun]["t"] < BUDGET, (r, rows[r][-2 - overrun])
        # and it did not stop early: it left the loop at or after the budget, by its own clock (the next
        # sync-group exchange, finalize's, began after that read) or told by a replica whose budget was
        # spent (the exchange that told it ended after that replica's read; within its last step for the
        # local methods' sync points)
        after = [e for e in run.events if e["rank"] == r and e["group"] == "sync" and e["t0"] >= last["t"]]
        assert after, r  # every method ends with an exchange over the sync group
        assert max(last["t"], min(e["t1"] for e in after)) >= BUDGET - CLOCK_SKEW_S, (r, last, after[0])
        # after its last step the rank only ended the run: no step was trained after the stop
        assert not [e for e in run.events if e["rank"] == r and e["t0"] >= last["t"] and e["kind"] in TRAINING_KINDS]
    # so the training ended within one step (and what stands before a step) after the budget, and then
    # only the final sync (finalize's exchanges, the closing sync, its outer steps) remained
    assert max(rows[r][-1]["t"] for r in (0, 1)) <= BUDGET + (1 + overrun) * (slowest_step + between), \
        (slowest_step, between)
    steps = {int(r): v["steps"] for r, v in s["per_replica"].items()}
    assert steps == {r: len(rows[r]) for r in (0, 1)}
    assert s["steps"] == max(steps.values())  # `steps` (3) is ignored with a budget: the check above shows it
    assert s["train_end_s"] >= max(rows[r][-1]["t"] for r in (0, 1))
    # the sync records are replica 0's. One final sync (none for sync, none when nobody trained since the
    # last): replica 0 records at most two at its last step, a regular sync and, when it stopped right after
    # it while a peer trained on on its own clock (in lockstep past it, or A-EDiT's slower replica since its
    # last meeting), the closing sync that averages the peer's steps; never a third
    at_end = [x for x in run.syncs if x["kind"] == "sync" and x["step"] == steps[0]]
    assert len(at_end) <= 2, (at_end, steps)
    assert sum(1 for x in run.syncs if x.get("final")) <= 1
    evals = [m for m in run.metrics if m["kind"] == "eval"]
    timed = [m["at_s"] for m in evals if "at_s" in m]
    assert timed == pytest.approx([EVERY, 2 * EVERY])
    for m in evals:
        if "at_s" in m:
            assert m["at_s"] <= m["t"]
    for r in (0, 1):  # each replica validated at its first step start at or after the scheduled time
        validations = sorted(run.events_of("eval", r), key=lambda e: e["t0"])
        assert len(validations) == len(timed) + 1  # and the final one
        for at, e in zip(timed, validations):
            k = e["step"]  # the last step trained before it: its clock read came after step k − 1 ended
            assert rows[r][k - 1]["t"] < at <= e["t0"] and rows[r][k]["t"] <= e["t0"], (r, at, e)
    assert evals[-1].get("final") and evals[-1]["val_loss_spread"] == 0.0  # one model, validated by both
    if method != "sync":  # sync keeps no anchor: its replicas apply the same averaged gradient every step
        ck = _last_checksums(run)
        units = {u for _, u in ck}
        assert units and all(ck[(0, u)] == ck[(1, u)] for u in units)  # the same anchor everywhere ...
        assert all(a == theta for a, theta in ck.values())  # ... and θ = a: the run ended on a sync
    if method == "aedit":
        # the fast replica trains on instead of waiting. Replica 1 spins through as long as it computed after
        # every step, so its step lasts at least twice its compute on any machine; every round (0.15 s) holds
        # several of its steps unless a slow step took longer than that, a ~5× slowdown of this machine.
        assert steps[0] > steps[1], steps
        fig = loss_figure(run)  # validation loss against seconds, never rows grouped by step
        assert fig.layout.meta["x"] == "seconds" and len(fig.data) == 1
        assert list(fig.data[0].y) == pytest.approx([m["val_loss"] for m in evals])
    if method in ("sync",):
        assert steps[0] == steps[1]  # lockstep
