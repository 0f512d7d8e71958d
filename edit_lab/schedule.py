"""When the Local-SGD family syncs: the step schedule (edit-method.md §3) and A-EDiT's meeting rule (§6).

Plain functions of step counts, without torch, because two places follow them: the methods that run
(`edit_lab/methods/`) and the preview simulator that replays them in time only (`edit_lab/sim/`). With
W warm-up steps and sync interval τ: steps 0 … W−1 are synchronous, the anchors are created at the start
of step W, and the replicas sync at the start of steps W+τ, W+2τ, …
"""

from __future__ import annotations


def in_warmup(step: int, warmup: int) -> bool:
    """Steps 0 … W−1: synchronous training, gradients all-reduced across replicas."""
    return step < warmup


def is_anchor_step(step: int, warmup: int) -> bool:
    """The first 'sync', at step W: it only creates the anchors."""
    return step == warmup


def is_sync_step(step: int, warmup: int, interval: int) -> bool:
    """True at the start of steps W+τ, W+2τ, …: the steps whose forward pass syncs."""
    return step > warmup and (step - warmup) % interval == 0


def decide_sync(total: int, min_sync_steps: int, all_done: bool) -> bool:
    """Sync after an A-EDiT meeting? Normally when the round holds at least N_min steps over the sync group.

    When every replica has finished, sync whenever anything was trained since the last sync (N_min no
    longer applies: this is the last chance for the replicas to end on the same model).
    """
    if all_done:
        return total > 0
    return total >= min_sync_steps
