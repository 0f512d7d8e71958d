"""The preview simulator's deaths and joins on typed-in costs (no torch, no run): the episode's times by hand.

The cross-check against the virtual clock is tests/distributed/test_sim_survive_matches_virtual.py; here the
constants of `clock/survive_costs.py` are checked to be the ones charged, and the preview shows a survival run.
"""

from __future__ import annotations

import pytest

from edit_lab.clock.costs import Costs
from edit_lab.clock.sim.predict import simulate
from edit_lab.clock.survive_costs import CONFIRM_KILL_S, VIEW_CHANGE_S
from tests.helpers import small

COSTS = Costs.uniform(units=3, fwd_ms=2.0, bwd_ms=4.0, other_ms=1.0, unit_mb=0.1, latency_ms=0.5,
                      bandwidth_gbps=0.1)
EPISODE = dict(shards=1, replicas=3, steps=60, warmup_steps=10, sync_interval=5, survive=True, fault_replica=1,
               fault_replica_step=20, rejoin_step=40)


def _train_end(pred, replica: int, step: int) -> float:
    return next(m["t"] for m in pred.metrics if m["replica"] == replica and m["step"] == step)


def test_a_kill_and_a_join_in_diloco_are_charged_as_the_virtual_clock_charges_them():
    pred = simulate(small(method="diloco", **EPISODE), COSTS)
    views = pred.summary["survival"]["views"]
    assert [v["members"] for v in views] == [[0, 1, 2], [0, 2], [0, 1, 2]]
    death = pred.summary["survival"]["deaths"][0]
    assert views[1]["t"] == pytest.approx(death["died_at"] + CONFIRM_KILL_S)
    asked = next(e["t1"] for e in pred.events if (e["replica"], e["step"], e["kind"]) == (0, 39, "optimizer"))
    assert views[2]["t"] == pytest.approx(asked)  # asked by replica 0 at the start of its sync after step 39
    assert {r: v["steps"] for r, v in pred.summary["per_replica"].items()} == {"0": 60, "1": 20, "2": 60}
    # the replacement reads the donor's state (an estimate: four copies of the model) and builds the view's group
    state = 4 * COSTS.model_bytes
    joined_at = views[2]["t"] + COSTS.collective_s(state) + VIEW_CHANGE_S
    first = min(e["t0"] for e in pred.events if e["replica"] == 1 and e["kind"] == "sync_reduce")
    assert first == pytest.approx(joined_at)


def test_a_hang_is_found_after_the_timeout():
    pred = simulate(small(method="edit", fault_replica_kind="hang", timeout_s=8.0, **EPISODE), COSTS)
    death = pred.summary["survival"]["deaths"][0]
    assert death["t"] - death["died_at"] == pytest.approx(8.0 + 2.0)  # timeout_s + the settle, max(1, 8/4)
    # the survivors' sync at 20 waited timeout_s in the failed exchange, then for the view, then retried the step
    assert _train_end(pred, 0, 20) - _train_end(pred, 0, 19) > 10.0


def test_the_preview_shows_a_survival_run_and_says_why_not_when_refused():
    from edit_lab.ui.preview import LabPreview

    cfg = small(method="edit", **EPISODE)
    lab = LabPreview(cfg, lambda: cfg, [])
    lab.costs = COSTS
    assert lab.predict() is not None and lab.prediction is None
    lab.config = lambda: cfg.replace(survive_min_replicas=3)
    assert lab.predict() is None and "survive_min_replicas=3" in lab.refused
