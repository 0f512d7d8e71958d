"""Notebook 06's link race (edit_course/claims/regime.py) on hand-built runs whose every number is known."""

from __future__ import annotations

from types import SimpleNamespace

import pytest

from edit_course.claims import regime


def run(loss: float, steps: int, tps: float = 1000.0) -> SimpleNamespace:
    return SimpleNamespace(summary={"final_val_loss": loss, "tokens_per_s": tps,
                                    "per_replica": {"0": {"steps": steps}, "1": {"steps": steps // 2}}})


def races(slow_edit: tuple[float, float] = (3.3, 3.4)) -> dict:
    return {0.0: {"sync": [run(2.9, 80), run(3.0, 80)], "edit": [run(3.3, 90), run(3.5, 90)]},
            0.5: {"sync": [run(3.9, 16), run(4.0, 16)], "edit": [run(*slow_edit[:1], 40), run(slow_edit[1], 40)]}}


def test_the_table_holds_steps_and_the_seeds_mean_and_spread():
    t = regime.table(races())
    assert t.loc[("free link", "sync"), "val loss mean"] == pytest.approx(2.95)
    assert t.loc[("0.5 MB/s link", "edit"), "val loss spread"] == pytest.approx(0.1)
    assert t.loc[("0.5 MB/s link", "sync"), "steps (replica 0)"] == 16 and t.loc[("free link", "edit"), "seeds"] == 2
    assert regime.ranking(races()) == ("lowest mean validation loss first, per link: free link: sync 2.950, edit 3.400; "
                                       "0.5 MB/s link: edit 3.350, sync 3.950")


def test_local_steps_and_the_turned_race_are_verdicts_a_run_can_fail(capsys):
    assert regime.local_trains_more_steps(races(), 0.5).ok
    assert regime.link_turns_the_race(races(), 0.0, 0.5).ok  # 3.95 − 3.35 = 0.6 > spread 0.1, and > −0.45
    # a slow-link gap inside the seeds' spread is no turn
    assert not regime.link_turns_the_race(races(slow_edit=(3.5, 4.3)), 0.0, 0.5).ok
    slow_sync = races()
    slow_sync[0.5]["sync"] = [run(3.9, 50), run(4.0, 50)]
    assert not regime.local_trains_more_steps(slow_sync, 0.5).ok
    assert "✗" in capsys.readouterr().out


def test_aedit_period_adds_one_transfer_to_tau_steps():
    assert regime.aedit_period(0.04, 4, 0.33) == pytest.approx(0.49)
    assert regime.aedit_period(0.04, 4, 0.0) == pytest.approx(0.16)
