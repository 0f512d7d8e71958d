"""What each replica does, step by step, per method: the worker's loop and the methods' hooks, in time only.

This mirrors `trainer.Trainer.run`/`train_step` and the hooks of `edit_lab/core/methods/*.py` one for one
(same names, same order, same sync-group collectives with the same kinds and sizes), with every
tensor operation replaced by its cost. When a method changes *when* it talks to the other replicas,
this file changes with it; `tests/unit/test_simulate.py` checks the collectives' kinds and counts
against the methods' schedules, and `tests/distributed/test_sim_matches_virtual.py` checks every rank's
collectives and every step's end against the virtual clock, which runs the methods' own code on the
same costs (`tests/distributed/sim_crosscheck.py`): they agree to float rounding.

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

from typing import Any

from edit_lab.clock.costs import Costs
from edit_lab.clock.sim.engine import Issue, Local, SimHandle, Wait, Work
from edit_lab.clock.sim.replica import F64, BackupProgram, Gen, ReplicaProgram, random_pause  # noqa: F401
from edit_lab.config import RunConfig
from edit_lab.core.wire import collective_op, padded, wire_tensor_bytes
from edit_lab.core.wire import spec_of as wire_spec_of
from edit_lab.protocol import (
    DECISION_FIELDS,
    MEETING_FIELDS,
    decide_sync,
    fragment_units,
    in_warmup,
    is_anchor_step,
    is_sync_step,
)

class LocalSGDProgram(ReplicaProgram):
    """methods/local_sgd.py: warm-up, anchors at W, syncs between steps every τ, budget meetings."""

    def __init__(self, cfg: RunConfig, costs: Costs, replica: int, life: int = 0) -> None:
        super().__init__(cfg, costs, replica, life)
        self.outer = False
        self.last_sync_step: int | None = None
        self.stopping = False
        self.last_meeting: tuple[list[bool], int] | None = None
        self.n_syncs = 0

    def begin_step(self, step: int) -> Gen:
        if is_anchor_step(step, self.cfg.schedule.warmup_steps):
            self.create_anchors(step)
        yield from ()

    def create_anchors(self, step: int) -> None:
        self.outer = True
        self.last_sync_step = step

    def all_reduces_grads(self, step: int) -> bool:
        return in_warmup(step, self.cfg.schedule.warmup_steps)

    def after_backward(self, step: int) -> Gen:
        if self.all_reduces_grads(step):
            yield from self.all_reduce_grads()

    def after_optimizer(self, step: int) -> Gen:
        if is_sync_step(step + 1, self.cfg.schedule.warmup_steps, self.cfg.schedule.sync_interval) and (yield from self.go_on(step + 1)):
            yield from self.sync_now(step + 1)

    def finalize(self, step: int) -> Gen:
        if self.outer and (yield from self.final_sync_needed(step)):
            yield from self.sync_now(step)

    def sync_now(self, step: int) -> Gen:
        """`sync_between_steps`, through survival's attempts when it is on."""
        if self.survival is None:
            yield from self.sync_between_steps(step)
        else:
            yield from self.survival.attempt(step, lambda: self.sync_between_steps(step), rerun_after_discard=False)

    # ------------------------------------------------------------ surviving a death (methods/local_sgd.py)
    def syncs_in_step(self, step: int) -> bool:
        return False

    def discard_round(self, step: int) -> None:
        self.last_sync_step = step

    def take_state(self, step: int) -> None:
        self.outer = True  # the donor's anchors and outer state (a join is after the warm-up)

    def join_first_sync(self, step: int) -> Gen:
        self.last_sync_step = step
        yield from self.sync_now(step)

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
        if self.survival is not None:
            yield from self.survival.before_sync(step)
        yield from self.whole_model_sync(step)

    def whole_model_sync(self, step: int) -> Gen:
        """One all-reduce of the whole model's pseudo-gradient, then the outer step (also CO2's closing sync)."""
        yield from self.exchange("sync_reduce", self.wire_bytes(list(range(self.U))), None, op=self.wire_op)
        yield Work("outer_step", sum(self.costs.outer_step_s))
        self.sync_finished(step)


