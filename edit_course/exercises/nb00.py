"""Checks for notebook 00 (welcome): where a rank sits in the mesh, and what one step costs in all-gathers.

Both answers follow from facts the notebook shows on a real run: rank = replica·S + shard; the
forward all-gathers each unit (the root unit, then one per transformer block) exactly once; and,
with `reshard_after_forward` (the default, as in FSDP), each block is freed after its forward and
all-gathered again in the backward (`all_gather_bwd`), while the root unit stays gathered.
"""

from __future__ import annotations

from typing import Any

from edit_course.exercises import CheckResult, judge_number


def rank_of(replica: int, shard: int, shards: int) -> int:
    """The mesh's numbering (edit_lab.core.mesh): shard index fastest, so one replica's ranks are consecutive."""
    return replica * shards + shard


def check_rank(answer: Any, replica: int = 2, shard: int = 1, shards: int = 4) -> CheckResult:
    """Which rank holds shard `shard` of replica `replica` when every replica has `shards` shards?"""
    want = rank_of(replica, shard, shards)
    return judge_number(
        answer, want, what="a rank (a whole number)", whole=True,
        hint=("in the first run (2 shards per replica) ranks 0 and 1 are replica 0, ranks 2 and 3 replica 1: "
              f"continue that pattern with {shards} shards per replica."),
        named=[(lambda got: got == shard * shards + replica and got != want,
                "counts shard by shard (shard index slowest). In the mesh the ranks of one replica sit side "
                "by side: the shard index runs fastest.")],
        why=(f"Each replica's shard group is {shards} ranks side by side, replica 0 first. Find the first rank "
             f"of replica {replica}'s group, then move along it to shard {shard}."),
        right=(f"Correct: rank {want} = {replica}·{shards} + {shard}. Its shard group is ranks "
               f"{replica * shards}…{replica * shards + shards - 1}."))


def units_of(model: str) -> int:
    """Sync units of a model size: one root unit (embedding, final norm, head) plus one per block."""
    from edit_lab.core.model import get_size

    return 1 + get_size(model).n_layers


def all_gathers_per_step(model: str, reshard_after_forward: bool = True) -> int:
    """One rank's all-gathers in one training step: one per unit in the forward, plus one per block in the
    backward when blocks are resharded after their forward (the root unit never is)."""
    units = units_of(model)
    return units + (units - 1 if reshard_after_forward else 0)


def check_all_gathers_per_step(answer: Any, model: str = "tiny", reshard_after_forward: bool = True) -> CheckResult:
    """How many all-gathers does one rank issue in one training step (forward + backward) of `model`?"""
    units = units_of(model)
    want = all_gathers_per_step(model, reshard_after_forward)
    forward_only = (f"counts the forward only. With reshard_after_forward (the default) each block's full "
                    f"parameters are freed after its forward, so the backward all-gathers every block again "
                    f"('all_gather_bwd' in the table): {units - 1} more. The root unit is not freed: the head's "
                    f"backward needs it first thing.")
    return judge_number(
        answer, want, what="a count of all-gathers (a whole number)", whole=True,
        hint=("filter the events of one rank and one step to the kinds 'all_gather' (forward) and "
              "'all_gather_bwd' (backward) and count them; then count units and blocks of the other model."),
        named=[(lambda got: reshard_after_forward and got == units, forward_only)],
        why=(f"The forward all-gathers each unit once, right before computing it: the root unit "
             f"(embedding + head share one buffer) and each of the model's {units - 1} blocks"
             + (f"; the backward gathers each block again ({units - 1})." if reshard_after_forward else
                "; with reshard_after_forward off the backward reuses the gathered tensors autograd kept.")),
        right=(f"Correct: {want} all-gathers per step: {units} in the forward (the root unit + {units - 1} blocks)"
               + (f" and {units - 1} in the backward, one per block" if reshard_after_forward else "")
               + "; the backward answers each unit with one reduce-scatter."))


def check_gather_prediction(prediction: Any, measured: int, model: str,
                            reshard_after_forward: bool = True) -> CheckResult:
    """Predict, then run: the all-gathers one rank issued in one step, against the reader's prediction.

    Never raises: the notebook ships with no prediction written.
    """
    from edit_course.exercises import compare_prediction

    units = units_of(model)
    why = (f"The forward gathers each of the {units} units once (the root unit + {units - 1} blocks)"
           + (f"; the backward gathers each of the {units - 1} blocks again, because they were freed after their "
              f"forward; the root unit is never freed." if reshard_after_forward else
              "; with reshard_after_forward off nothing is gathered again in the backward."))
    return compare_prediction(prediction, measured, what="all-gathers of one rank in one step", why=why,
                              rel_tol=0.0)
