"""The synchronous programs of the preview simulator: `ReplicaProgram` (the worker's loop and `sync`'s hooks, the
base of every program) and `BackupProgram` (backup workers). `programs.py` holds the Local-SGD methods' programs
on top of these and the registry of programs by method name; its docstring says what a program mirrors and how
it is checked against the virtual clock.
"""

from __future__ import annotations

import math
import random
from collections.abc import Generator
from typing import Any

from edit_lab.clock.costs import Costs
from edit_lab.clock.sim.engine import Issue, Local, Now, Quorum, Row, SimHandle, Step, Wait, Work
from edit_lab.config import RunConfig
from edit_lab.rules import Rules

Gen = Generator[Any, Any, Any]
F64 = 8  # bytes of one float64 value in the small exchanges


def random_pause(cfg: RunConfig, step: int, replica: int) -> float:
    """`StragglerModel.random_pause`: the very draw of a real run when torch is installed, else the same law."""
    if cfg.stragglers.random_pause_prob <= 0 or cfg.stragglers.random_pause_ms <= 0:
        return 0.0
    try:
        from edit_lab.train.stragglers import StragglerModel
    except ImportError:  # no torch: a pause with the same probability, from a generator seeded the same way
        rng = random.Random(hash((cfg.seed, replica, step, 0x57A6)))
        return cfg.stragglers.random_pause_ms / 1e3 if rng.random() < cfg.stragglers.random_pause_prob else 0.0
    # the draw alone (the rule is the program's `rules.straggler`, added by `planned_pause`)
    return StragglerModel(cfg.seed, pause_prob=cfg.stragglers.random_pause_prob, pause_s=cfg.stragglers.random_pause_ms / 1e3).random_pause(
        step, replica)


