"""Notebook 07's check cells: torchrun's sizes and where a global rank runs."""

from __future__ import annotations

import pytest

from edit_lab.exercises.nb07 import (check_machine_of_rank, check_prediction_same_bits, check_torchrun_sizes,
                                     machine_of_rank, torchrun_sizes)


def test_mapping_agrees_with_the_mesh_numbering():
    S, R = 8, 4
    assert torchrun_sizes(S, R) == (4, 8)
    for rank in range(S * R):
        machine, local = machine_of_rank(rank, S)
        assert machine * S + local == rank  # torchrun: GROUP_RANK·nproc + LOCAL_RANK
        assert (machine, local) == (rank // S, rank % S)  # the mesh: (replica, shard)


def test_check_torchrun_sizes(capsys):
    assert check_torchrun_sizes(None) is False
    assert "Hint" in capsys.readouterr().out
    assert check_torchrun_sizes((4, 8)) is True
    assert check_torchrun_sizes([2, 2], shards=2, replicas=2) is True
    with pytest.raises(AssertionError, match="cross the network"):
        check_torchrun_sizes((8, 4))  # swapped
    with pytest.raises(AssertionError, match="two numbers"):
        check_torchrun_sizes((32,))


def test_check_machine_of_rank():
    assert check_machine_of_rank(None) is False
    assert check_machine_of_rank((2, 5)) is True
    assert check_machine_of_rank([1, 0], rank=2, shards=2) is True
    with pytest.raises(AssertionError, match="21 = 8·2 \\+ 5"):
        check_machine_of_rank((5, 2))


def test_check_prediction_same_bits(capsys):
    assert check_prediction_same_bits(None, True) is False
    assert "Bit-for-bit equal: True" in capsys.readouterr().out
    assert check_prediction_same_bits(True, True) is True
    assert check_prediction_same_bits(False, True) is False
    assert "Not this time" in capsys.readouterr().out
    assert check_prediction_same_bits(False, False) is True
