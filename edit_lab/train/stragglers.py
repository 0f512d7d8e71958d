"""Simulated stragglers: seeded, deterministic, the same on every rank.

Two kinds, as in the paper's experiments:
- *consistent*: chosen replicas compute k× slower; each of their steps is stretched by
  (k − 1) × the step's own compute as it just recorded it: the forward and backward spans of every
  unit and the inner optimizer (`events.OWN_COMPUTE_KINDS`), never a collective or a wait. So a
  straggler is the same k× slower device for every method: the shard group's all-gathers and
  reduce-scatters and EDiT's layer-wise sync inside the forward are not stretched, exactly as the
  baselines' syncs between steps are not. The outer step is not stretched either (it belongs to the
  sync). The pause comes after the inner optimizer, before the method's after-step hook (a DiLoCo or
  A-EDiT sync);
- *random*: each step, each replica pauses `random_pause_ms` with probability `random_pause_prob`,
  drawn from a generator seeded by (seed, replica, step), so a rerun pauses at the same steps;
- a *rule* of the reader's (`straggler_rule`, edit_lab.rules): `fn(step, replica, compute_s)` returns the
  seconds to pause after that step, given the step's own compute as above; added to the other two.

Where the pause is spent: after the inner optimizer for every method but backup workers, whose replicas spend
it between the forward and the backward, while they wait to learn whether their gradient is still needed
(core/quorum.py, `Trainer.train_step`); the event then says whether the step was abandoned.

A pause is recorded as a `straggle` event so the timeline shows who held whom up; its data holds the reason
(consistent, random, rule, or several joined by "+"), the seconds `planned` and the step's own compute the
pause was computed from (`compute`).

A straggler *spins* through its pause rather than sleeping. A slow or stalled device is still busy:
it does not hand its compute to the other replicas. A sleeping process does, whenever ranks share
cores (4 processes on a 2-core laptop): the others then ran up to 25% faster while the straggler
slept, so a straggler made the *other* replicas faster and the capacity bound higher than without
stragglers. Spinning keeps each rank's share of the CPU what it would be without the pause; on one
core per rank (or one GPU per rank) the two are the same.
"""

from __future__ import annotations

import time
from dataclasses import dataclass

import torch

from edit_lab.config import RunConfig
from edit_lab.core.quorum import Pause
from edit_lab.records.events import EventLog
from edit_lab.rules import Rules, Straggler, is_builtin
from edit_lab.rules.rules import no_pause
from edit_lab.train.data import mix_seed


@dataclass
class StragglerModel:
    seed: int = 0
    slow_replicas: tuple[int, ...] = ()
    factor: float = 1.0
    pause_prob: float = 0.0
    pause_s: float = 0.0
    rule: Straggler = no_pause  # `Rules.straggler`: a reader's pause after each step, or the library's none

    @classmethod
    def from_config(cls, cfg: RunConfig) -> "StragglerModel":
        return cls(cfg.seed, tuple(cfg.stragglers.replicas), cfg.stragglers.factor, cfg.stragglers.random_pause_prob,
                   cfg.stragglers.random_pause_ms / 1e3, Rules.from_config(cfg).straggler)

    def random_pause(self, step: int, replica: int) -> float:
        """Seconds of random pause for this replica at this step (0 most of the time)."""
        if self.pause_prob <= 0 or self.pause_s <= 0:
            return 0.0
        gen = torch.Generator().manual_seed(mix_seed(self.seed, replica, step, 0x57A6))
        return self.pause_s if float(torch.rand((), generator=gen, device=gen.device)) < self.pause_prob else 0.0

    def stretches(self, replica: int) -> bool:
        """Is this replica a consistent straggler (its pause needs the step's own compute time)?"""
        return replica in self.slow_replicas and self.factor > 1.0

    def needs_compute(self, replica: int) -> bool:
        """Does this replica's pause depend on the step's own compute (a consistent straggler, or a rule)?"""
        return self.stretches(replica) or not is_builtin(self.rule)

    def own_compute(self, compute_s: float) -> float:
        """The step's own compute that the pause is computed from (the virtual clock states its calibrated one)."""
        return compute_s

    def delay(self, step: int, replica: int, compute_s: float) -> tuple[float, str | None]:
        """(seconds to pause, reason) for this replica after a step whose own compute took `compute_s`."""
        d, why = 0.0, None
        if self.stretches(replica):
            d, why = (self.factor - 1.0) * compute_s, "consistent"
        extra = self.random_pause(step, replica)
        if extra > 0:
            d, why = d + extra, ("random" if why is None else "consistent+random")
        ruled = self.rule(step, replica, compute_s)
        if ruled > 0:
            d, why = d + ruled, ("rule" if why is None else why + "+rule")
        return d, why

    def plan(self, step: int, replica: int, compute_s: float) -> Pause:
        """The pause this replica owes at `step` after `compute_s` of own compute, not spent yet (backup workers
        spend it before the backward, asking meanwhile whether they are still needed: core/quorum.py)."""
        compute_s = self.own_compute(compute_s)
        d, why = self.delay(step, replica, compute_s)
        return Pause(max(d, 0.0), why, compute_s)

    def pause(self, step: int, replica: int, compute_s: float, log: EventLog) -> float:
        planned = self.plan(step, replica, compute_s)
        d, why, compute_s = planned.seconds, planned.reason, planned.compute
        if d <= 0:
            return 0.0
        t0 = log.clock.now()
        if log.clock.virtual:  # the virtual clock (virtual.py): a pause is time that passes, nothing to spin
            log.clock.advance(d)
        else:
            spin_until(time.perf_counter() + d)
        log.add("straggle", t0, log.clock.now(), reason=why, planned=d, compute=compute_s)
        return d


def spin_until(deadline: float) -> None:
    """Busy-wait until `time.perf_counter()` reaches `deadline` (see the module docstring for why not sleep)."""
    while time.perf_counter() < deadline:
        pass
