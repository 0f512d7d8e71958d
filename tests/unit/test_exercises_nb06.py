"""Notebook 06's check cells: EDiT's wait per round, lockstep's share of the capacity bound, A-EDiT's rounds."""

from __future__ import annotations

import pytest

from edit_lab.exercises.nb06 import (aedit_round_steps, check_aedit_round_steps, check_edit_wait_ms, check_sync_share,
                                     edit_wait_ms, sync_share)


def test_models():
    assert edit_wait_ms(4, 100.0, 200.0) == 400.0
    assert edit_wait_ms(4, 100.0, 100.0) == 0.0
    assert sync_share([4000.0, 2000.0]) == pytest.approx(2 / 3)
    assert sync_share([1000.0] * 4) == 1.0
    assert aedit_round_steps(0.8, [100.0, 200.0]) == [8, 4]


def test_check_edit_wait_ms(capsys):
    assert check_edit_wait_ms(None) is False
    assert "Hint" in capsys.readouterr().out
    assert check_edit_wait_ms(400) is True
    assert check_edit_wait_ms(100.0, interval=1) is True
    with pytest.raises(AssertionError, match="waits for the difference"):
        check_edit_wait_ms(100)  # one step's difference, not τ of them
    with pytest.raises(AssertionError):
        check_edit_wait_ms(800)  # the slow replica's whole round


def test_check_sync_share():
    assert check_sync_share(None) is False
    assert check_sync_share(2 / 3) is True
    assert check_sync_share(0.667) is True
    assert check_sync_share(0.5, paces=(3000.0, 1000.0)) is True
    with pytest.raises(AssertionError, match="Capacity bound"):
        check_sync_share(0.5)  # slow / fast


def test_check_aedit_round_steps():
    assert check_aedit_round_steps(None) is False
    assert check_aedit_round_steps([8, 4]) is True
    assert check_aedit_round_steps((7, 4)) is True  # ±1: the meeting waits for the step in progress
    with pytest.raises(AssertionError, match="fits"):
        check_aedit_round_steps([4, 4])  # lockstep
    with pytest.raises(AssertionError, match="one number per replica"):
        check_aedit_round_steps([8])
