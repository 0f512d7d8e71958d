"""What each replica does, step by step, per method: the worker's loop and the methods' hooks, in time only.

This mirrors `worker.Trainer.run`/`train_step` and the hooks of `edit_lab/core/methods/*.py` one for one
(same names, same order, same sync-group collectives with the same kinds and sizes), with every
tensor operation replaced by its cost. When a method changes *when* it talks to the other replicas,
this file changes with it; `tests/unit/test_simulate.py` checks the collectives' kinds and counts
against the methods' schedules, and `tests/distributed/test_sim_matches_virtual.py` checks every rank's
collectives and every step's end against the virtual clock, which runs the methods' own code on the
same costs (`crosscheck.py`): they agree to float rounding.

- sync: every step, each unit's gradient shard is all-reduced, started during the backward as soon as the
  unit's shard is final (`ShardedModel._after_reduce_scatter`'s rule: at the end of the unit's backward with
  one shard, at the end of the next unit's with several) and waited for after it (`ReplicaProgram.backward`);
- backup: sync's step, but after the forward each replica spends its straggler pause in a rendezvous (`Quorum`):
  the first m ready run their backward, the others abandon the step and join its all-reduces with zeros at once;
- post_local_sgd / diloco: W synchronous steps (their gradient all-reduces overlapped as sync's), then the whole
  model synced every τ steps, blocking, between steps (Post Local SGD unit by unit, DiLoCo in one collective plus
  an outer step);
- co2: as DiLoCo, but round k's all-reduce is waited for only at the next boundary;
- edit: at the start of every τ-th step's forward, the decision exchange, then unit by unit
  (issued one unit ahead with prefetch) the sync all-reduce, the clip norm and the outer step;
- aedit: EDiT's sync, triggered by meetings every `sync_period` seconds of the replica's clock;
- streaming_diloco: every H/P steps one fragment's all-reduce leaves, and lands `fragment_sync_delay` steps
  later (a wait, then the outer step of each of its units); a closing sync of the fragments that trained. A
  reader's `fragment_schedule_rule` decides which fragment lands when, as on the ranks.

Pseudo-gradients travel in the run's wire format (`wire.collective_bytes`: the bytes the run records, the ring
rule `wire.ring_bytes` of `wire.wire_tensor_bytes`).

Time budgets (`time_budget`) follow edit-method.md §12 exactly as the worker does: the stop checks,
the budget meetings at sync points, and the closing sync of `finalize`.
"""

from __future__ import annotations

import functools
import math
import random
from collections.abc import Callable, Generator
from typing import Any

from edit_lab.clock.costs import Costs
from edit_lab.clock.sim.engine import Handle, Issue, Local, Now, Quorum, Row, Step, Wait, Work
from edit_lab.config import RunConfig
from edit_lab.core.wire import collective_op, padded, wire_tensor_bytes
from edit_lab.core.wire import spec_of as wire_spec_of
from edit_lab.hooks import fragment_schedule_of
from edit_lab.protocol import (
    DECISION_FIELDS,
    MEETING_FIELDS,
    decide_sync,
    fragment_units,
    in_warmup,
    is_anchor_step,
    is_sync_step,
)

Gen = Generator[Any, Any, Any]
F64 = 8  # bytes of one float64 value in the small exchanges


def random_pause(cfg: RunConfig, step: int, replica: int) -> float:
    """`StragglerModel.random_pause`: the very draw of a real run when torch is installed, else the same law."""
    if cfg.random_pause_prob <= 0 or cfg.random_pause_ms <= 0:
        return 0.0
    try:
        from edit_lab.train.stragglers import StragglerModel
    except ImportError:  # no torch: a pause with the same probability, from a generator seeded the same way
        rng = random.Random(hash((cfg.seed, replica, step, 0x57A6)))
        return cfg.random_pause_ms / 1e3 if rng.random() < cfg.random_pause_prob else 0.0
    # the draw alone: from_config would also compile a straggler_rule, at every draw
    return StragglerModel(cfg.seed, pause_prob=cfg.random_pause_prob, pause_s=cfg.random_pause_ms / 1e3).random_pause(
        step, replica)


@functools.lru_cache(maxsize=8)
def _straggler_rule(source: str) -> Callable[[int, int, float], float]:
    """A reader's `straggler_rule`, compiled once (edit_lab.hooks, no torch)."""
    from edit_lab.hooks import straggler

    return straggler(source)


