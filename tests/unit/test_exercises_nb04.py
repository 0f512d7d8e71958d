"""Notebook 04's check cells: the unit prefetch cannot hide, one link transfer, blocked time with prefetch."""

from __future__ import annotations

import pytest

from edit_lab.comm import LinkModel
from edit_lab.exercises.nb04 import (check_exposed_with_prefetch, check_transfer_ms, check_unhidden_unit,
                                     exposed_ms, transfer_ms)


def test_transfer_ms_is_the_link_model_of_comm():
    link = LinkModel(latency_s=2e-3, bandwidth_Bps=20e6)
    assert transfer_ms(99_072, 2.0, 20.0) == pytest.approx(link.transfer_time(99_072) * 1e3)
    assert transfer_ms(99_072, 2.0, 20.0) == pytest.approx(6.9536)


def test_exposed_ms_model():
    assert exposed_ms(5, 7.0, 3.0, prefetch=False) == 35.0
    assert exposed_ms(5, 7.0, 3.0, prefetch=True) == 23.0
    assert exposed_ms(5, 2.0, 3.0, prefetch=True) == 2.0  # a fast link: only unit 0 is exposed
    assert exposed_ms(1, 7.0, 3.0, prefetch=True) == 7.0
    assert exposed_ms(0, 7.0, 3.0, prefetch=True) == 0.0


def test_check_unhidden_unit(capsys):
    assert check_unhidden_unit(None) is False
    assert "Hint" in capsys.readouterr().out
    assert check_unhidden_unit(0) is True
    assert "Correct" in capsys.readouterr().out
    with pytest.raises(AssertionError, match="unit 0"):
        check_unhidden_unit(4)  # the last unit is the one overlapped by the most compute before it


def test_check_transfer_ms():
    assert check_transfer_ms(None) is False
    assert check_transfer_ms(6.9536) is True
    assert check_transfer_ms(6.95) is True
    assert check_transfer_ms(1.0 + 1000 / 1e3, nbytes=1000, latency_ms=1.0, bandwidth_mbps=1.0) is True
    with pytest.raises(AssertionError, match="latency"):
        check_transfer_ms(4.9536)  # forgot the latency
    with pytest.raises(AssertionError):
        check_transfer_ms(2 + 99_072 / (20 * 2**20) * 1e3)  # MiB instead of MB: 6.72 ms


def test_check_exposed_with_prefetch():
    assert check_exposed_with_prefetch(None) is False
    assert check_exposed_with_prefetch(23) is True
    assert check_exposed_with_prefetch(10.0, n_units=3, transfer=4.0, compute=1.0) is True
    with pytest.raises(AssertionError, match="Without prefetch: 35"):
        check_exposed_with_prefetch(35)  # prefetch off
    with pytest.raises(AssertionError):
        check_exposed_with_prefetch(7)  # only unit 0: the link is one transfer at a time
