"""Checks for notebook 00 (welcome): where a rank sits in the mesh, and what one step costs in all-gathers.

Both answers follow from two facts the notebook shows on a real run: rank = replica·S + shard, and
the forward all-gathers each unit (the root unit, then one per transformer block) exactly once.
"""

from __future__ import annotations

from typing import Any

from . import as_number, correct, unanswered


def rank_of(replica: int, shard: int, shards: int) -> int:
    """The mesh's numbering (edit_lab.mesh): shard index fastest, so one replica's ranks are consecutive."""
    return replica * shards + shard


def check_rank(answer: Any, replica: int = 2, shard: int = 1, shards: int = 4) -> bool:
    """Which rank holds shard `shard` of replica `replica` when every replica has `shards` shards?"""
    if unanswered(answer, "ranks are numbered replica by replica, shard index fastest: rank = replica·S + shard."):
        return False
    want = rank_of(replica, shard, shards)
    assert as_number(answer, "a whole number") == want, (
        f"{answer} is not it. The ranks of replica r are r·S … r·S+S−1, so replica {replica} starts at rank "
        f"{replica}·{shards} = {replica * shards}; its shard {shard} is {shard} rank(s) further on.")
    return correct(f"Correct: rank {want} = {replica}·{shards} + {shard}. Its shard group is ranks "
                   f"{replica * shards}…{replica * shards + shards - 1}.")


def units_of(model: str) -> int:
    """Sync units of a model size: one root unit (embedding, final norm, head) plus one per block."""
    from ..model import get_size

    return 1 + get_size(model).n_layers


def check_all_gathers_per_step(answer: Any, model: str = "tiny") -> bool:
    """How many all-gathers does one rank issue in one training step (forward + backward) of `model`?"""
    if unanswered(answer, "filter the events of one rank and one step to kind == 'all_gather' and count them "
                          "(or: one per unit, and the backward does not gather again)."):
        return False
    want = units_of(model)
    assert as_number(answer, "a whole number") == want, (
        f"{answer} is not it. The forward all-gathers each unit once, right before computing it: the root unit "
        f"(embedding + head share one buffer) and each of the model's {want - 1} blocks. The backward reuses the "
        f"gathered tensors that autograd kept, and only reduce-scatters the gradients.")
    return correct(f"Correct: {want} all-gathers per step, one per unit ({want - 1} blocks + the root unit); "
                   f"the backward answers each with one reduce-scatter.")
