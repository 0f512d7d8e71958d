"""`backup`: synchronous SGD with backup workers: each step averages the first m of the R replicas' gradients.

Chen et al. 2016 ("Revisiting Distributed Synchronous SGD") answer a straggler in synchronous training by
not waiting for it: run n workers, use the first m gradients of each step, drop the rest. It is the answer
a student reaches for when A-EDiT beats `sync` under a straggler, so the lab races it (`backup_m`: m,
0 meaning R − 1).

The step, beside sync.py's: the forward, then `before_backward`, where a replica spends its straggler
pause (its device's slowness this step, stragglers.py) and learns from the rendezvous whether it is among
the first m ready (core/quorum.py; the virtual clock decides the same from virtual times). A member runs
its backward with the gradient all-reduces overlapped exactly as `sync`'s (DDP's buckets, `Method.grad_ready`);
a late replica *abandons the step*: it throws its forward away, runs no backward, and issues the step's
gradient all-reduces at once with zero gradients, unit by unit in the order the members issue theirs. Every
replica divides the sum by m and takes the same optimizer step from it, so the replicas never drift apart,
and the late one starts the next step from the new parameters with everyone else. Its train row records
the forward's loss, 0 tokens and `dropped`.

What a late replica costs the others: at most one poll of the rendezvous and a store round trip (the time
between the quorum being met and its zeros joining the all-reduce), not its pause.

With m = R nobody is ever late and every number is `sync`'s to the bit (tests/distributed/test_backup.py).

Time-only twin: `BackupProgram` in `edit_lab/clock/sim/programs.py`.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

import torch

from edit_lab.core.methods.local_sgd import crc
from edit_lab.core.methods.sync import SyncMethod

if TYPE_CHECKING:
    from edit_lab.core.quorum import Pause


class BackupMethod(SyncMethod):
    name = "backup"

    def __init__(self, *args, **kwargs) -> None:  # type: ignore[no-untyped-def]
        super().__init__(*args, **kwargs)
        self.m = self.cfg.quorum_m
        self.member = True  # is this replica's gradient among the m of the current step?

    def before_backward(self, step: int, pause: "Pause | None") -> bool:
        """Spend the straggler's pause while asking the rendezvous; a late replica joins the all-reduces now."""
        log, clock = self.log, self.log.clock
        seconds = pause.seconds if pause is not None else 0.0
        t0 = clock.now()
        verdict = self.comm.quorum(step, self.m, seconds, self.cfg.runtime.timeout_s)
        if seconds > 0:
            log.add("straggle", t0, clock.now(), reason=pause.reason, planned=seconds, compute=pause.compute,
                    abandoned=not verdict.member)
        self.member = verdict.member
        if not self.member:
            self._contribute_zeros()
        return self.member

    @torch.no_grad()
    def _contribute_zeros(self) -> None:
        """The late replica's part in the step's gradient all-reduces: zeros, unit by unit, in the members' order
        (their backward hands the units over last to first, `ShardedModel._after_reduce_scatter`; without the
        overlap they issue them first to last after it), all started now; `after_backward` waits for them."""
        shards = self.engine.shards
        order = reversed(range(len(shards))) if self.overlap_grads else range(len(shards))
        for unit in order:
            p = shards[unit]
            p.grad = torch.zeros_like(p)
            self._grads_in_flight[unit] = (p.grad, self.comm.all_reduce(p.grad, group="sync", kind="grad_all_reduce",
                                                                        unit=unit, async_op=True))

    def contributors(self) -> int:
        return self.m

    def after_optimizer(self, step: int) -> None:
        if self.cfg.runtime.checksums:  # every replica must hold the same θ after every step, the late one too
            t = self.log.clock.now()
            for unit, p in enumerate(self.engine.shards):
                self.log.add("checksum", t, t, unit=unit, theta=crc(p), anchor=crc(p))
        super().after_optimizer(step)