class ReplicaProgram:
    """`Trainer.run` of one replica with `Method`'s hooks: the base behaviour is synchronous training."""

    def __init__(self, cfg: RunConfig, costs: Costs, replica: int) -> None:
        self.cfg, self.costs, self.replica = cfg, costs, replica
        self.R, self.U = cfg.replicas, costs.units
        self.tokens = cfg.shards * cfg.batch_size * cfg.seq_len
        self.end_s = 0.0
        self.coarse = False  # one forward and one backward span per step where no unit hook runs (no events kept)
        self.grads_in_flight: list[Handle] = []  # gradient all-reduces issued during this step's backward

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
        return self.R > 1 and self.all_reduces_grads(step)

    def grad_ready(self, unit: int) -> Gen:
        """`Method.grad_ready`: unit's gradient shard is final; its all-reduce leaves now."""
        self.grads_in_flight.append((yield Issue("grad_all_reduce", self.costs.unit_bytes[unit], unit=unit)))

    # ------------------------------------------------------------------ the worker's loop
    def run(self) -> Gen:
        cfg, c = self.cfg, self.costs
        budget, every_s = cfg.time_budget, cfg.eval_every_s
        next_eval = every_s if every_s > 0 else math.inf
        step = 0
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
            if not budget and cfg.eval_every and step % cfg.eval_every == 0 and step < cfg.steps:
                yield Work("eval", c.eval_s)
        yield Step(step)
        yield from self.finalize(step)
        self.end_s = yield Now()
        yield Row({"kind": "end", "step": step})

    def train_step(self, step: int) -> Gen:
        c = self.costs
        yield Step(step)
        yield from self.begin_step(step)
        early = self.overlaps_grads(step)
        if self.coarse and not self.unit_hooks() and not early:  # the same times, two requests instead of two per unit
            yield Work("compute_fwd", sum(c.fwd_s))
            yield Work("compute_bwd", sum(c.bwd_s))
        else:
            yield from self.forward()
            yield from self.backward(early)
        yield from self.after_backward(step)
        yield Work("optimizer", c.other_s)
        yield from self.straggle(step, c.stretched_s)
        yield from self.after_optimizer(step)
        yield Row({"kind": "train", "step": step, "tokens": self.tokens})

    def forward(self) -> Gen:
        """`ShardedModel.forward`: the root unit's embedding half, each block after its `pre_unit` hook, then
        the root's head half (so a block's sync waits on the embedding only, not on the head)."""
        c = self.costs
        yield from self.pre_unit(0)
        yield Work("compute_fwd", c.fwd_s[0] / 2, unit=0, data={"part": "embed"})
        for u in range(1, self.U):
            yield from self.pre_unit(u)
            yield Work("compute_fwd", c.fwd_s[u], unit=u)
        yield Work("compute_fwd", c.fwd_s[0] / 2, unit=0, data={"part": "head"})

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
        if self.replica in cfg.straggler_replicas and cfg.straggler_factor > 1.0:
            d, why = (cfg.straggler_factor - 1.0) * compute_s, "consistent"
        extra = random_pause(cfg, step, self.replica)
        if extra > 0:
            d, why = d + extra, ("random" if why is None else "consistent+random")
        if cfg.straggler_rule is not None:
            ruled = _straggler_rule(cfg.straggler_rule)(step, self.replica, compute_s)
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
        yield from self.all_reduce_grads()

    def after_optimizer(self, step: int) -> Gen:
        yield from ()

    def finalize(self, step: int) -> Gen:
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


