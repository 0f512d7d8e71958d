"""Notebook 01's check cells: sync-group bytes per step and the straggler's cost."""

from __future__ import annotations

import pytest

from edit_lab.exercises.nb01 import (check_sync_bytes_per_step, check_throughput_fraction, check_wait_per_step,
                                     model_parameters, sharded_values)


def test_sizes():
    assert model_parameters("tiny") == 230_976
    assert sharded_values("tiny", 2) == 115_488
    assert sharded_values("nano", 2) == 41_632 // 2


def test_check_sync_bytes_per_step(capsys):
    assert check_sync_bytes_per_step(None) is False
    assert "Hint" in capsys.readouterr().out
    assert check_sync_bytes_per_step(461_952) is True
    assert check_sync_bytes_per_step(4 * 41_632 // 2, model="nano", shards=2) is True
    with pytest.raises(AssertionError, match="all-reduced over the sync group"):
        check_sync_bytes_per_step(4 * 230_976)  # the whole model: forgets the sharding
    with pytest.raises(AssertionError):
        check_sync_bytes_per_step(115_488)  # values, not bytes


def test_check_wait_per_step():
    assert check_wait_per_step(None) is False
    assert check_wait_per_step(40) is True
    assert check_wait_per_step(150.0, compute_ms=50.0, factor=4.0) is True
    with pytest.raises(AssertionError, match="waits in the all-reduce"):
        check_wait_per_step(80)  # the slow replica's whole step


def test_check_throughput_fraction():
    assert check_throughput_fraction(None) is False
    assert check_throughput_fraction(1 / 3) is True
    assert check_throughput_fraction(0.333) is True
    with pytest.raises(AssertionError, match="slowest"):
        check_throughput_fraction(7 / 8 + 1 / 24)  # the average pace: as if the others did not wait


def test_sharded_values_match_the_engine_layout():
    from edit_lab.model import build_model
    from edit_lab.sharding import UnitLayout

    for model in ("nano", "tiny"):
        units = build_model(model, 0).units()
        assert model_parameters(model) == sum(p.numel() for u in units for p in u.parameters())
        for S in (1, 2, 3, 4):
            assert sharded_values(model, S) == sum(UnitLayout.of(u, S).shard_size for u in units)
