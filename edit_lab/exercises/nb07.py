"""Checks for notebook 07 (scaling out): how a shards × replicas run maps onto torchrun's machines.

One machine (torchrun node) holds one replica: `--nproc-per-node` is S and `--nnodes` is R, and
global rank = machine·S + local rank, the mesh's own numbering (rank = replica·S + shard). So the
shard group never leaves a machine and only the sync group crosses the network.
"""

from __future__ import annotations

from typing import Any

from . import as_numbers, correct, unanswered


def torchrun_sizes(shards: int, replicas: int) -> tuple[int, int]:
    """(--nnodes, --nproc-per-node) for a run of `shards` × `replicas`: one replica per machine."""
    return replicas, shards


def machine_of_rank(rank: int, shards: int) -> tuple[int, int]:
    """(GROUP_RANK, LOCAL_RANK) of a global rank when every machine runs `shards` processes."""
    return rank // shards, rank % shards


def check_torchrun_sizes(answer: Any, shards: int = 8, replicas: int = 4) -> bool:
    """(nnodes, nproc_per_node) for `--shards shards --replicas replicas`."""
    if unanswered(answer, "one machine holds one replica, and a replica is S processes (its shard group)."):
        return False
    want = torchrun_sizes(shards, replicas)
    got = tuple(as_numbers(answer, 2, "two numbers"))
    assert got == want, (
        f"{answer} is not it. Each machine runs one replica, i.e. its {shards} shards: --nproc-per-node {shards}; "
        f"there are {replicas} replicas: --nnodes {replicas}. (Swapped, every shard group would span machines "
        f"and its all-gathers would cross the network at every unit of every step.)")
    return correct(f"Correct: --nnodes {want[0]} --nproc-per-node {want[1]}: {want[0] * want[1]} processes, and "
                   f"only the sync group's traffic leaves a machine.")


def check_machine_of_rank(answer: Any, rank: int = 21, shards: int = 8) -> bool:
    """(machine, local rank) of global rank `rank` with `shards` processes per machine."""
    if unanswered(answer, "torchrun numbers ranks machine by machine: rank = GROUP_RANK·nproc_per_node + LOCAL_RANK."):
        return False
    want = machine_of_rank(rank, shards)
    got = tuple(as_numbers(answer, 2, "two numbers"))
    assert got == want, (
        f"{answer} is not it. Machine m runs ranks {shards}·m … {shards}·m + {shards - 1}; {rank} = "
        f"{shards}·{rank // shards} + {rank % shards}.")
    return correct(f"Correct: machine {want[0]}, local rank {want[1]} — replica {want[0]}, shard {want[1]} in the "
                   f"mesh's words, so rank {rank}'s sync-group partners are the local ranks {want[1]} of the other "
                   f"machines.")
