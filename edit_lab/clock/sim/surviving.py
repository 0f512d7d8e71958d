"""Deaths and joins in the preview simulator: one replica's side (`core/survival.py`'s `Survival`, in time only).

A program with `survive=True` holds a `SimSurvival` and calls it where the methods call `Survival`: `before_sync` first
in every sync (sync's `after_backward`, DiLoCo's `sync_between_steps`, EDiT's `start_sync`), `attempt` around what
a death may interrupt (a step up to its optimizer for sync and EDiT, DiLoCo's sync), and `join` at a replacement's
start. The same stages, the same order, the same requests to the launcher's side (`survive.py`): enter (the newest
view, asking for a replacement when one is due, a donor's state written first), detect (`PeerLoss` thrown into the
program by a failed collective), roll back (the method's `abandon_sync`), wait for the next view, change to it, then
retry or discard.
"""

from __future__ import annotations

from collections.abc import Callable, Generator
from typing import Any

from edit_lab.clock.sim.engine import PeerLoss
from edit_lab.clock.sim.survive import Adopt, AskJoin, AwaitView, Die, FetchState, Gate, PutState, SimView
from edit_lab.config import RunConfig, deaths

Gen = Generator[Any, Any, Any]


class RoundDiscarded(Exception):
    """`survive_on_failure='discard'`: a sync met a view a death made (`core.survival.RoundDiscarded`)."""


class SimSurvival:
    """One replica's view of the run and the stages of an episode, for its program (`program`: the method's hooks
    `abandon_sync`, `discard_round`; its `members` follow the view)."""

    def __init__(self, cfg: RunConfig, program: Any, life: int) -> None:
        self.cfg, self.program, self.life = cfg, program, life
        self.donor = program.rules.donor
        self.view = SimView(0, tuple(range(cfg.replicas)))
        self.fresh: tuple[int, ...] = ()
        self.snapshot = False  # a sync attempt took its snapshot (it got past `enter`)

    # ------------------------------------------------------------ a death
    def dies_at(self, step: int, unit: int = -1) -> str | None:
        """`faults.inject` (`unit` -1: at the start of `step`) and `faults.UnitFault` (right before unit `unit`'s
        `pre_unit` in the forward of `step`): the kind of death that strikes this life there (None: none)."""
        t = self.cfg.trouble
        if deaths.life_dying_at(self.cfg, self.program.replica, step) != self.life:
            return None
        first = self.life == 0 and step == t.fault_replica_step  # only the first death may strike inside a step
        return t.fault_replica_kind if unit == (t.fault_replica_unit if first else -1) else None

    def die(self, step: int, unit: int = -1) -> Gen:
        kind = self.dies_at(step, unit)
        if kind is not None:
            yield Die(kind)

    # ------------------------------------------------------------ views
    def adopt(self, view: SimView) -> Gen:
        yield Adopt(view)
        self.view, self.fresh = view, view.joined
        self.program.members = view.members

    def joiners_due(self, step: int, view: SimView | None = None) -> bool:
        missing = [r for r in range(self.cfg.replicas) if r not in (view or self.view).members]
        return bool(deaths.due_now(self.cfg, missing, step))

    def enter(self, step: int) -> Gen:
        """Stage 1: the newest view (asking for the replacements when due); True when a death made it."""
        seen: tuple[SimView, ...] = yield Gate()
        if self.joiners_due(step, seen[-1]):  # asked in the newest view, as `Survival.enter`
            yield AskJoin(seen[-1].number, step)
            seen = yield AwaitView(seen[-1].number)
        latest, before = seen[-1], self.view.number
        if latest.number <= before:
            return False
        yield from self.change_to(latest, step)
        return any(v.died for v in seen if before < v.number)

    def change_to(self, view: SimView, step: int) -> Gen:
        if view.joined and self.donor(view.members, view.joined) == self.program.replica:
            yield PutState(view.number, step)
        yield from self.adopt(view)

    # ------------------------------------------------------------ one sync attempt after another
    def before_sync(self, step: int) -> Gen:
        died = yield from self.enter(step)
        if died and self.cfg.runtime.survive_on_failure == "discard":
            raise RoundDiscarded(f"view {self.view.number} at step {step}")
        self.snapshot = True

    def attempt(self, step: int, run: Callable[[], Gen], rerun_after_discard: bool) -> Gen:
        """`Survival.attempt`: run `run` until it completes in some view."""
        while True:
            self.snapshot = False
            try:
                out = yield from run()
            except RoundDiscarded:
                yield from self.program.abandon_sync()
                self.program.discard_round(step)
                if not rerun_after_discard:
                    return None
                continue
            except PeerLoss:
                pass
            else:
                if self.snapshot:
                    self.fresh = ()
                return out
            discarded = yield from self.recover(step)
            if discarded and not rerun_after_discard:
                return None

    def recover(self, step: int) -> Gen:
        """Roll back, wait for the next view, change to it; True when the round was discarded."""
        yield from self.program.abandon_sync()
        rolled, self.snapshot = self.snapshot, False
        seen: tuple[SimView, ...] = yield AwaitView(self.view.number)
        yield from self.change_to(seen[-1], step)
        discard = self.cfg.runtime.survive_on_failure == "discard" and rolled
        if discard:
            self.program.discard_round(step)
        return discard

    # ------------------------------------------------------------ a replacement
    def join(self) -> Gen:
        """Wait for the view that names this replica, read the donor's state, adopt the view; the state's step."""
        me = self.program.replica
        latest: SimView = (yield Gate())[-1]
        while True:
            latest = (yield AwaitView(latest.number))[-1]
            if me in latest.joined:
                break
        step = yield FetchState(latest.number)
        yield from self.adopt(latest)
        return step