class CO2Program(DiLoCoProgram):
    """methods/co2.py: round k's all-reduce issued at its boundary, landed at the next one."""

    def __init__(self, cfg: RunConfig, costs: Costs, replica: int, life: int = 0) -> None:
        super().__init__(cfg, costs, replica, life)
        self.in_flight: SimHandle | str | None = None  # "local": one replica, nothing travels

    def create_anchors(self, step: int) -> None:
        super().create_anchors(step)
        self.in_flight = None

    def sync_between_steps(self, step: int) -> Gen:
        previous = self.in_flight
        self.in_flight = "local" if self.R == 1 else (yield Issue("co2_reduce", self.wire_bytes(list(range(self.U))),
                                                                    op=self.wire_op))
        yield from self.land(previous)
        self.sync_finished(step)

    def land(self, pending: SimHandle | str | None) -> Gen:
        if pending is None:  # nothing in flight (the first boundary)
            return
        if isinstance(pending, SimHandle):
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

    def __init__(self, cfg: RunConfig, costs: Costs, replica: int, life: int = 0) -> None:
        super().__init__(cfg, costs, replica, life)
        self.syncing = False
        self.join_pending = False  # a replacement before its first sync (k = 0 there)
        self.sync_step = 0
        self.pending: dict[int, SimHandle | None] = {}
        # per unit, the issues and waits of its pre-forward during a sync: prefetch's, or a reader's order
        self.plan = self.rules.sync_plan(self.U)

    def unit_hooks(self) -> bool:
        return self.syncing

    def should_sync(self, step: int) -> Gen:
        yield from ()
        return is_sync_step(step, self.cfg.schedule.warmup_steps, self.cfg.schedule.sync_interval)

    def begin_step(self, step: int) -> Gen:
        yield from super().begin_step(step)
        self.syncing = (self.outer and (step != self.last_sync_step or self.join_pending)
                        and (yield from self.should_sync(step)))
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
        if self.survival is not None:
            yield from self.survival.attempt(step, lambda: self.closing_sync(step), rerun_after_discard=True)
        else:
            yield from self.closing_sync(step)

    def closing_sync(self, step: int) -> Gen:
        if not self.outer or not ((yield from self.final_sync_needed(step)) or self.join_pending):
            return
        yield from self.start_sync(step)
        for u in range(self.U):
            yield from self.pre_unit(u)

    def start_sync(self, step: int) -> Gen:
        """Stages 1–2: the norms (shard group), then the decision all-gather (sync group, blocking)."""
        if self.survival is not None:
            yield from self.survival.before_sync(step)
        self.syncing, self.sync_step = True, step
        yield Local("sync_norms", self.costs.shard_exchange_s)
        yield from self.exchange("sync_decisions", self.R * self.U * len(DECISION_FIELDS) * F64, None, op="all_gather")

    def pre_unit(self, unit: int) -> Gen:
        if not self.syncing:
            return
        for kind, u in self.plan[unit]:  # methods/edit.py's `pre_unit`
            yield from (self.issue(u) if kind == "issue" else self.finish(u))
        if unit == self.U - 1:
            self.syncing = self.join_pending = False
            self.sync_finished(self.sync_step)

    # ------------------------------------------------------------ surviving a death (methods/edit.py)
    def syncs_in_step(self, step: int) -> bool:
        return True

    def abandon_sync(self) -> Gen:
        """Drain the failed sync's prefetched transfers (each ends, or fails on the dead peer) and forget it."""
        from edit_lab.clock.sim.survive import Drain

        for h in self.pending.values():
            if h is not None:
                yield Drain(h)
        self.pending, self.syncing = {}, False

    def join_first_sync(self, step: int) -> Gen:
        self.last_sync_step = step
        self.join_pending = True
        yield from ()

    def issue(self, unit: int) -> Gen:
        self.pending[unit] = None if self.R == 1 else (
            yield Issue("sync_reduce", self.wire_bytes([unit]), unit=unit, op=self.wire_op))

    def finish(self, unit: int) -> Gen:
        h = self.pending.pop(unit)
        if h is not None:
            yield Wait(h)
        if self.cfg.penalty.clip:
            yield Local("sync_clip", self.costs.shard_exchange_s, unit=unit)
        yield Work("outer_step", self.costs.outer_step_s[unit], unit=unit)


class AEDiTProgram(EDiTProgram):
    """methods/aedit.py: meetings when the timer expires; a sync when the round holds N_min steps."""

    def __init__(self, cfg: RunConfig, costs: Costs, replica: int, life: int = 0) -> None:
        super().__init__(cfg, costs, replica, life)
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
        if t - self.last_sync_time < self.cfg.aedit.sync_period:
            return False
        return (yield from self.meet(step, t, False))

    def meet(self, step: int, t: float, done: bool) -> Gen:
        assert self.last_sync_step is not None and self.last_meeting_step is not None
        mine = (step - self.last_sync_step, step - self.last_meeting_step, t, done, step)
        rows = yield from self.exchange("step_count", self.R * len(MEETING_FIELDS) * F64, mine, op="all_gather")
        total = sum(r[0] for r in rows)
        self.all_done = all(r[3] for r in rows)
        sync = decide_sync(total, self.cfg.aedit.min_sync_steps, self.all_done)
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

    def __init__(self, cfg: RunConfig, costs: Costs, replica: int, life: int = 0) -> None:
        super().__init__(cfg, costs, replica, life)
        self.fragments = fragment_units(self.U, cfg.streaming.fragments)
        self.delay = cfg.streaming.fragment_sync_delay
        # the schedule the ranks follow: the library's fragment_landing, or the reader's rule (no torch)
        self.landing = self.rules.fragment_landing
        self.in_flight: tuple[int, SimHandle | None, int] | None = None  # (fragment, its all-reduce, landing step)
        self.fragment_last = [cfg.schedule.warmup_steps] * cfg.streaming.fragments

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
        f = self.landing(n + self.delay, cfg.schedule.warmup_steps, cfg.schedule.sync_interval, cfg.streaming.fragments)
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
