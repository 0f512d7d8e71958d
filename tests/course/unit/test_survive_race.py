"""Notebook 10's race (edit_course/lessons/survive_race.py): its definitions on hand-built values."""

from __future__ import annotations

from edit_course.lessons import survive_race as sr


def test_a_death_falls_after_the_first_sync_and_two_rounds_before_the_end():
    for seed in range(200):
        replica, step = sr.draw_death(seed, replicas=16, steps=120, warmup=10, tau=5)
        assert 0 <= replica < 16 and 16 <= step < 110
    assert sr.draw_death(3, 16, 120, 10, 5) == sr.draw_death(3, 16, 120, 10, 5)  # a seed is one death


def test_the_restarts_timeline_is_shifted_by_the_death_and_the_restart():
    resumed = [(10, 4.4, 0.5), (20, 3.7, 0.3), (30, 3.4, 0.8)]  # (step, val, t); step 10's is the checkpoint's past
    assert sr.restart_timeline(death_t=3.0, restart_s=2.0, resumed_evals=resumed, checkpoint_step=14) == [
        (20, 3.7, 5.3), (30, 3.4, 5.8)]
    first = [(10, 4.4, 0.5), (20, 3.69, 1.0)]  # the first run's, before its death at 23: step 20 is after the ckpt
    assert sr.restart_timeline(3.0, 2.0, resumed, 14, first) == [(10, 4.4, 0.5), (20, 3.7, 5.3), (30, 3.4, 5.8)]


def test_the_loss_at_a_time_is_the_newest_validation_at_or_before_it():
    evals = [(10, 4.0, 1.0), (20, 3.5, 2.0), (30, 3.2, 3.0)]
    assert sr.loss_at(evals, 2.0) == 3.5 and sr.loss_at(evals, 2.9) == 3.5 and sr.loss_at(evals, 9.0) == 3.2
    assert sr.loss_at(evals, 0.5) is None


def row(seed, s_lost, r_lost, s_val, r_val):
    return {"seed": seed, "survive": {"lost_tokens": s_lost, "val_at_equal_time": s_val, "end_s": 6.0},
            "restart": {"lost_tokens": r_lost, "val_at_equal_time": r_val, "end_s": 8.0}}


def test_the_verdicts_hold_only_in_every_seed():
    good = [row(0, 1920, 18432, 2.9, 3.1), row(1, 1920, 4096, 3.0, None)]
    assert sr.survival_loses_less(good).ok and sr.survival_ahead_at_equal_time(good).ok
    bad = good + [row(2, 5000, 4096, 3.2, 3.1)]
    assert not sr.survival_loses_less(bad).ok and not sr.survival_ahead_at_equal_time(bad).ok
    assert not sr.survival_loses_less([]).ok


def test_a_resumed_runs_end_leaves_out_the_rows_it_carried_over():
    class Run:  # a resumed run lists the rows before its checkpoint (step 14) on the first run's clock
        metrics = [{"kind": "eval", "step": 10, "val_loss": 4.4, "t": 3.9}, {"kind": "train", "step": 15, "t": 0.1},
                   {"kind": "train", "step": 29, "t": 0.8}, {"kind": "eval", "step": 30, "val_loss": 3.4, "t": 0.85}]
    assert sr._end(Run(), after=14) == 0.85 and sr._end(Run()) == 3.9
