"""Notebook 03's check cells: the 2-D mesh's sync groups and the outer state's memory (2·P/S)."""

from __future__ import annotations

import pytest

from edit_lab.exercises.nb03 import check_method_state_bytes, check_sync_group, method_state_bytes, sync_group
from edit_lab.mesh import Mesh


def test_sync_group_matches_the_mesh():
    for rank in range(12):
        mesh = Mesh(rank=rank, world_size=12, shards=4, replicas=3, shard_group=None, sync_group=None)
        assert sync_group(rank, 4, 3) == mesh.sync_group_ranks()


def test_check_sync_group(capsys):
    assert check_sync_group(None) is False
    assert "Hint" in capsys.readouterr().out
    assert check_sync_group([2, 6, 10]) is True
    assert check_sync_group((10, 2, 6)) is True  # order does not matter
    assert check_sync_group([1, 3], rank=3, shards=2, replicas=2) is True
    with pytest.raises(AssertionError, match="shard 2 of each"):
        check_sync_group([4, 5, 6, 7])  # the shard group


def test_check_method_state_bytes():
    assert method_state_bytes("small", 4) == 2 * 4 * 4_877_568 // 4 == 9_755_136
    assert check_method_state_bytes(None) is False
    assert check_method_state_bytes(9_755_136) is True
    assert check_method_state_bytes(2 * 4 * 230_976 // 2, model="tiny", shards=2) is True
    with pytest.raises(AssertionError, match="anchor and momentum are one copy each"):
        check_method_state_bytes(2 * 4 * 4_877_568)  # unsharded DiLoCo
    with pytest.raises(AssertionError):
        check_method_state_bytes(4 * 4_877_568 // 4)  # the anchor alone


def test_a_single_number_is_a_wrong_answer_not_a_crash():
    with pytest.raises(AssertionError, match="not a list"):
        check_sync_group(6)
    with pytest.raises(AssertionError, match="not a number"):
        check_method_state_bytes("9 MB")
