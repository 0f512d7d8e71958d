"""Checks for notebook 07 (scaling out): how a shards × replicas run maps onto torchrun's machines.

One machine (torchrun node) holds one replica: `--nproc-per-node` is S and `--nnodes` is R, and
global rank = machine·S + local rank, the mesh's own numbering (rank = replica·S + shard). So the
shard group never leaves a machine and only the sync group crosses the network.
"""

from __future__ import annotations

from typing import Any

from edit_course.exercises import CheckResult, compare_yes_no, judge_numbers
from edit_lab.core.mesh import Mesh


def torchrun_sizes(shards: int, replicas: int) -> tuple[int, int]:
    """(--nnodes, --nproc-per-node) for a run of `shards` × `replicas`: one replica per machine."""
    return replicas, shards


def machine_of_rank(rank: int, shards: int) -> tuple[int, int]:
    """(GROUP_RANK, LOCAL_RANK) of a global rank when every machine runs `shards` processes: the mesh's
    (replica, shard), `Mesh.coords`."""
    return Mesh.coords(rank, shards)


def check_torchrun_sizes(answer: Any, shards: int = 8, replicas: int = 4) -> CheckResult:
    """(nnodes, nproc_per_node) for `--shards shards --replicas replicas`."""
    want = torchrun_sizes(shards, replicas)
    return judge_numbers(
        answer, want, what="two numbers (nnodes, nproc_per_node)", labels=("--nnodes", "--nproc-per-node"),
        whole=True,
        hint="one machine holds one replica, and a replica is S processes (its shard group).",
        why=(f"Each machine runs one replica, i.e. its {shards} shards: --nproc-per-node is the shard count; there "
             f"is one machine per replica: --nnodes is the replica count. (Swapped, every shard group would span "
             f"machines and its all-gathers would cross the network at every unit of every step.)"),
        right=(f"Correct: --nnodes {want[0]} --nproc-per-node {want[1]}: {want[0] * want[1]} processes, and only the "
               f"sync group's traffic leaves a machine."))


def check_machine_of_rank(answer: Any, rank: int = 21, shards: int = 8) -> CheckResult:
    """(machine, local rank) of global rank `rank` with `shards` processes per machine."""
    want = machine_of_rank(rank, shards)
    return judge_numbers(
        answer, want, what="two numbers (machine, local rank)", labels=("machine", "local rank"),
        whole=True,
        hint="torchrun numbers ranks machine by machine: rank = GROUP_RANK·nproc_per_node + LOCAL_RANK.",
        why=(f"Machine m runs ranks {shards}·m … {shards}·m + {shards - 1}; write {rank} = {shards}·m + local rank, "
             f"with 0 ≤ local rank < {shards}."),
        right=(f"Correct: machine {want[0]}, local rank {want[1]} — replica {want[0]}, shard {want[1]} in the mesh's "
               f"words, so rank {rank}'s sync-group partners are the local ranks {want[1]} of the other machines."))


def check_prediction_same_bits(prediction: Any, same: bool) -> CheckResult:
    """Predict, then run: were the torchrun run and the `launch()` run bit-for-bit equal? Never raises."""
    why = ("Same configuration, same seeds, the same collectives in the same order on the same data: floating-point "
           "sums in the same order give the same bits, whoever started the processes and however the cores were "
           "shared. Only the timings differ." if same else
           "They differ: something in the two runs was not the same (configuration, seeds, or the order of the "
           "collectives); compare the two config.json files.")
    return compare_yes_no(prediction, same, f"Bit-for-bit equal: {same}. {why}")
