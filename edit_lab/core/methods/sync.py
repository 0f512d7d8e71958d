"""`sync`: mini-batch SGD as hybrid-sharded data parallel (HSDP).

Inside a replica: ZeRO-3 (the engine). Across replicas: the gradient shards are all-reduced every
step, so every replica takes the same optimizer step and replicas never drift apart. This is the
baseline every Local-SGD method is measured against, and the regime EDiT runs in during warm-up.

Overlapped as DDP and HSDP do (Li et al., VLDB 2020: one bucket's all-reduce starts as soon as its
gradients are ready, under the rest of the backward): the bucket is the unit. The engine hands over unit l's
gradient shard once its shard-group reduce-scatter has landed (`ShardedModel._after_reduce_scatter`: at the
end of unit l's backward with one shard, at the end of unit l−1's with several); `Method.grad_ready` issues
its all-reduce over the sync group then, and `after_backward` waits only for what is still in flight and
divides by R. The same tensors, summed by the same collectives: bit for bit the numbers of an all-reduce
issued after the backward.

Time-only twin: `ReplicaProgram` in `edit_lab/clock/sim/programs.py`,
the preview simulator's copy of this schedule: a change to *when* this method talks to the other replicas
changes it too (tests/distributed/test_sim_matches_virtual.py holds the two to the same timeline).
"""

from __future__ import annotations

from edit_lab.core.methods.base import Method


class SyncMethod(Method):
    name = "sync"

    def after_backward(self, step: int) -> None:
        if self.survival is not None:  # the newest view (a replacement's state); θ moves only at the optimizer
            self.survival.before_sync(step)
        self.all_reduce_grads_over_sync_group()

    def syncs_in_step(self, step: int) -> bool:
        return True

    def after_optimizer(self, step: int) -> None:
        self.synced(step + 1)  # replicas never diverge: every step ends in agreement
