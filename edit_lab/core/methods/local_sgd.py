"""The Local-SGD family's shared loop, and two baselines: Post Local SGD and DiLoCo.

Schedule (edit-method.md §3, tested step by step in `edit_lab/protocol.py`), with W warm-up steps and
sync interval τ:
- steps 0 … W−1 are synchronous: gradients are all-reduced across replicas, as in `sync`;
- at the start of step W the anchors are created (a = θ, identical everywhere): nothing changes;
- then each replica trains alone, and at the start of steps W+τ, W+2τ, … the replicas sync.

The baselines sync *between* steps, whole model at once and blocking, which is exactly what EDiT
improves on: they do it after the optimizer step of step W+kτ−1, so the parameters entering step
W+kτ are the same as if they had synced at its start.

Time-only twin: `LocalSGDProgram`, `PostLocalSGDProgram`, `DiLoCoProgram` in `edit_lab/clock/sim/programs.py`,
the preview simulator's copy of this schedule: a change to *when* this method talks to the other replicas
changes it too (tests/distributed/test_sim_matches_virtual.py holds the two to the same timeline).
"""

from __future__ import annotations

import zlib
from typing import Any

import torch

from edit_lab.core.methods.base import Method
from edit_lab.core.outer import OuterState
from edit_lab.core.wire import pack, unpack
from edit_lab.core.wire import spec_of as wire_spec_of
from edit_lab.protocol import in_warmup, is_anchor_step, is_sync_step
from edit_lab.rules.rules import torch_sgd


def crc(t: torch.Tensor) -> int:
    return zlib.crc32(t.detach().cpu().contiguous().numpy().tobytes())


