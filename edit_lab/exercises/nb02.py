"""Checks for notebook 02 (Local SGD and DiLoCo): the outer Nesterov step, the sync schedule, the bytes saved.

Three facts with one right value each: Nesterov's first outer step moves the anchor by
lr·(1+μ)·Δ̄ (the momentum buffer starts at Δ̄ and is looked ahead once more); the first sync that
changes the model is at step W+τ (step W only creates the anchors); and a Local-SGD method sends
one model shard over the sync group every τ steps instead of one gradient shard every step.
"""

from __future__ import annotations

from typing import Any

from . import as_number, correct, unanswered
from .nb01 import BYTES_PER_VALUE, sharded_values


def nesterov_first_step(lr: float, momentum: float) -> float:
    """The factor of Δ̄ by which torch's SGD(nesterov=True) moves its parameter on its first step."""
    return lr * (1.0 + momentum)


def check_nesterov_factor(answer: Any, lr: float = 0.7, momentum: float = 0.9) -> bool:
    """By what factor of the mean pseudo-gradient does the first outer step move the anchor?"""
    if unanswered(answer, "the first step sets the momentum buffer b = Δ̄, then moves by lr·(Δ̄ + μ·b)."):
        return False
    want = nesterov_first_step(lr, momentum)
    assert abs(as_number(answer) - want) <= 1e-3, (
        f"{answer} is not it. torch's Nesterov SGD: b ← μ·b + g (b = g on the first step), then "
        f"p ← p − lr·(g + μ·b) = p − lr·(1+μ)·g; with lr={lr:g}, μ={momentum:g} that is {lr:g}·{1 + momentum:g}.")
    return correct(f"Correct: {want:.3g}·Δ̄. The outer step overshoots the replicas' mean (factor 1) on purpose.")


def first_model_sync(warmup: int, interval: int) -> int:
    """The first step whose parameters come from a sync that changed the model: W + τ."""
    return warmup + interval


def check_first_sync_step(answer: Any, warmup: int = 3, interval: int = 2) -> bool:
    """With W warm-up steps and sync interval τ, at the start of which step is the model first synced?"""
    if unanswered(answer, "steps 0…W−1 are synchronous; at step W the anchors are created (a = θ, nothing "
                          "changes); then τ local steps."):
        return False
    want = first_model_sync(warmup, interval)
    assert as_number(answer, "a step number") == want, (
        f"{answer} is not it. Steps 0…{warmup - 1} all-reduce gradients; the 'sync' at step {warmup} only copies "
        f"θ into the anchor; then each replica trains alone for τ={interval} steps ({warmup}…{want - 1}), and the "
        f"first sync that averages anything happens at the start of step {warmup}+{interval}.")
    return correct(f"Correct: step {want}; then {want + interval}, {want + 2 * interval}, …")


def bytes_per_step(model: str, shards: int, interval: int) -> float:
    """Sync-group bytes one rank sends per step, averaged over the local phase: one shard every τ steps."""
    return BYTES_PER_VALUE * sharded_values(model, shards) / interval


def check_bytes_per_step(answer: Any, model: str = "tiny", shards: int = 2, interval: int = 10) -> bool:
    """Sync-group bytes per rank per step of DiLoCo (or Post Local SGD) after warm-up, averaged over steps."""
    if unanswered(answer, "one sync all-reduces the rank's whole parameter shard (P/S float32 values), and "
                          "there is one sync every τ steps."):
        return False
    want = bytes_per_step(model, shards, interval)
    assert abs(as_number(answer) - want) <= 0.01 * want, (
        f"{answer} is not it. A sync sends this rank's shard of every unit, {sharded_values(model, shards):,} "
        f"values × 4 bytes for {model} with S={shards}, once every τ={interval} steps; sync sends as much every step.")
    return correct(f"Correct: {want:,.0f} bytes per step, τ={interval}× less than synchronous training.")
