"""Notebook 10's race (edit_course/lessons/survive_race.py): its definitions on hand-built values."""

from __future__ import annotations

import pytest

from edit_course.lessons import survive_race as sr


def test_deaths_fall_after_the_first_sync_and_two_rounds_before_the_end_and_allow_the_replacements_back():
    counts = set()
    for seed in range(200):
        deaths = sr.draw_deaths(seed, replicas=16, steps=120, warmup=10, tau=5, rejoin_after=10)
        counts.add(len(deaths))
        steps = [d for _, d in deaths]
        assert steps == sorted(steps) and all(b - a > 5 for a, b in zip(steps, steps[1:]))  # more than τ apart
        assert all(0 <= r < 16 and 16 <= d < 110 for r, d in deaths)
        back = {}
        for r, d in deaths:  # a replica dies again only once its replacement is surely back
            assert d > back.get(r, -1)
            back[r] = d + 10 + 5
    assert counts == {2, 3, 4}  # random deaths: 2 to 4 per run
    assert sr.draw_deaths(3, 16, 120, 10, 5) == sr.draw_deaths(3, 16, 120, 10, 5)  # a seed is one schedule
    small = sr.draw_deaths(0, 4, 40, 10, 5)
    assert all(16 <= d < 30 for _, d in small)


def test_the_restarts_lose_every_replica_s_steps_since_each_checkpoint():
    # deaths at 23 and 57, checkpoints at 20 and 50: (3 + 7) steps × 16 replicas × 128 tokens
    assert sr.lost_by_restarts([23, 57], [20, 50], replicas=16, tokens=128) == 10 * 16 * 128
    assert sr.lost_by_restarts([], [], 16, 128) == 0


def test_the_restarts_timeline_chains_the_segments():
    first = [(10, 4.4, 0.5), (20, 3.69, 1.0)]  # from scratch, dies at 23 (t 1.2), checkpoint at 14
    second = [(10, 4.4, 9.9), (20, 3.7, 0.3), (30, 3.4, 0.8), (40, 3.3, 1.3)]  # from 14 (its row at 10 carried
    # over, on the old clock), dies at 43 (t 1.5), checkpoint at 34
    last = [(30, 3.39, 7.0), (40, 3.2, 0.4), (50, 3.1, 0.9)]  # from 34 to the end
    evals, last_start = sr.restart_timeline([(first, -1, 14, 1.2), (second, 14, 34, 1.5), (last, 34, float("inf"), None)],
                                            restart_s=2.0)
    # the first's 20 is of a model the restart throws away (after its checkpoint at 14), as is the second's 40
    assert [e[:2] for e in evals] == [(10, 4.4), (20, 3.7), (30, 3.4), (40, 3.2), (50, 3.1)]
    assert [e[2] for e in evals] == pytest.approx([0.5, 3.5, 4.0, 7.1, 7.6])  # shifted by 1.2 + 2, then + 1.5 + 2
    assert last_start == pytest.approx(1.2 + 2.0 + 1.5 + 2.0)


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