class LocalSGDMethod(Method):
    """Warm-up with synchronous gradients, anchors from step W on; subclasses say how to sync."""

    uses_outer_optimizer = True

    def __init__(self, cfg, engine) -> None:
        super().__init__(cfg, engine)
        self.outer: OuterState | None = None
        self.last_sync_step: int | None = None
        self.n_syncs = 0
        self.stopping = False  # time budgets: a replica said at a sync point that its budget is spent
        self.last_meeting: tuple[list[bool], int] | None = None  # the latest budget meeting's (done flags, total)
        # compressed pseudo-gradients (edit_lab/core/wire.py): Comm carries the sync group's pseudo-gradient kinds in
        # this format, the outer state hands out what travels (and keeps error feedback's residuals)
        self.wire: str = wire_spec_of(cfg)  # the format, with sparseloco's parameters (wire.spec)
        if self.comm.wire != self.wire:  # Comm is built with the run's wire format (trainer.py, virtual.py)
            raise RuntimeError(f"the comm carries {self.comm.wire!r}, the run {self.wire!r}")

    # ------------------------------------------------------------ schedule
    def begin_step(self, step: int) -> None:
        super().begin_step(step)
        if is_anchor_step(step, self.cfg.schedule.warmup_steps):
            self.create_anchors(step)

    def create_anchors(self, step: int, record: bool = True) -> None:
        self.outer = self.make_outer()
        self.outer.set_wire(self.wire, self.cfg.wire.error_feedback)
        self.last_sync_step = step
        if record:
            self.log.record("anchor", step=step)

    def make_outer(self) -> OuterState:
        """Anchor (a = θ) and outer optimizer from the `outer_*` settings; CO2 brings its own (`CO2Outer`)."""
        cfg = self.cfg
        lr, momentum = (cfg.outer.lr, cfg.outer.momentum) if self.uses_outer_optimizer else (1.0, 0.0)
        # a reader's step only where the outer optimizer is configured; plain averaging is torch's SGD at lr 1
        step = self.rules.outer_step if self.uses_outer_optimizer else torch_sgd(False)
        return OuterState(self.engine.shards, lr, momentum, cfg.outer.nesterov, cfg.schedule.cpu_offload, step)

    def after_backward(self, step: int) -> None:
        if in_warmup(step, self.cfg.schedule.warmup_steps):
            self.all_reduce_grads_over_sync_group()

    def after_optimizer(self, step: int) -> None:
        if is_sync_step(step + 1, self.cfg.schedule.warmup_steps, self.cfg.schedule.sync_interval) and self.go_on(step + 1):
            self.sync_now(step + 1)

    def finalize(self, step: int) -> None:
        if self.outer is not None and self.final_sync_needed(step):
            self.sync_now(step)

    def sync_now(self, step: int) -> None:
        """`sync_between_steps`, through survival's attempts when it is on (rolled back and retried in a new view
        after a death, or the round discarded: core/survival.py)."""
        if self.survival is None:
            self.sync_between_steps(step)
        else:
            self.survival.attempt(step, lambda: self.sync_between_steps(step), rerun_after_discard=False)

    # ------------------------------------------------------------ surviving a death (core/survival.py)
    def abandon_sync(self) -> None:
        self.comm._pending_sync.clear()  # the link model's queue: the failed collectives never land

    @torch.no_grad()
    def discard_round(self, step: int) -> None:
        """Drop the survivors' local steps of the interrupted round: θ ← a, and the round starts again here."""
        assert self.outer is not None
        for unit, theta in enumerate(self.engine.shards):
            self.outer.reset(unit, theta)
        self.last_sync_step = step

    def join_first_sync(self, step: int) -> None:
        """A replacement, θ = a and no local step (k = 0), takes part in the sync at `step` that admits it."""
        self.last_sync_step = step
        self.sync_now(step)

    def trained_members(self) -> int:
        """Replicas whose Δ the sync's sum holds: the group less the replacements in their first sync (Δ = 0)."""
        fresh = () if self.survival is None else self.survival.fresh
        return self.mesh.sync_size - len(fresh)

    # ------------------------------------------------------------ time budgets (edit-method.md §12)
    def stop_here(self, step: int, spent: bool) -> bool:
        """Lockstep during warm-up (the base class's exchange); afterwards each replica stops on its own
        clock, or because another replica said at the last sync point that its budget was spent."""
        if self.outer is None:
            return super().stop_here(step, spent)
        return self.stopping or spent

    def budget_meeting(self, step: int, done: bool) -> tuple[list[bool], int]:
        """Tell every replica whether this one is done, and how many steps it trained since the last sync.

        A small all-gather over the sync group (kind 'stop_check'), held where every replica meets anyway:
        at each sync point, and in `finalize`. Returns (done flags, total steps since the last sync).
        """
        assert self.last_sync_step is not None
        dev, R = self.comm.device, self.mesh.replicas
        mine = torch.tensor([float(done), float(step - self.last_sync_step)], dtype=torch.float64, device=dev)
        everyone = torch.zeros(2 * R, dtype=torch.float64, device=dev)
        self.comm.all_gather(everyone, mine, group="sync", kind="stop_check")
        rows = everyone.reshape(R, 2).cpu().tolist()
        flags, total = [bool(r[0]) for r in rows], int(round(sum(r[1] for r in rows)))
        self.log.record("stop_check", step=step, done=flags, total=total)
        self.last_meeting = (flags, total)
        return flags, total

    def go_on(self, step: int, spent: bool | None = None) -> bool:
        """At a sync point of a time-budget run: False when some replica's budget is spent; everyone then
        skips this sync and meets in `finalize` instead, where one last sync ends the run. Always True
        without a time budget (no exchange at all)."""
        if not self.cfg.time_budget or self.mesh.replicas == 1:
            return True
        if spent is None:
            spent = self.replica_clock() >= self.cfg.time_budget
        flags, _ = self.budget_meeting(step, done=spent)
        self.stopping = any(flags)
        return not self.stopping

    def final_sync_needed(self, step: int) -> bool:
        """Does the run end with one more sync? With a step count: when steps were trained since the last
        one (the same on every replica). With a time budget the replicas are at different steps, so they
        meet (flagged done) until every replica is done, and sync when any of them trained since the last
        sync: the same decision everywhere, from the same gathered vector."""
        if not self.cfg.time_budget or self.mesh.replicas == 1:
            return self.last_sync_step != step
        # A meeting at a sync point where every replica was already done (this one and the others in
        # their `finalize`) was the last one: the others have left the loop, so meeting again would pair
        # this replica's all-gather with their final sync's collectives.
        met = self.last_meeting
        if met is not None and self.stopping and all(met[0]):
            return met[1] > 0
        while True:
            flags, total = self.budget_meeting(step, done=True)
            if all(flags):
                return total > 0

    def sync_between_steps(self, step: int) -> None:
        raise NotImplementedError

    def sync_finished(self, step: int, checkpoint: bool = True, **record) -> None:
        """Bookkeeping of a completed sync: the counters, its `sync` record, and — where every replica now
        holds θ = a — a checkpoint moment."""
        self.last_sync_step = step
        self.n_syncs += 1
        if self.survival is not None:  # who synced: the view's members, of whom the replacements sent Δ = 0
            record.update(view=self.survival.view.number, members=self.mesh.sync_replicas,
                          fresh=list(self.survival.fresh))
        self.log.record("sync", step=step, **record)
        if checkpoint:
            self.synced(step)

    def eval_shards(self) -> list[torch.Tensor]:
        if self.outer is None:  # still in warm-up: every replica holds the same θ
            return list(self.engine.shards)
        return [a.detach().to(self.engine.device) for a in self.outer.anchors]

    def log_checksums(self, unit: int) -> None:
        """CRC32 of this rank's θ and anchor shard of `unit`: lets tests prove replicas agree bit for bit."""
        assert self.outer is not None
        t = self.log.clock.now()
        self.log.add("checksum", t, t, unit=unit, theta=crc(self.engine.shards[unit]),
                     anchor=crc(self.outer.anchors[unit]))

    def extra_state_numel(self) -> int:
        return 0 if self.outer is None else self.outer.numel()

    def state_dict(self) -> dict[str, Any]:
        return {"outer": None if self.outer is None else self.outer.state_dict(),
                "last_sync_step": self.last_sync_step, "n_syncs": self.n_syncs}

    def load_state_dict(self, state: dict[str, Any]) -> None:
        if state.get("outer") is not None:
            if self.outer is None:
                self.create_anchors(state["last_sync_step"], record=False)
            self.outer.load_state_dict(state["outer"])
        self.last_sync_step, self.n_syncs = state["last_sync_step"], state["n_syncs"]


