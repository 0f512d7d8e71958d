"""Time budgets without processes: the configuration, merging timed validations, and the loss figure."""

from __future__ import annotations

import pytest

from edit_lab.config import ConfigError, RunConfig
from edit_lab.records.rundir import eval_key, merge_metrics


def _eval(rank: int, replica: int, step: int, val: float, t: float, **kw) -> dict:
    return {"kind": "eval", "step": step, "rank": rank, "replica": replica, "shard": 0, "val_loss": val, "t": t, **kw}


def test_timed_validations_are_merged_by_their_scheduled_time_not_by_step():
    # at 2 s the fast replica 0 is at step 40, the slow replica 1 at step 21; the final validation follows
    rows = [_eval(0, 0, 40, 2.5, 2.02, at_s=2.0), _eval(1, 1, 21, 2.7, 2.09, at_s=2.0),
            _eval(0, 0, 80, 2.2, 4.01, at_s=4.0), _eval(1, 1, 41, 2.2, 4.10, at_s=4.0),
            _eval(0, 0, 99, 2.1, 5.3, final=True), _eval(1, 1, 50, 2.1, 5.3, final=True)]
    merged = merge_metrics(rows)
    assert [(m["at_s"] if "at_s" in m else "final") for m in merged] == [2.0, 4.0, "final"]
    first = merged[0]
    assert first["val_loss"] == pytest.approx(2.6) and first["val_loss_spread"] == pytest.approx(0.2)
    assert first["step"] == 40 and first["t"] == 2.09  # the most any replica had reached; the latest end
    assert merged[-1]["final"] and merged[-1]["val_loss_spread"] == 0.0 and merged[-1]["step"] == 99


def test_step_validations_keep_their_step_and_come_in_time_order():
    rows = [_eval(0, 0, 20, 3.0, 1.0), _eval(1, 1, 20, 3.2, 1.1), _eval(0, 0, 10, 3.5, 0.5),
            _eval(0, 0, 30, 2.9, 1.6, final=True)]
    merged = merge_metrics(rows)
    assert [(m["step"], m.get("final", False)) for m in merged] == [(10, False), (20, False), (30, True)]
    assert merged[1]["val_loss"] == pytest.approx(3.1)
    assert eval_key(rows[0]) == (0, 20.0) and eval_key(rows[3]) == (2, 0.0)
    assert eval_key(_eval(0, 0, 5, 1.0, 1.0, at_s=1.5)) == (1, 1.5)


@pytest.mark.parametrize("field, value, allowed", [
    ("time_budget", -1.0, "a finite number >= 0"),
    ("eval_every_s", -0.5, "a finite number >= 0"),
])
def test_budget_fields_are_validated(field, value, allowed):
    with pytest.raises(ConfigError, match=f"^{field}={value!r} is not allowed: {allowed}$"):
        RunConfig(**{field: value}).validate()


def test_an_aedit_period_a_finished_replica_cannot_outlast_is_refused():
    RunConfig(method="aedit", sync_period=20.0, timeout_s=45.0).validate()
    with pytest.raises(ConfigError, match=r"^sync_period=30\.0 is not allowed: at most timeout_s/2 = 22\.5 s"):
        RunConfig(method="aedit", sync_period=30.0, timeout_s=45.0).validate()
    RunConfig(method="edit", sync_period=30.0, timeout_s=45.0).validate()  # only A-EDiT syncs by the clock


def test_a_budget_ignores_steps_for_the_fault_step_check():
    RunConfig(time_budget=10.0, steps=5, fault_rank=0, fault_step=50).validate()
    with pytest.raises(ConfigError, match="^fault_step=50"):
        RunConfig(steps=5, fault_rank=0, fault_step=50).validate()
