"""Notebook 00's check cells: right answers pass, wrong ones print why (never raise), None only hints."""

from __future__ import annotations

from edit_course.exercises.nb00 import (
    check_all_gathers_per_step,
    check_gather_prediction,
    check_rank,
    rank_of,
    units_of,
)
from edit_lab.core.mesh import Mesh
from tests.course.exercise_asserts import not_yet as _not_yet


def test_rank_matches_the_mesh():
    mesh = Mesh(rank=9, world_size=12, shards=4, replicas=3, shard_group=None, sync_group=None)
    assert (mesh.replica, mesh.shard) == (2, 1)
    assert rank_of(2, 1, 4) == 9


def test_check_rank(capsys):
    assert not check_rank(None)
    assert "Hint" in capsys.readouterr().out
    assert check_rank(9)
    assert check_rank(3, replica=1, shard=1, shards=2)
    capsys.readouterr()
    out = _not_yet(capsys, check_rank(6), "shard by shard")  # shard·S + replica: the mesh read transposed
    out += _not_yet(capsys, check_rank(5), "5 is too low", "first rank of replica 2's group")
    out += _not_yet(capsys, check_rank(11), "11 is too high")
    assert "9" not in out and "2·4" not in out and "8" not in out  # neither the rank nor the group's start
    _not_yet(capsys, check_rank(9.5), "not a whole number")


def test_check_all_gathers_per_step(capsys):
    assert units_of("tiny") == 5 and units_of("nano") == 3
    assert not check_all_gathers_per_step(None)
    assert check_all_gathers_per_step(9)  # 5 units forward + 4 blocks again in the backward
    assert check_all_gathers_per_step(5, model="nano")
    assert check_all_gathers_per_step(5, reshard_after_forward=False)
    assert "Correct" in capsys.readouterr().out
    _not_yet(capsys, check_all_gathers_per_step(5), "forward only")  # the backward re-gathers every block
    out = _not_yet(capsys, check_all_gathers_per_step(10), "too high", "gathers each block again")  # root: not again
    assert "9" not in out  # the right number is not given away
    _not_yet(capsys, check_all_gathers_per_step(9, reshard_after_forward=False), "too high", "reuses")


def test_a_non_number_is_a_wrong_answer_not_a_crash(capsys):
    _not_yet(capsys, check_rank("replica 2"), "'replica 2' is not a number", "a whole number")
    _not_yet(capsys, check_all_gathers_per_step([5]), "[5] is not a number")


def test_check_gather_prediction_never_raises(capsys):
    assert check_gather_prediction(9, 9, "tiny")
    assert "match" in capsys.readouterr().out
    assert not check_gather_prediction(5, 9, "tiny")  # the forward only: said, not raised
    out = capsys.readouterr().out
    assert "Not quite" in out and "again" in out
    assert not check_gather_prediction(None, 9, "tiny")
    out = capsys.readouterr().out
    assert out.startswith("Not answered yet.") and "9" not in out  # locked: the measured count stays hidden
    assert not check_gather_prediction("nine", 9, "tiny")
    assert check_gather_prediction(5, 5, "tiny", reshard_after_forward=False)
