"""Checks for notebook 03 (sharding meets Local SGD): the 2-D mesh's groups and the memory of the outer state.

The mesh numbers ranks replica by replica (rank = r·S + s), so a shard group is a run of S
consecutive ranks and a sync group takes every S-th rank. The anchor and the outer momentum are
sharded like the parameters: 2·P/S float32 values per rank, where an unsharded DiLoCo keeps 2·P.
"""

from __future__ import annotations

from typing import Any

from . import as_number, correct, unanswered
from .nb01 import BYTES_PER_VALUE, model_parameters, sharded_values


def sync_group(rank: int, shards: int, replicas: int) -> list[int]:
    """The ranks holding the same shard index as `rank` in every replica (as edit_lab.mesh.Mesh)."""
    return [r * shards + rank % shards for r in range(replicas)]


def check_sync_group(answer: Any, rank: int = 6, shards: int = 4, replicas: int = 3) -> bool:
    """Which ranks form the sync group of `rank` on an S × R mesh (all of them, in order)?"""
    if unanswered(answer, "a sync group joins the ranks that hold the same shard s in every replica: "
                          "s, S+s, 2S+s, …"):
        return False
    want = sync_group(rank, shards, replicas)
    try:
        got = sorted(int(x) for x in answer)
    except (TypeError, ValueError):
        raise AssertionError(f"{answer!r} is not a list of rank numbers, e.g. [0, 4, 8].") from None
    assert got == want, (
        f"{answer} is not it. Rank {rank} is shard {rank % shards} of replica {rank // shards} (S={shards}); "
        f"its sync group holds shard {rank % shards} of each of the {replicas} replicas: r·{shards} + "
        f"{rank % shards} for r = 0…{replicas - 1}.")
    return correct(f"Correct: {want}. Only these ranks exchange rank {rank}'s piece of the pseudo-gradient.")


def method_state_bytes(model: str, shards: int) -> int:
    """Bytes of anchor + outer momentum on one rank: two float32 copies of its parameter shard."""
    return 2 * BYTES_PER_VALUE * sharded_values(model, shards)


def check_method_state_bytes(answer: Any, model: str = "small", shards: int = 4) -> bool:
    """Bytes per rank of EDiT's anchor and outer momentum for `model` sharded over `shards` ranks."""
    if unanswered(answer, "two tensors (anchor, momentum) shaped like the rank's parameter shard: "
                          "2·P/S float32 values."):
        return False
    want = method_state_bytes(model, shards)
    P = model_parameters(model)
    assert abs(as_number(answer) - want) <= 0.001 * want, (
        f"{answer} is not it. {model} has P = {P:,} parameters; the rank's shard is P/S = "
        f"{sharded_values(model, shards):,} values; anchor and momentum are one copy each, 4 bytes a value.")
    return correct(f"Correct: {want:,} bytes ({want / 2**20:.1f} MiB) per rank; an unsharded DiLoCo would keep "
                   f"{2 * BYTES_PER_VALUE * P:,} bytes on every GPU, {shards}× more.")
