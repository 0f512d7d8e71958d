"""Training for a wall-clock budget (edit-method.md §12): every method ends in time, on one agreed model.

One replica is made 2× slower. Every method must stop within the budget plus one (slow) step plus its
final sync, without a deadlock; its replicas must end on bit-identical anchors; the timed validations
must happen at the requested times; and under A-EDiT the fast replica must train about twice the steps.
"""

from __future__ import annotations

import pytest

from edit_lab.config import METHODS
from edit_lab.viz import loss_figure

BUDGET = 2.0
EVERY = 0.7
SLACK_S = 0.5  # the final sync of the nano model takes milliseconds; room for a loaded CI machine


def _last_checksums(run) -> dict[tuple[int, int], tuple[int, int]]:
    """(replica, unit) -> CRCs (anchor, θ) of shard 0 after the last recorded sync."""
    out: dict[tuple[int, int], tuple[int, int]] = {}
    for e in sorted(run.events_of("checksum"), key=lambda e: e["t0"]):
        if e["shard"] == 0:
            out[(e["replica"], e["unit"])] = (e["data"]["anchor"], e["data"]["theta"])
    return out


@pytest.mark.parametrize("method", METHODS)
def test_every_method_trains_for_its_budget_and_ends_on_one_model(run_small, method):
    run = run_small(method=method, shards=1, replicas=2, time_budget=BUDGET, eval_every_s=EVERY, checksums=True,
                    straggler_replicas=(1,), straggler_factor=2.0, sync_period=0.15, steps=3)
    s = run.summary
    train = [m for m in run.metrics if m["kind"] == "train"]
    slowest_step = max(m["dt"] for m in train)
    assert s["train_end_s"] <= BUDGET + slowest_step + SLACK_S, (s["train_end_s"], slowest_step)
    # no replica stopped early: each one's last step started before the budget ran out, its next would not have
    for r in (0, 1):
        last = max(m["t"] for m in train if m["replica"] == r)
        assert last >= BUDGET - slowest_step - SLACK_S
    steps = {int(r): v["steps"] for r, v in s["per_replica"].items()}
    assert s["steps"] == max(steps.values()) > 3  # `steps` is ignored with a budget
    evals = [m for m in run.metrics if m["kind"] == "eval"]
    timed = [m["at_s"] for m in evals if "at_s" in m]
    assert timed == pytest.approx([EVERY, 2 * EVERY])
    for m in evals:
        if "at_s" in m:
            assert m["at_s"] <= m["t"] <= m["at_s"] + slowest_step + SLACK_S
    assert evals[-1].get("final") and evals[-1]["val_loss_spread"] == 0.0  # one model, validated by both
    if method != "sync":  # sync keeps no anchor: its replicas apply the same averaged gradient every step
        ck = _last_checksums(run)
        units = {u for _, u in ck}
        assert units and all(ck[(0, u)] == ck[(1, u)] for u in units)  # the same anchor everywhere ...
        assert all(a == theta for a, theta in ck.values())  # ... and θ = a: the run ended on a sync
    if method == "aedit":
        assert steps[0] / steps[1] >= 1.6, steps  # the fast replica trains on instead of waiting
        fig = loss_figure(run)  # validation loss against seconds, never rows grouped by step
        assert fig.layout.meta["x"] == "seconds" and len(fig.data) == 1
        assert list(fig.data[0].y) == pytest.approx([m["val_loss"] for m in evals])
    if method in ("sync",):
        assert steps[0] == steps[1]  # lockstep
