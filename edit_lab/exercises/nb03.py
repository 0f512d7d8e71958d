"""Checks for notebook 03 (sharding meets Local SGD): the 2-D mesh's groups and the memory of the outer state.

The mesh numbers ranks replica by replica (rank = r·S + s), so a shard group is a run of S
consecutive ranks and a sync group takes every S-th rank: `check_sync_group_fn` runs the reader's
function against `edit_lab.mesh.Mesh`. The anchor and the outer momentum are sharded like the
parameters: 2·P/S float32 values per rank, where an unsharded DiLoCo keeps 2·P.
"""

from __future__ import annotations

from typing import Any

from . import CheckResult, correct, is_whole, not_a_function, not_answered, not_yet, read_numbers, short_error, show


def sync_group(rank: int, shards: int, replicas: int) -> list[int]:
    """The ranks holding the same shard index as `rank` in every replica (as edit_lab.mesh.Mesh)."""
    return [r * shards + rank % shards for r in range(replicas)]


# --- a code exercise: the sync group of a rank, checked against the lab's Mesh ---------------------------


def check_sync_group_fn(fn: Any) -> CheckResult:
    """Does `fn(rank, shards, replicas) -> list of ranks` give the sync group `edit_lab.mesh.Mesh` computes,
    on every rank of several meshes? Never raises: the notebook ships `fn` wrong on purpose."""
    from ..mesh import Mesh

    if (refused := not_a_function(fn, "fn(rank, shards, replicas) -> list of ranks")) is not None:
        return refused
    for shards, replicas in ((4, 3), (2, 2), (8, 4), (1, 3), (3, 1)):
        for rank in range(shards * replicas):
            want = Mesh(rank=rank, world_size=shards * replicas, shards=shards, replicas=replicas,
                        shard_group=None, sync_group=None).sync_group_ranks()
            try:
                out = fn(rank, shards, replicas)
            except Exception as exc:  # the reader's code: explain, do not crash the notebook
                return not_yet(f"fn({rank}, {shards}, {replicas}) raised {short_error(exc)}")
            ranks = read_numbers(out)
            if ranks is None or not all(is_whole(x) for x in ranks):
                return not_yet(f"fn({rank}, {shards}, {replicas}) returned {show(out)}; return a list of ranks "
                               f"(whole numbers), one per replica.")
            got = sorted(int(x) for x in ranks)
            if got == want:
                continue
            shard_group = [rank // shards * shards + s for s in range(shards)]
            if got == shard_group:  # the notebook's shipped body
                return not_answered(f"for rank {rank} on S={shards} × R={replicas} this gives its shard group {got} "
                                    f"(the ranks of its own replica); the sync group is the same shard in every "
                                    f"replica: {want}.")
            return not_yet(f"for rank {rank} on S={shards} × R={replicas} you gave {got}; the mesh says {want} "
                           f"(rank = replica·S + shard).")
    return correct("Correct on every rank of five meshes: the same list as edit_lab.mesh.Mesh.sync_group_ranks().")


def check_state_prediction(prediction: Any, measured: float, shards: int) -> CheckResult:
    """Predict, then run: anchor + momentum of one rank, in units of one whole model (4·P bytes)."""
    from . import compare_prediction

    why = (f"EDiT shards the anchor and the outer momentum like the parameters: each is 1/S of the model, "
           f"so together 2/S = 2/{shards}.")
    return compare_prediction(prediction, measured, what=f"anchor + momentum of one rank with S = {shards}, in whole "
                              "models", why=why, rel_tol=0.02)