class LocalSGDProgram(ReplicaProgram):
    """methods/local_sgd.py: warm-up, anchors at W, syncs between steps every τ, budget meetings."""

    def __init__(self, cfg: RunConfig, costs: Costs, replica: int) -> None:
        super().__init__(cfg, costs, replica)
        self.outer = False
        self.last_sync_step: int | None = None
        self.stopping = False
        self.last_meeting: tuple[list[bool], int] | None = None
        self.n_syncs = 0

    def begin_step(self, step: int) -> Gen:
        if is_anchor_step(step, self.cfg.warmup_steps):
            self.create_anchors(step)
        yield from ()

    def create_anchors(self, step: int) -> None:
        self.outer = True
        self.last_sync_step = step

    def all_reduces_grads(self, step: int) -> bool:
        return in_warmup(step, self.cfg.warmup_steps)

    def after_backward(self, step: int) -> Gen:
        if self.all_reduces_grads(step):
            yield from self.all_reduce_grads()

    def after_optimizer(self, step: int) -> Gen:
        if is_sync_step(step + 1, self.cfg.warmup_steps, self.cfg.sync_interval) and (yield from self.go_on(step + 1)):
            yield from self.sync_between_steps(step + 1)

    def finalize(self, step: int) -> Gen:
        if self.outer and (yield from self.final_sync_needed(step)):
            yield from self.sync_between_steps(step)

    def stop_here(self, step: int, spent: bool) -> Gen:
        if not self.outer:
            return (yield from self.any_replica(spent))
        return self.stopping or spent

    def budget_meeting(self, step: int, done: bool) -> Gen:
        assert self.last_sync_step is not None
        rows = yield from self.exchange("stop_check", 2 * self.R * F64, (done, step - self.last_sync_step),
                                        op="all_gather")
        flags, total = [bool(r[0]) for r in rows], sum(int(r[1]) for r in rows)
        self.last_meeting = (flags, total)
        return flags, total

    def go_on(self, step: int, spent: bool | None = None) -> Gen:
        if not self.cfg.time_budget or self.R == 1:
            return True
        if spent is None:
            spent = (yield from self.replica_clock()) >= self.cfg.time_budget
        flags, _ = yield from self.budget_meeting(step, spent)
        self.stopping = any(flags)
        return not self.stopping

    def final_sync_needed(self, step: int) -> Gen:
        if not self.cfg.time_budget or self.R == 1:
            return self.last_sync_step != step
        met = self.last_meeting
        if met is not None and self.stopping and all(met[0]):
            return met[1] > 0
        while True:
            flags, total = yield from self.budget_meeting(step, True)
            if all(flags):
                return total > 0

    def sync_finished(self, step: int) -> None:
        self.last_sync_step = step
        self.n_syncs += 1

    def wire_bytes(self, units: list[int]) -> int:
        """The whole tensor of one sync-group collective of these units' pseudo-gradients, packed (`wire.pack`) and
        carried in the run's wire format (`wire.wire_tensor_bytes`; the engine records and charges it as an all-reduce
        by the ring rule, `wire.ring_bytes`); float32's: their shards' bytes."""
        fmt = wire_spec_of(self.cfg)
        if fmt == "none":
            return sum(self.costs.unit_bytes[u] for u in units)
        return wire_tensor_bytes(sum(padded(self.costs.unit_bytes[u] // 4, fmt) for u in units), fmt, self.R)

    @property
    def wire_op(self) -> str:
        """The collective pseudo-gradients travel as (`wire.collective_op`): an all-gather in sparseloco."""
        return collective_op(wire_spec_of(self.cfg))

    def sync_between_steps(self, step: int) -> Gen:
        raise NotImplementedError


class PostLocalSGDProgram(LocalSGDProgram):
    def sync_between_steps(self, step: int) -> Gen:
        for u in range(self.U):
            yield from self.exchange("param_average", self.wire_bytes([u]), None, unit=u, op=self.wire_op)
        self.sync_finished(step)


class DiLoCoProgram(LocalSGDProgram):
    def sync_between_steps(self, step: int) -> Gen:
        yield from self.whole_model_sync(step)

    def whole_model_sync(self, step: int) -> Gen:
        """One all-reduce of the whole model's pseudo-gradient, then the outer step (also CO2's closing sync)."""
        yield from self.exchange("sync_reduce", self.wire_bytes(list(range(self.U))), None, op=self.wire_op)
        yield Work("outer_step", sum(self.costs.outer_step_s))
        self.sync_finished(step)


class CO2Program(DiLoCoProgram):
    """methods/co2.py: round k's all-reduce issued at its boundary, landed at the next one."""

    def __init__(self, cfg: RunConfig, costs: Costs, replica: int) -> None:
        super().__init__(cfg, costs, replica)
        self.in_flight: Handle | str | None = None  # "local": one replica, nothing travels

    def create_anchors(self, step: int) -> None:
        super().create_anchors(step)
        self.in_flight = None

    def sync_between_steps(self, step: int) -> Gen:
        previous = self.in_flight
        self.in_flight = "local" if self.R == 1 else (yield Issue("co2_reduce", self.wire_bytes(list(range(self.U))),
                                                                    op=self.wire_op))
        yield from self.land(previous)
        self.sync_finished(step)

    def land(self, pending: Handle | str | None) -> Gen:
        if pending is None:  # nothing in flight (the first boundary)
            return
        if isinstance(pending, Handle):
            yield Wait(pending)
        yield Work("outer_step", sum(self.costs.outer_step_s))

    def finalize(self, step: int) -> Gen:
        if not self.outer:
            return
        partial = yield from self.final_sync_needed(step)
        pending, self.in_flight = self.in_flight, None
        yield from self.land(pending)
        if partial:
            yield from self.whole_model_sync(step)


class EDiTProgram(LocalSGDProgram):
    """methods/edit.py: the sync inside the forward, unit by unit, one unit ahead with prefetch."""

    def __init__(self, cfg: RunConfig, costs: Costs, replica: int) -> None:
        super().__init__(cfg, costs, replica)
        self.syncing = False
        self.sync_step = 0
        self.pending: dict[int, Handle | None] = {}
        # a reader's sync order (RunConfig.sync_schedule_rule): per unit, the issues and waits of its pre-forward
        rule = getattr(cfg, "sync_schedule_rule", None)
        self.plan = None
        if rule is not None:
            from edit_lab.hooks import sync_schedule_plan  # no torch

            self.plan = sync_schedule_plan(rule, self.U)

    def unit_hooks(self) -> bool:
        return self.syncing

    def should_sync(self, step: int) -> Gen:
        yield from ()
        return is_sync_step(step, self.cfg.warmup_steps, self.cfg.sync_interval)

    def begin_step(self, step: int) -> Gen:
        yield from super().begin_step(step)
        self.syncing = self.outer and step != self.last_sync_step and (yield from self.should_sync(step))
        if self.syncing:
            yield from self.start_sync(step)

    def after_optimizer(self, step: int) -> Gen:
        """EDiT syncs inside the forward, never between steps."""
        yield from ()

    def stop_here(self, step: int, spent: bool) -> Gen:
        if (self.outer and not self.stopping and step != self.last_sync_step
                and (yield from self.should_sync(step)) and not (yield from self.go_on(step, spent))):
            return True
        return (yield from super().stop_here(step, spent))

    def finalize(self, step: int) -> Gen:
        if not self.outer or not (yield from self.final_sync_needed(step)):
            return
        yield from self.start_sync(step)
        for u in range(self.U):
            yield from self.pre_unit(u)

    def start_sync(self, step: int) -> Gen:
        """Stages 1–2: the norms (shard group), then the decision all-gather (sync group, blocking)."""
        self.syncing, self.sync_step = True, step
        yield Local("sync_norms", self.costs.shard_exchange_s)
        yield from self.exchange("sync_decisions", self.R * self.U * len(DECISION_FIELDS) * F64, None, op="all_gather")

    def pre_unit(self, unit: int) -> Gen:
        if not self.syncing:
            return
        if self.plan is not None:  # methods/edit.py's `scheduled`
            for kind, u in self.plan[unit]:
                yield from (self.issue(u) if kind == "issue" else self.finish(u))
        else:
            if unit not in self.pending:
                yield from self.issue(unit)
            if self.cfg.prefetch and unit + 1 < self.U:
                yield from self.issue(unit + 1)
            yield from self.finish(unit)
        if unit == self.U - 1:
            self.syncing = False
            self.sync_finished(self.sync_step)

    def issue(self, unit: int) -> Gen:
        self.pending[unit] = None if self.R == 1 else (
            yield Issue("sync_reduce", self.wire_bytes([unit]), unit=unit, op=self.wire_op))

    def finish(self, unit: int) -> Gen:
        h = self.pending.pop(unit)
        if h is not None:
            yield Wait(h)
        if self.cfg.penalty_clip:
            yield Local("sync_clip", self.costs.shard_exchange_s, unit=unit)
        yield Work("outer_step", self.costs.outer_step_s[unit], unit=unit)


class AEDiTProgram(EDiTProgram):
    """methods/aedit.py: meetings when the timer expires; a sync when the round holds N_min steps."""

    def __init__(self, cfg: RunConfig, costs: Costs, replica: int) -> None:
        super().__init__(cfg, costs, replica)
        self.last_sync_time: float | None = None
        self.last_meeting_step: int | None = None
        self.all_done = False
        self.rounds: list[dict[str, Any]] = []

    def create_anchors(self, step: int) -> None:
        super().create_anchors(step)
        self.last_meeting_step = step
        self.last_sync_time = None

    def begin_step(self, step: int) -> Gen:
        yield from super().begin_step(step)
        if self.outer and self.last_sync_time is None:
            yield from self.start_timer()

    def start_timer(self) -> Gen:
        t = yield from self.replica_clock()
        clocks = yield from self.exchange("timer_start", self.R * F64, t, op="all_gather")
        self.last_sync_time = max(clocks)

    def should_sync(self, step: int) -> Gen:
        if self.last_sync_time is None:
            yield from self.start_timer()
            return False
        t = yield from self.replica_clock()
        if t - self.last_sync_time < self.cfg.sync_period:
            return False
        return (yield from self.meet(step, t, False))

    def meet(self, step: int, t: float, done: bool) -> Gen:
        assert self.last_sync_step is not None and self.last_meeting_step is not None
        mine = (step - self.last_sync_step, step - self.last_meeting_step, t, done, step)
        rows = yield from self.exchange("step_count", self.R * len(MEETING_FIELDS) * F64, mine, op="all_gather")
        total = sum(r[0] for r in rows)
        self.all_done = all(r[3] for r in rows)
        sync = decide_sync(total, self.cfg.min_sync_steps, self.all_done)
        self.last_sync_time = max(r[2] for r in rows)
        self.last_meeting_step = step
        self.rounds.append({"step": step, "steps": [r[0] for r in rows], "synced": sync, "t": self.last_sync_time})
        return sync

    def stop_here(self, step: int, spent: bool) -> Gen:
        if not self.outer:
            return (yield from self.any_replica(spent))
        return spent

    def finalize(self, step: int) -> Gen:
        if not self.outer:
            return
        while True:
            t = yield from self.replica_clock()
            if (yield from self.meet(step, t, True)):
                yield from self.start_sync(step)
                for u in range(self.U):
                    yield from self.pre_unit(u)
            if self.all_done:
                return


class StreamingDiLoCoProgram(LocalSGDProgram):
    """methods/streaming.py: a fragment leaves every H/P steps (or when a reader's `fragment_schedule_rule` says)
    and lands `fragment_sync_delay` steps later."""

    def __init__(self, cfg: RunConfig, costs: Costs, replica: int) -> None:
        super().__init__(cfg, costs, replica)
        self.fragments = fragment_units(self.U, cfg.fragments)
        self.delay = cfg.fragment_sync_delay
        # the schedule the ranks follow: the library's fragment_landing, or the reader's rule (no torch)
        self.landing = fragment_schedule_of(getattr(cfg, "fragment_schedule_rule", None))
        self.in_flight: tuple[int, Handle | None, int] | None = None  # (fragment, its all-reduce, landing step)
        self.fragment_last = [cfg.warmup_steps] * cfg.fragments

    def create_anchors(self, step: int) -> None:
        super().create_anchors(step)
        self.fragment_last = [step] * len(self.fragments)
        self.in_flight = None

    def after_optimizer(self, step: int) -> Gen:
        if not self.outer:
            return
        n, cfg = step + 1, self.cfg
        if self.in_flight is not None and self.in_flight[2] == n:
            yield from self.land(n)
        f = self.landing(n + self.delay, cfg.warmup_steps, cfg.sync_interval, cfg.fragments)
        if f is not None and (yield from self.go_on(n)):
            h = None if self.R == 1 else (yield Issue("sync_reduce", self.wire_bytes(self.fragments[f]),
                                                      op=self.wire_op))
            self.in_flight = (f, h, n + self.delay)
            if self.delay == 0:
                yield from self.land(n)

    def stop_here(self, step: int, spent: bool) -> Gen:
        if self.in_flight is not None:
            return False
        return (yield from super().stop_here(step, spent))

    def land(self, step: int) -> Gen:
        assert self.in_flight is not None
        f, h, _ = self.in_flight
        self.in_flight = None
        if h is not None:
            yield Wait(h)
        for u in self.fragments[f]:
            yield Work("outer_step", self.costs.outer_step_s[u], unit=u)
        self.fragment_last[f] = step
        self.sync_finished(step)
        return f

    def finalize(self, step: int) -> Gen:
        if not self.outer:
            return
        landed = (yield from self.land(step)) if self.in_flight is not None else None
        trained = yield from self.final_sync_needed(step)
        last = self.last_sync_step
        # the fragment that has just landed had its one outer step (streaming.py's finalize)
        need = [f for f in range(len(self.fragments)) if f != landed and (trained or self.fragment_last[f] < last)]
        if need:
            units = [u for f in need for u in self.fragments[f]]
            yield from self.exchange("sync_reduce", self.wire_bytes(units), None, op=self.wire_op)
            for u in units:
                yield Work("outer_step", self.costs.outer_step_s[u], unit=u)
            self.sync_finished(step)


PROGRAMS: dict[str, type[ReplicaProgram]] = {
    "sync": ReplicaProgram, "backup": BackupProgram, "post_local_sgd": PostLocalSGDProgram, "diloco": DiLoCoProgram,
    "co2": CO2Program, "edit": EDiTProgram, "aedit": AEDiTProgram, "streaming_diloco": StreamingDiLoCoProgram,
}
