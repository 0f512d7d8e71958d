"""Checks for notebook 01 (synchronous data parallel): sync-group traffic per step, and what a straggler costs.

Synchronous training all-reduces every gradient shard over the sync group every step, so the
slowest replica sets everybody's pace: the others stand blocked in that all-reduce.
"""

from __future__ import annotations

from typing import Any

from . import as_number, correct, unanswered

BYTES_PER_VALUE = 4  # float32 gradients


def model_parameters(model: str) -> int:
    """P: the model's parameter count (from its size, without building it)."""
    from ..model import get_size

    return get_size(model).num_params()


def sharded_values(model: str, shards: int) -> int:
    """Values one rank holds of the whole model: its shard of every unit's buffer, padded to a multiple of S
    (as edit_lab.sharding.UnitLayout pads it)."""
    from ..model import get_size

    size = get_size(model)
    units = [size.root_params()] + [size.block_params()] * size.n_layers
    return sum(-(-n // shards) for n in units)


def check_sync_bytes_per_step(answer: Any, model: str = "tiny", shards: int = 2) -> bool:
    """Bytes one rank puts into the sync-group gradient all-reduce in one step of `sync`."""
    if unanswered(answer, "sum the `bytes` of rank 0's grad_all_reduce events in one step, or: each rank "
                          "all-reduces its gradient shard, P/S float32 values."):
        return False
    want = BYTES_PER_VALUE * sharded_values(model, shards)
    assert abs(as_number(answer) - want) <= 0.001 * want, (
        f"{answer} bytes is not it. Each rank holds 1/S of every unit; its gradient shard has the same size, "
        f"and that shard (P/S = {sharded_values(model, shards):,} values of 4 bytes for {model}, S={shards}) "
        f"is all-reduced over the sync group once per step.")
    return correct(f"Correct: {want:,} bytes per rank per step (P/S·4). Every step, whatever τ: that is what "
                   f"Local SGD will cut.")


def check_wait_per_step(answer: Any, compute_ms: float = 40.0, factor: float = 2.0) -> bool:
    """ms the fast replica stands blocked per step when the other replica is `factor`× slower (no comm time)."""
    if unanswered(answer, "the all-reduce cannot finish before the slow replica joins it; the fast replica "
                          "arrives early by the difference of the two step times."):
        return False
    want = (factor - 1.0) * compute_ms
    assert abs(as_number(answer) - want) <= 0.01 * max(want, 1.0), (
        f"{answer} ms is not it. The slow replica needs {factor:g}·{compute_ms:g} = {factor * compute_ms:g} ms "
        f"per step, the fast one {compute_ms:g} ms; the fast one waits in the all-reduce for the difference.")
    return correct(f"Correct: {want:g} ms of every step, on every rank of the fast replica.")


def check_throughput_fraction(answer: Any, replicas: int = 8, factor: float = 3.0) -> bool:
    """Fraction of the straggler-free tokens/s that `sync` reaches with one replica `factor`× slower."""
    if unanswered(answer, "every step lasts as long as the slowest replica's step; the number of replicas "
                          "does not enter."):
        return False
    want = 1.0 / factor
    assert abs(as_number(answer) - want) <= 0.01, (
        f"{answer} is not it. Each step every one of the {replicas} replicas waits for the slowest, which takes "
        f"{factor:g}× as long, so all of them make 1/{factor:g} of their progress: one slow replica out of "
        f"{replicas} costs as much as all of them being slow.")
    return correct(f"Correct: 1/{factor:g} ≈ {want:.3f}, whether {replicas} replicas or 2: synchronous training "
                   f"runs at the slowest replica's pace.")