class ReplicaProgram:
    """`Trainer.run` of one replica with `Method`'s hooks: the base behaviour is synchronous training."""

    def __init__(self, cfg: RunConfig, costs: Costs, replica: int, life: int = 0) -> None:
        self.cfg, self.costs, self.replica, self.life = cfg, costs, replica, life
        self.rules = Rules.from_config(cfg)  # the same rules a rank holds (no torch)
        self.members: tuple[int, ...] = tuple(range(cfg.replicas))  # the sync group's replicas (survival: the view's)
        self.U = costs.units
        self.step = 0  # the step being trained (what a death inside the forward strikes)
        self.survival: Any = None  # survive=True: this life's side of a death (`surviving.SimSurvival`)
        if cfg.runtime.survive:
            from edit_lab.clock.sim.surviving import SimSurvival

            self.survival = SimSurvival(cfg, self, life)
        self.tokens = cfg.shards * cfg.data.batch_size * cfg.data.seq_len
        self.end_s = 0.0
        self.coarse = False  # one forward and one backward span per step where no unit hook runs (no events kept)
        self.grads_in_flight: list[SimHandle] = []  # gradient all-reduces issued during this step's backward

    @property
    def R(self) -> int:
        """Replicas in the sync group now (`Mesh.sync_size`): all of them, or the live members of the view."""
        return len(self.members)

    # ------------------------------------------------------------------ sync-group helpers
    def exchange(self, kind: str, nbytes: int, payload: Any, unit: int | None = None, op: str = "all_reduce") -> Gen:
        """A blocking sync-group collective; returns every replica's payload (none with one replica). `nbytes`:
        the whole tensor (an all-gather's output), recorded by the ring rule of `op` (`wire.ring_bytes`)."""
        if self.R == 1:
            return [payload]
        return (yield Issue(kind, nbytes, unit=unit, payload=payload, blocking=True, op=op))

    def replica_clock(self) -> Gen:
        t = yield Now()
        yield Local("clock", self.costs.clock_s)
        return t

    def any_replica(self, flag: bool) -> Gen:
        flags = yield from self.exchange("stop_check", F64, bool(flag))
        return any(flags)

    def all_reduce_grads(self) -> Gen:
        """`Method.all_reduce_grads_over_sync_group`: issue each unit's all-reduce the backward did not start
        (`grad_ready`), then wait for every one, in issue order."""
        if self.R == 1:
            return
        handles, self.grads_in_flight = self.grads_in_flight, []
        if not handles and self.coarse:  # the same transfers, one after the other, waited for together: one request
            yield Wait((yield Issue("grad_all_reduce", self.costs.model_bytes, parts=self.costs.unit_bytes)))
            return
        started = {h.unit for h in handles}
        for u in range(self.U):
            if u not in started:
                handles.append((yield Issue("grad_all_reduce", self.costs.unit_bytes[u], unit=u)))
        for h in handles:
            yield Wait(h)

    def all_reduces_grads(self, step: int) -> bool:
        """`Method.all_reduces_grads`: does this step's `after_backward` all-reduce the gradients? Every step here."""
        return True

    def overlaps_grads(self, step: int) -> bool:
        """`Method.grad_ready_hook`: are this step's gradient all-reduces started during the backward?"""
        return self.R > 1 and self.all_reduces_grads(step) and self.survival is None  # survival: after the backward

    def grad_ready(self, unit: int) -> Gen:
        """`Method.grad_ready`: unit's gradient shard is final; its all-reduce leaves now."""
        self.grads_in_flight.append((yield Issue("grad_all_reduce", self.costs.unit_bytes[unit], unit=unit)))

    # ------------------------------------------------------------------ the worker's loop
    def run(self) -> Gen:
        cfg, c = self.cfg, self.costs
        budget, every_s = cfg.time_budget, cfg.data.eval_every_s
        next_eval = every_s if every_s > 0 else math.inf
        step = 0
        if self.life > 0:  # a replacement (`Episode.begin`): the donor's state, at the step of the sync that admits it
            step = yield from self.survival.join()
            yield Step(step)
            self.take_state(step)
            yield from self.join_first_sync(step)
        while True:  # the loop top's exchanges still belong to the previous step, as `log.step` says in a run
            t = (yield from self.replica_clock()) if (budget or every_s) else 0.0
            if budget:
                if (yield from self.stop_here(step, t >= budget)):
                    break
            elif step >= cfg.steps:
                break
            if t >= next_eval:
                yield Work("eval", c.eval_s)
                while next_eval <= t:
                    next_eval += every_s
            yield from self.train_step(step)
            step += 1
            if not budget and cfg.data.eval_every and step % cfg.data.eval_every == 0 and step < cfg.steps:
                yield Work("eval", c.eval_s)
        yield Step(step)
        yield from self.finalize(step)
        self.end_s = yield Now()
        yield Row({"kind": "end", "step": step})

    def train_step(self, step: int) -> Gen:
        c = self.costs
        self.step = step
        if self.survival is not None:
            yield from self.survival.die(step)  # `faults.inject`: a death at the step's start
        yield Step(step)
        if self.survival is not None and self.syncs_in_step(step):  # sync's, EDiT's: the step again after a death
            yield from self.survival.attempt(step, lambda: self.until_optimizer(step), rerun_after_discard=True)
        else:
            yield from self.until_optimizer(step)
        yield Work("optimizer", c.other_s)
        yield from self.straggle(step, c.stretched_s)
        yield from self.after_optimizer(step)
        yield Row({"kind": "train", "step": step, "tokens": self.tokens})

    def until_optimizer(self, step: int) -> Gen:
        """`Trainer.until_optimizer`: `begin_step`, the forward, the backward, `after_backward`."""
        c = self.costs
        yield from self.begin_step(step)
        early = self.overlaps_grads(step)
        if self.coarse and not self.unit_hooks() and not early:  # the same times, two requests instead of two per unit
            yield Work("compute_fwd", sum(c.fwd_s))
            yield Work("compute_bwd", sum(c.bwd_s))
        else:
            yield from self.forward()
            yield from self.backward(early)
        yield from self.after_backward(step)

    def forward(self) -> Gen:
        """`ShardedModel.forward`: the root unit's embedding half, each block after its `pre_unit` hook, then
        the root's head half (so a block's sync waits on the embedding only, not on the head)."""
        c = self.costs
        yield from self.hooks_pre_unit(0)
        yield Work("compute_fwd", c.fwd_s[0] / 2, unit=0, data={"part": "embed"})
        for u in range(1, self.U):
            yield from self.hooks_pre_unit(u)
            yield Work("compute_fwd", c.fwd_s[u], unit=u)
        yield Work("compute_fwd", c.fwd_s[0] / 2, unit=0, data={"part": "head"})

    def hooks_pre_unit(self, unit: int) -> Gen:
        """What the forward calls before each unit (`Trainer.hooks`): `pre_unit`, after a death that strikes there
        (`faults.UnitFault`, survival's `fault_replica_unit`)."""
        if self.survival is not None:
            yield from self.survival.die(self.step, unit)
        yield from self.pre_unit(unit)

    def backward(self, early: bool = False) -> Gen:
        """`ShardedModel.backward`: the head half, the blocks last to first, the embedding half. Each unit's
        reduce-scatter is issued at the end of its backward; with `early` each unit's gradient all-reduce starts
        as `ShardedModel._after_reduce_scatter` hands its shard over: at once with one shard, at the next unit's
        reduce-scatter with several (the root unit's, the last, in `finish_backward`, i.e. at the end)."""
        c = self.costs
        pending: list[int] = []  # units reduce-scattered, their shards not handed over yet
        travelling = 0 if self.cfg.shards == 1 else 1  # the newest reduce-scatter travels on (S > 1)

        def reduce_scattered(unit: int) -> Gen:  # `_reduce_scatter_grad`, then `_after_reduce_scatter`
            if early:
                pending.append(unit)
                while len(pending) > travelling:
                    yield from self.grad_ready(pending.pop(0))

        yield Work("compute_bwd", c.bwd_s[0] / 2, unit=0, data={"part": "head"})
        for u in reversed(range(1, self.U)):
            yield Work("compute_bwd", c.bwd_s[u], unit=u)
            yield from reduce_scattered(u)
        yield Work("compute_bwd", c.bwd_s[0] / 2, unit=0, data={"part": "embed"})
        yield from reduce_scattered(0)
        for u in pending:  # `finish_backward`: the root unit's, with S > 1
            yield from self.grad_ready(u)

    def straggle(self, step: int, compute_s: float) -> Gen:
        """`StragglerModel.delay`: (k − 1) × the step's own compute for a slow replica (no collective, no
        wait: the worker's `Trainer.straggle`, after the optimizer), plus random pauses and a reader's rule."""
        d, why = self.planned_pause(step, compute_s)
        if d > 0:
            yield Work("straggle", d, data={"reason": why, "planned": d, "compute": compute_s})

    def planned_pause(self, step: int, compute_s: float) -> tuple[float, str | None]:
        """`StragglerModel.delay`'s (seconds, reason) for this replica at `step`."""
        cfg = self.cfg
        d, why = 0.0, None
        if self.replica in cfg.stragglers.replicas and cfg.stragglers.factor > 1.0:
            d, why = (cfg.stragglers.factor - 1.0) * compute_s, "consistent"
        extra = random_pause(cfg, step, self.replica)
        if extra > 0:
            d, why = d + extra, ("random" if why is None else "consistent+random")
        ruled = self.rules.straggler(step, self.replica, compute_s)
        if ruled > 0:
            d, why = d + ruled, ("rule" if why is None else why + "+rule")
        return d, why

    # ------------------------------------------------------------------ Method's hooks (synchronous training)
    def unit_hooks(self) -> bool:
        """Does `pre_unit` do anything in this step's forward? (Only EDiT's and A-EDiT's syncs.)"""
        return False

    def begin_step(self, step: int) -> Gen:
        yield from ()

    def pre_unit(self, unit: int) -> Gen:
        yield from ()

    def after_backward(self, step: int) -> Gen:
        if self.survival is not None:  # the newest view (a replacement's state) before the all-reduce
            yield from self.survival.before_sync(step)
        yield from self.all_reduce_grads()

    def after_optimizer(self, step: int) -> Gen:
        yield from ()

    def finalize(self, step: int) -> Gen:
        yield from ()

    # ------------------------------------------------------------------ surviving a death (`Method`'s hooks)
    def syncs_in_step(self, step: int) -> bool:
        """Does the step hold a sync before its optimizer (retried whole after a death)? sync's: every step."""
        return True

    def abandon_sync(self) -> Gen:
        """A sync failed: let go of what it has in flight."""
        yield from ()

    def discard_round(self, step: int) -> None:
        """`survive_on_failure='discard'`: drop the interrupted round (nothing for sync)."""

    def take_state(self, step: int) -> None:
        """A replacement took the donor's state at `step` (sync: θ, nothing the schedule reads)."""

    def join_first_sync(self, step: int) -> Gen:
        """A replacement, before training `step` (sync: nothing; its first all-reduce admits it)."""
        yield from ()

    def stop_here(self, step: int, spent: bool) -> Gen:
        return (yield from self.any_replica(spent))


class BackupProgram(ReplicaProgram):
    """`BackupMethod` (core/methods/backup.py): after the forward, the pause and the rendezvous (`Quorum`); a
    member's backward and overlapped all-reduces as sync's, a late replica's zeros at once, last unit first."""

    def train_step(self, step: int) -> Gen:
        c = self.costs
        yield Step(step)
        yield from self.begin_step(step)
        yield from self.forward()
        d, why = self.planned_pause(step, c.stretched_s)
        member = yield Quorum(self.cfg.quorum_m, d, {"reason": why, "planned": d, "compute": c.stretched_s})
        if member:
            yield from self.backward(early=self.overlaps_grads(step))
        else:
            for u in reversed(range(self.U)):
                yield from self.grad_ready(u)
        yield from self.after_backward(step)
        yield Work("optimizer", c.other_s)
        yield from self.after_optimizer(step)
        yield Row({"kind": "train", "step": step, "tokens": self.tokens if member else 0}
                  | ({} if member else {"dropped": True}))
