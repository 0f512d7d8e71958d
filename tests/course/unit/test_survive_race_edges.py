"""Edges of notebook 10's race (edit_course/lessons/survive_race.py; issue 50's edge review): a death right before,
at and right after a checkpoint, at the last step and at step 0, R = 2, a checkpoint interval longer than the run,
a restart that costs 0 s, and the loss at equal time when one run ends before the other. Small races on the virtual
clock (R = 2, 30 steps of nano: seconds), the tokens lost checked against the arithmetic by hand."""

from __future__ import annotations

import pytest

from edit_course.lessons import survive_race as sr
from edit_lab import ConfigError

TOKENS = 32 * 4  # seq_len × batch_size: one replica-step of nano in the race
RACE = dict(replicas=2, steps=30, warmup=4, tau=4, rejoin_after=4, checkpoint_every=1, restart_s=1.0, eval_every=5)


def test_a_run_too_short_for_a_death_is_refused_naming_steps():
    with pytest.raises(ValueError, match=r"^no death fits a run of 12 steps \(warm-up 2, τ 3\)"):
        sr.draw_deaths(0, replicas=2, steps=12, warmup=2, tau=3)
    assert [d for _, d in sr.draw_deaths(0, replicas=2, steps=13, warmup=2, tau=3)] == [6]  # exactly one step left


def test_a_death_at_step_0_is_refused_before_launch(tmp_path):
    with pytest.raises(ConfigError, match=r"^fault_replica_step=0 is not allowed: a step after warmup_steps=4"):
        sr.race_seed(0, tmp_path, deaths=[(1, 0)], **RACE)


@pytest.mark.parametrize("death, checkpoint, restart_lost", [
    ((1, 15), 12, 3 * 2 * TOKENS),  # right before the checkpoint at 16: the restart loses 12, 13, 14 of both
    ((1, 16), 16, 0),  # at the step a checkpoint was taken (the sync before step 16): the restart loses nothing
    ((1, 17), 16, 1 * 2 * TOKENS),  # right after it: step 16 of both replicas
    ((0, 29), 28, 1 * 2 * TOKENS),  # the last step, replica 0
])
def test_the_tokens_each_way_throws_away(tmp_path, death, checkpoint, restart_lost):
    row = sr.race_seed(0, tmp_path, deaths=[death], **RACE)
    assert (tuple(row["deaths"][0]), row["checkpoint_steps"][0]) == (death, checkpoint)
    assert row["restart"]["lost_tokens"] == restart_lost == (death[1] - checkpoint) * 2 * TOKENS
    # the restart resumes exactly from its checkpoint and trains on without a death: the same final model each time
    assert row["restart"]["val_end"] == pytest.approx(3.6377179622650146, abs=1e-6)


def test_a_death_right_after_a_checkpoint_fails_the_verdict_as_its_caveat_says(tmp_path):
    row = sr.race_seed(0, tmp_path, deaths=[(1, 16)], **RACE)
    verdict = sr.survival_loses_less([row])
    assert not verdict.ok and f"seed 0: {row['survive']['lost_tokens']:,} against 0" in verdict.numbers


def test_a_checkpoint_interval_longer_than_the_run_restarts_from_scratch_at_no_cost(tmp_path):
    row = sr.race_seed(0, tmp_path, deaths=[(1, 21)], **{**RACE, "checkpoint_every": 100, "restart_s": 0.0,
                                                         "eval_every": 10})
    assert row["checkpoint_steps"] == [0] and row["restart"]["lost_tokens"] == 21 * 2 * TOKENS
    # no checkpoint, no restart cost: the restart from scratch validates its step 10 before survival ends
    assert row["restart"]["val_at_equal_time"] == pytest.approx(4.6496, abs=1e-3)  # its own step 10, at 1.52 s
    assert sr.survival_ahead_at_equal_time([row]).ok


def test_survival_loses_the_dead_replica_s_steps_from_its_last_sync_to_the_asked_join(tmp_path):
    """The survivors see the death's view at sync 20's start (no failed collective) and ask for the replacement due
    there in that view (the review found it joined one round later, at 24, and lost 8 replica-steps)."""
    row = sr.race_seed(0, tmp_path, deaths=[(1, 16)], **RACE)  # rejoin_step = 20, a sync step
    assert row["survive"]["lost_tokens"] == (20 - 16) * TOKENS


def test_the_loss_at_equal_time_when_one_run_ends_first():
    restart = [(10, 4.0, 1.0), (30, 3.2, 2.0)]  # ends at 2.0, before survival's 2.5: its last validation counts
    survive = [(10, 4.0, 1.0), (30, 3.4, 2.5)]
    assert sr.loss_at(restart, 2.5) == 3.2 and sr.loss_at(survive, 2.5) == 3.4
    assert not sr.survival_ahead_at_equal_time([{"seed": 0, "survive": {"val_at_equal_time": 3.4, "end_s": 2.5},
                                                 "restart": {"val_at_equal_time": 3.2, "end_s": 2.0}}]).ok
    assert sr.loss_at(survive, 2.5 - 1e-13) == 3.4  # at the end time exactly, float rounding of the sum included
    assert sr.loss_at([], 9.0) is None
    # a restart with no checkpoint and no validation yet after its restart: none
    evals, _ = sr.restart_timeline([([(10, 4.0, 0.5)], -1, 0, 1.0), ([(10, 4.1, 0.6)], 0, float("inf"), None)], 0.0)
    assert evals == [(10, 4.1, 1.6)]