class PostLocalSGDMethod(LocalSGDMethod):
    """Post Local SGD (Lin et al.): after warm-up, plain parameter averaging every τ steps.

    In a wire format (edit_lab/core/wire.py) it averages the pseudo-gradients instead, θ ← a − mean(Δ̂): the same
    average in exact arithmetic, and Δ = a − θ is what compresses (θ itself is no small quantity)."""

    name = "post_local_sgd"
    uses_outer_optimizer = False

    @torch.no_grad()
    def sync_between_steps(self, step: int) -> None:
        assert self.outer is not None
        R = self.mesh.replicas
        for unit, theta in enumerate(self.engine.shards):
            if self.wire == "none":
                buf = theta.detach().clone()
                self.comm.all_reduce(buf, group="sync", kind="param_average", unit=unit)
                buf.div_(R)
            else:
                delta = self.outer.pseudo_gradient(unit, theta)
                self.comm.compressed_all_reduce(delta, group="sync", kind="param_average", unit=unit)
                buf = self.outer.anchor(unit, theta.device) - delta.div_(R)
                self.outer.keep_residual(unit, used=True)  # no penalty: used (a non-finite residual is not kept)
            theta.copy_(buf)
            self.outer.anchors[unit].copy_(buf.to(self.outer.anchors[unit].device))
            if self.cfg.runtime.checksums:
                self.log_checksums(unit)
        self.sync_finished(step)


class DiLoCoMethod(LocalSGDMethod):
    """DiLoCo (Douillard et al.): outer Nesterov on the mean pseudo-gradient of the whole model.

    After the optimizer step, blocking, one collective for the whole model, no penalty, no overlap:
    every rank waits for the full transfer before the next step can start. With error feedback every unit's
    candidate residual is kept before the sync's checkpoint moment (`OuterState.keep_residual`: used, unless
    non-finite).
    """

    name = "diloco"

    @torch.no_grad()
    def sync_between_steps(self, step: int) -> None:
        outer = self.outer
        assert outer is not None
        if self.survival is not None:
            self.survival.before_sync(step)  # the newest view, a replacement's state, the snapshot to roll back to
        R = self.trained_members()
        deltas = [outer.pseudo_gradient(u, th) for u, th in enumerate(self.engine.shards)]
        flat = pack(deltas, self.wire)  # torch.cat, each unit on a block boundary in the integer wire formats
        self.comm.compressed_all_reduce(flat, group="sync", kind="sync_reduce", unit=None)
        flat.div_(R)
        with self.log.span("outer_step", sync_step=step):  # event step: the step whose time it takes
            pieces = unpack(flat, [d.numel() for d in deltas], self.wire)
            for unit, (theta, piece) in enumerate(zip(self.engine.shards, pieces)):
                outer.step(unit, piece)
                outer.reset(unit, theta)
                if self.cfg.runtime.checksums:
                    self.log_checksums(unit)
        for unit in range(len(deltas)):  # no penalty: every Δ̂ is used (error feedback keeps no non-finite residual)
            outer.keep_residual(unit, used=True)
        self.sync_finished(step)
