"""Notebook 07's check cells: torchrun's sizes and where a global rank runs."""

from __future__ import annotations

from edit_course.exercises.nb07 import (
    check_machine_of_rank,
    check_prediction_same_bits,
    check_torchrun_sizes,
    machine_of_rank,
    torchrun_sizes,
)
from tests.course.exercise_asserts import not_yet as _not_yet


def test_mapping_agrees_with_the_mesh_numbering():
    S, R = 8, 4
    assert torchrun_sizes(S, R) == (4, 8)
    for rank in range(S * R):
        machine, local = machine_of_rank(rank, S)
        assert machine * S + local == rank  # torchrun: GROUP_RANK·nproc + LOCAL_RANK
        assert (machine, local) == (rank // S, rank % S)  # the mesh: (replica, shard)


def test_check_torchrun_sizes(capsys):
    assert not check_torchrun_sizes(None)
    assert "Hint" in capsys.readouterr().out
    assert check_torchrun_sizes((4, 8))
    assert check_torchrun_sizes([2, 2], shards=2, replicas=2)
    capsys.readouterr()
    _not_yet(capsys, check_torchrun_sizes((8, 4)), "--nnodes is too high", "cross the network")  # swapped
    _not_yet(capsys, check_torchrun_sizes((32,)), "two numbers")
    _not_yet(capsys, check_torchrun_sizes("4 8"), "not a list of numbers")


def test_check_machine_of_rank(capsys):
    assert not check_machine_of_rank(None)
    assert check_machine_of_rank((2, 5))
    assert check_machine_of_rank([1, 0], rank=2, shards=2)
    capsys.readouterr()
    out = _not_yet(capsys, check_machine_of_rank((5, 2)), "machine is too high", "local rank is too low",
                   "21 = 8·m + local rank")
    assert "8·2" not in out  # the right pair is not given away


def test_check_prediction_same_bits(capsys):
    assert not check_prediction_same_bits(None, True)
    out = capsys.readouterr().out  # locked: what the run found waits for a prediction
    assert out.startswith("Not answered yet.") and "Bit-for-bit" not in out
    assert check_prediction_same_bits(True, True)
    assert "Bit-for-bit equal: True" in capsys.readouterr().out
    assert not check_prediction_same_bits(False, True)
    assert "Not this time" in capsys.readouterr().out
    assert check_prediction_same_bits(False, False)
