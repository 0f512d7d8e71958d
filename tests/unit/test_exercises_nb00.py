"""Notebook 00's check cells: right answers pass, wrong ones raise with an explanation, None only hints."""

from __future__ import annotations

import pytest

from edit_lab.exercises.nb00 import (check_all_gathers_per_step, check_gather_prediction, check_rank, rank_of,
                                     units_of)
from edit_lab.mesh import Mesh


def test_rank_matches_the_mesh():
    mesh = Mesh(rank=9, world_size=12, shards=4, replicas=3, shard_group=None, sync_group=None)
    assert (mesh.replica, mesh.shard) == (2, 1)
    assert rank_of(2, 1, 4) == 9


def test_check_rank(capsys):
    assert check_rank(None) is False
    assert "Hint" in capsys.readouterr().out
    assert check_rank(9) is True
    assert check_rank(3, replica=1, shard=1, shards=2) is True
    with pytest.raises(AssertionError, match="replica 2 starts at rank"):
        check_rank(6)  # shard·R + replica: the transposed numbering


def test_check_all_gathers_per_step(capsys):
    assert units_of("tiny") == 5 and units_of("nano") == 3
    assert check_all_gathers_per_step(None) is False
    assert check_all_gathers_per_step(9) is True  # 5 units forward + 4 blocks again in the backward
    assert check_all_gathers_per_step(5, model="nano") is True
    assert check_all_gathers_per_step(5, reshard_after_forward=False) is True
    with pytest.raises(AssertionError, match="forward only"):
        check_all_gathers_per_step(5)  # the backward re-gathers every block
    with pytest.raises(AssertionError, match="gathers each block again"):
        check_all_gathers_per_step(10)  # the root is not re-gathered
    with pytest.raises(AssertionError, match="reuses"):
        check_all_gathers_per_step(9, reshard_after_forward=False)
    assert "Correct" in capsys.readouterr().out


def test_a_non_number_is_a_wrong_answer_not_a_crash():
    with pytest.raises(AssertionError, match="not a whole number"):
        check_rank("replica 2")
    with pytest.raises(AssertionError):
        check_all_gathers_per_step([5])


def test_check_gather_prediction_never_raises(capsys):
    assert check_gather_prediction(9, 9, "tiny") is True
    assert "match" in capsys.readouterr().out
    assert check_gather_prediction(5, 9, "tiny") is False  # the forward only: said, not raised
    out = capsys.readouterr().out
    assert "Not quite" in out and "again" in out
    assert check_gather_prediction(None, 9, "tiny") is False
    assert "No prediction" in capsys.readouterr().out
    assert check_gather_prediction("nine", 9, "tiny") is False
    assert check_gather_prediction(5, 5, "tiny", reshard_after_forward=False) is True
