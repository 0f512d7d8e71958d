"""Notebook 06's check cells: EDiT's wait per round, lockstep's share of the capacity bound, A-EDiT's rounds."""

from __future__ import annotations

import pytest

from edit_course.exercises.nb06 import (
    aedit_round_steps,
    check_aedit_round_steps,
    check_edit_wait_ms,
    check_sync_share,
    edit_wait_ms,
    sync_share,
)
from tests.course.exercise_asserts import not_yet as _not_yet


def test_models():
    assert edit_wait_ms(4, 100.0, 200.0) == 400.0
    assert edit_wait_ms(4, 100.0, 100.0) == 0.0
    assert sync_share([4000.0, 2000.0]) == pytest.approx(2 / 3)
    assert sync_share([1000.0] * 4) == 1.0
    assert aedit_round_steps(0.8, [100.0, 200.0]) == [8, 4]


def test_check_edit_wait_ms(capsys):
    assert not check_edit_wait_ms(None)
    assert "Hint" in capsys.readouterr().out
    assert check_edit_wait_ms(400)
    assert check_edit_wait_ms(100.0, interval=1)
    capsys.readouterr()
    _not_yet(capsys, check_edit_wait_ms(100), "too low", "waits for the difference")  # one step's, not τ of them
    _not_yet(capsys, check_edit_wait_ms(800), "too high")  # the slow replica's whole round
    _not_yet(capsys, check_edit_wait_ms(0.4), "seconds")  # the units


def test_check_sync_share(capsys):
    assert not check_sync_share(None)
    assert check_sync_share(2 / 3)
    assert check_sync_share(0.667)
    assert check_sync_share(0.5, paces=(3000.0, 1000.0))
    capsys.readouterr()
    out = _not_yet(capsys, check_sync_share(0.5), "too low", "Capacity bound")  # slow / fast
    assert "0.667" not in out
    _not_yet(capsys, check_sync_share(66.7), "percentage")


def test_check_aedit_round_steps(capsys):
    assert not check_aedit_round_steps(None)
    assert check_aedit_round_steps([8, 4])
    assert check_aedit_round_steps((7, 4))  # ±1: the meeting waits for the step in progress
    capsys.readouterr()
    _not_yet(capsys, check_aedit_round_steps([4, 4]), "same step count", "fits")  # lockstep
    _not_yet(capsys, check_aedit_round_steps([8, 8]), "same step count")
    _not_yet(capsys, check_aedit_round_steps([8, 2]), "the slow replica's count is too low", "fits")
    _not_yet(capsys, check_aedit_round_steps([8]), "one number per replica", "1 number")
    _not_yet(capsys, check_aedit_round_steps("84"), "not a list of numbers")
