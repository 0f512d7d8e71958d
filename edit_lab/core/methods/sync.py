"""`sync`: mini-batch SGD as hybrid-sharded data parallel (HSDP).

Inside a replica: ZeRO-3 (the engine). Across replicas: the gradient shards are all-reduced every
step, so every replica takes the same optimizer step and replicas never drift apart. This is the
baseline every Local-SGD method is measured against, and the regime EDiT runs in during warm-up.

Time-only twin: `ReplicaProgram` in `edit_lab/clock/sim/programs.py`,
the preview simulator's copy of this schedule: a change to *when* this method talks to the other replicas
changes it too (tests/distributed/test_sim_matches_virtual.py holds the two to the same timeline).
"""

from __future__ import annotations

from edit_lab.core.methods.base import Method


class SyncMethod(Method):
    name = "sync"

    def after_backward(self, step: int) -> None:
        self.all_reduce_grads_over_sync_group()

    def after_optimizer(self, step: int) -> None:
        self.synced(step + 1)  # replicas never diverge: every step ends in agreement
