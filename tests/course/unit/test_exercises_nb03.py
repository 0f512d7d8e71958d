"""Notebook 03's check cells: the 2-D mesh's sync groups and the outer state's memory (2·P/S)."""

from __future__ import annotations

from edit_course.exercises.nb03 import check_state_prediction, check_sync_group_fn, sync_group
from edit_lab.core.mesh import Mesh
from tests.course.exercise_asserts import not_yet as _not_yet


def test_sync_group_matches_the_mesh():
    for rank in range(12):
        mesh = Mesh(rank=rank, world_size=12, shards=4, replicas=3, shard_group=None, sync_group=None)
        assert sync_group(rank, 4, 3) == mesh.sync_group_ranks()


def test_check_sync_group_fn_against_the_mesh(capsys):
    assert check_sync_group_fn(lambda rank, S, R: [r * S + rank % S for r in range(R)])
    assert check_sync_group_fn(sync_group)
    assert "Correct" in capsys.readouterr().out
    # what the notebook ships: the shard group
    shipped = check_sync_group_fn(lambda rank, S, R: [rank // S * S + s for s in range(S)])
    assert not shipped and shipped.state == "not answered yet"
    assert capsys.readouterr().out.startswith("Not answered yet. Hint: for rank 0 on S=4 × R=3 this gives its shard group")
    # the transposed numbering (rank = shard·R + replica)
    assert not check_sync_group_fn(lambda rank, S, R: [rank % S * R + r for r in range(R)])
    assert "the mesh says" in capsys.readouterr().out
    _not_yet(capsys, check_sync_group_fn(lambda rank, S, R: None), "returned None")  # explained, not raised
    _not_yet(capsys, check_sync_group_fn(lambda rank, S, R: [][rank]), "raised IndexError")
    _not_yet(capsys, check_sync_group_fn(lambda rank, S, R: ["a"]), "a list of ranks")


def test_check_state_prediction(capsys):
    assert check_state_prediction(0.5, 0.5, 4)
    assert not check_state_prediction(2.0, 0.5, 4)  # unsharded DiLoCo's 2·P
    assert "2/S = 2/4" in capsys.readouterr().out
    assert not check_state_prediction(None, 0.5, 4)
