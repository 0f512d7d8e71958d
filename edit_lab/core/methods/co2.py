"""CO2 (Sun et al., ICLR 2024): local SGD whose outer all-reduce hides behind the next round.

Schedule as in `local_sgd`: W synchronous warm-up steps, anchors at step W, then rounds of τ local
steps. DiLoCo waits at every round boundary for the all-reduce of the pseudo-gradients; CO2 does not:
it issues the all-reduce of round k asynchronously and only waits for it at the *next* boundary, so
the transfer travels while round k+1 computes, and round k's mean moves the anchor one round late.
At the boundary that closes round k (k ≥ 1), on every rank, for its shard of every unit:

    Δ_k    ← a − θ                  # this replica's round k, measured from the anchor the round began at
    issue  all_reduce_sum(Δ_k) over the sync group, async        # kind 'co2_reduce'; waited at boundary k+1
    wait   for round k−1's all-reduce; Δ̄_{k−1} ← sum / R          # nothing in flight yet at k = 1
    g      ← Δ̄_{k−1} − lr·b        # = a − x̄_{k−1}: round k−1's mean endpoint seen from the anchor as it is now
    b      ← μ·b + g / λ            # heavy-ball outer momentum (b starts at 0); λ: staleness-gap penalty
    b      ← clamp(b, −c, c)         # outer-momentum clipping, only when c > 0
    a      ← a − lr·b
    θ      ← a                       # every replica restarts from the updated anchor

This is the outer step of the authors' code (edit-method.md §9), b ← μ·b + (a − x)/λ with a the anchor
*at the step* and x the averaged parameters: heavy-ball, not Nesterov, with its defaults lr =
`co2_outer_lr` 1.0, μ = `co2_outer_momentum` 0.5, λ = `co2_staleness_penalty` 1.0 (no penalty) and
c = `co2_momentum_clip` 0 (no clipping). Round k−1 trained from the anchor before the last step, so its
mean endpoint is x̄_{k−1} = a_then − Δ̄_{k−1}, and a_now − a_then = −lr·b: hence g = Δ̄_{k−1} − lr·b, with
no parameters sent and nothing stored. λ > 1 shrinks the pull towards that stale endpoint. CO2 therefore
has its own outer optimizer, `CO2Outer`, separate from the `outer_*` settings (Nesterov 0.7 / 0.8) of
DiLoCo and EDiT. With lr 1, μ 0 and λ 1 CO2 is Post Local SGD one round late: the anchor becomes the
replicas' mean endpoint of the round before.

Why not Δ̄ alone (the lab's arithmetic until issue 23): round k+1 restarts from an anchor that lacks
round k and re-trains much of the same ground, so adding Δ̄_k to it one boundary later counts that
progress twice. On a direction where a round of τ steps removes a fraction ρ of the error that is the
delayed recurrence e' = e − lr·b, b' = μ·b + ρ·e₋ (e: the anchor's error now, e₋: that of the
anchor the landed round began at), whose roots have |z|² = μ + lr·ρ: above 1 at the
defaults once ρ > 0.5 (the validation loss of a 1×2 tiny run rose from step 48 on). With g the
recurrence is b' = μ·b + e − (1 − ρ)·e₋, stable for every ρ in (0, 1] at the defaults
(`tests/unit/test_co2.py` runs it on a quadratic).

θ = a, bit for bit the same on every replica, after every boundary. `finalize` measures the steps
trained since the last boundary (against the anchor they started from), lands the round in flight,
averages that last partial round with a blocking all-reduce (kind 'sync_reduce') and applies it at
once (by the same step, seen from the anchor the landing just moved), so the run ends with θ = a
everywhere and every round's mean used.

Time-only twin: `CO2Program` in `edit_lab/clock/sim/programs.py`,
the preview simulator's copy of this schedule: a change to *when* this method talks to the other replicas
changes it too (tests/distributed/test_sim_matches_virtual.py holds the two to the same timeline).
"""

from __future__ import annotations

from typing import Any

import torch

from edit_lab.core.comm import Handle
from edit_lab.core.methods.local_sgd import LocalSGDMethod
from edit_lab.core.outer import OuterState


class CO2Outer(OuterState):
    """Anchor shards and CO2's heavy-ball outer momentum, one pair per unit: a boundary's arithmetic.

    Why not OuterState's torch SGD: the gradient it needs, a − x̄ = Δ̄ − lr·b, depends on the buffer,
    and the authors' code means to clamp the buffer between its update and its use (the clamped buffer
    carrying over), neither of which `torch.optim.SGD` can do. (As written, their `_co2_clip` calls
    `torch.clamp` without keeping its result, so their clamp is a no-op; the lab's `co2_momentum_clip`
    defaults to 0, off.) Without the clamp and with λ = 1 this is
    exactly torch's heavy-ball SGD (momentum μ, dampening 0, no Nesterov) fed a − x̄ with the stale mean
    endpoint x̄; `tests/unit/test_co2.py` checks that, the clamp, and a three-boundary sequence by hand.
    Everything here is local to one rank's shard: the clamp is element-wise, so unlike EDiT's norm clip
    it needs no exchange over the shard group.
    """

    def __init__(self, shards: list[torch.Tensor], lr: float, momentum: float, penalty: float = 1.0,
                 clip: float = 0.0, cpu_offload: bool = False) -> None:
        if not (lr > 0 and 0 <= momentum < 1 and penalty > 0 and clip >= 0):
            raise ValueError(f"CO2Outer: lr={lr} > 0, momentum={momentum} in [0, 1), penalty={penalty} > 0 and "
                             f"clip={clip} >= 0 are required")
        self.offload = cpu_offload
        home = torch.device("cpu") if cpu_offload else shards[0].device
        self.anchors = [s.detach().clone().to(home) for s in shards]
        self.momenta = [torch.zeros_like(a) for a in self.anchors]
        self.lr, self.momentum, self.penalty, self.clip = float(lr), float(momentum), float(penalty), float(clip)
        self.wire, self.residuals = "none", None  # OuterState.set_wire's (compressed pseudo-gradients)
        self.owed: dict[int, torch.Tensor] = {}  # OuterState's undecided error-feedback residuals

    # ------------------------------------------------------------ one unit
    # region co2-outer-step
    @torch.no_grad()
    def step(self, unit: int, delta_bar: torch.Tensor) -> None:
        """g ← Δ̄ − lr·b; b ← μ·b + g/λ; b ← clamp(b, −c, c) when c > 0; a ← a − lr·b (unit `unit`, this shard).

        Δ̄ is a mean measured from the anchor *before the last step* (the anchor its round started at),
        i.e. the round's mean endpoint is x̄ = a_then − Δ̄. The authors' step compares the anchor as it is
        now with that endpoint: g = a_now − x̄ = Δ̄ + (a_now − a_then) = Δ̄ − lr·b, b being the step the
        anchor took since (0 before the first). Feeding Δ̄ itself adds round k's progress to an anchor
        that round k+1 has already re-trained from, counting it twice: unstable at lr 1 (module docstring).
        """
        a, b = self.anchors[unit], self.momenta[unit]
        g = delta_bar.to(a.device) - self.lr * b  # a_now − x̄: the stale endpoint seen from the current anchor
        b.mul_(self.momentum).add_(g, alpha=1.0 / self.penalty)
        if self.clip > 0:
            b.clamp_(-self.clip, self.clip)
        a.sub_(b, alpha=self.lr)
    # endregion co2-outer-step

    # ------------------------------------------------------------ the whole shard, as a boundary does it
    @torch.no_grad()
    def pseudo_gradients(self, shards: list[torch.Tensor]) -> torch.Tensor:
        """Δ = a − θ of every unit, in one fresh flat buffer (it travels while θ trains on); each unit on a block
        boundary in the integer wire formats (`wire.pack`)."""
        from edit_lab.core.wire import pack

        deltas = [self.pseudo_gradient(unit, theta) for unit, theta in enumerate(shards)]
        for unit in range(len(deltas)):  # no penalty: every Δ̂ is used (error feedback keeps no non-finite residual)
            self.keep_residual(unit, used=True)
        return pack(deltas, self.wire)

    @torch.no_grad()
    def apply(self, delta_bar: torch.Tensor) -> None:
        """One outer step of every unit with a mean pseudo-gradient laid out as `pseudo_gradients` makes it."""
        from edit_lab.core.wire import unpack

        for unit, piece in enumerate(unpack(delta_bar, [a.numel() for a in self.anchors], self.wire)):
            self.step(unit, piece)

    @torch.no_grad()
    def restart(self, shards: list[torch.Tensor]) -> None:
        """θ ← a for every unit."""
        for unit, theta in enumerate(shards):
            self.reset(unit, theta)

    # ------------------------------------------------------------ accounting and state
    def numel(self) -> int:
        return (sum(a.numel() for a in self.anchors) + sum(b.numel() for b in self.momenta)
                + sum(e.numel() for e in self.residuals or []))

    def settings(self) -> dict[str, float]:
        return {"lr": self.lr, "momentum": self.momentum, "staleness_penalty": self.penalty,
                "momentum_clip": self.clip}

    def state_dict(self) -> dict[str, Any]:
        return {"anchors": [a.detach().cpu().clone() for a in self.anchors],
                "momenta": [b.detach().cpu().clone() for b in self.momenta], "settings": self.settings()}

    def load_state_dict(self, state: dict[str, Any]) -> None:
        with torch.no_grad():
            for mine, saved in zip(self.anchors + self.momenta, state["anchors"] + state["momenta"]):
                mine.copy_(saved)


class CO2Method(LocalSGDMethod):
    name = "co2"  # not checkpointable (registry.py): the mean of the last round is always in flight

    def __init__(self, cfg, engine) -> None:
        super().__init__(cfg, engine)
        self.in_flight: tuple[Handle, torch.Tensor, int] | None = None  # (handle, Δ sum buffer, boundary step)
        self.stale_steps: list[int] = []  # boundary whose mean was applied, per outer step (for the record)

    @property
    def co2_outer(self) -> CO2Outer:
        assert isinstance(self.outer, CO2Outer), "CO2's anchors are created at step W"
        return self.outer

    def make_outer(self) -> CO2Outer:
        cfg = self.cfg
        return CO2Outer(self.engine.shards, cfg.outer.co2_lr, cfg.outer.co2_momentum, cfg.outer.co2_staleness_penalty,
                        cfg.outer.co2_momentum_clip, cfg.schedule.cpu_offload)

    def create_anchors(self, step: int, record: bool = True) -> None:
        super().create_anchors(step, record)
        self.in_flight = None
        self.log_all_checksums()

    def log_all_checksums(self) -> None:
        if self.cfg.runtime.checksums:
            for unit in range(self.engine.n_units):
                self.log_checksums(unit)

    # ------------------------------------------------------------ a round boundary
    # region co2-boundary
    @torch.no_grad()
    def sync_between_steps(self, step: int) -> None:
        outer, shards = self.co2_outer, self.engine.shards
        flat = outer.pseudo_gradients(shards)  # Δ_k, before the anchor moves: measured from where round k began
        previous = self.in_flight
        h = self.comm.compressed_all_reduce(flat, group="sync", kind="co2_reduce", async_op=True)
        self.in_flight = (h, flat, step)
        applied = self.land(previous)
        outer.restart(shards)
        self.log_all_checksums()
        self.sync_finished(step, checkpoint=False, applied_round=applied)  # a round's mean is still in flight

    @torch.no_grad()
    def land(self, pending: tuple[Handle, torch.Tensor, int] | None) -> int | None:
        """Wait for an all-reduce issued at an earlier boundary and step the anchor with its mean.

        Returns the boundary step the mean belongs to (None when there was nothing in flight).
        """
        if pending is None:
            return None
        handle, flat, issued_at = pending
        handle.wait()  # the overlapped wait: only what round k+1's compute did not hide shows up here
        self.outer_step(flat)
        self.stale_steps.append(issued_at)
        return issued_at

    def outer_step(self, delta_sum: torch.Tensor) -> None:
        """Step every unit's anchor with the mean of an all-reduced sum of pseudo-gradients (timed)."""
        delta_sum.div_(self.mesh.replicas)
        with self.log.span("outer_step"):
            self.co2_outer.apply(delta_sum)
    # endregion co2-boundary

    # ------------------------------------------------------------ the end
    @torch.no_grad()
    def finalize(self, step: int) -> None:
        """Land the round in flight, average the last partial round (blocking), end with θ = a everywhere."""
        if self.outer is None:
            return
        outer, shards = self.co2_outer, self.engine.shards
        # the steps since the last boundary, measured before the landing moves the anchor they started from
        # (`final_sync_needed`: the same decision on every replica, with a time budget too)
        partial = outer.pseudo_gradients(shards) if self.final_sync_needed(step) else None
        pending, self.in_flight = self.in_flight, None
        applied = self.land(pending)
        if partial is not None:
            self.comm.compressed_all_reduce(partial, group="sync", kind="sync_reduce")
            self.outer_step(partial)
        outer.restart(shards)
        self.log_all_checksums()
        if partial is not None:  # one more sync: the partial round's mean (and the landing before it)
            self.sync_finished(step, checkpoint=False, final=True, applied_round=applied)
        elif applied is not None:  # the run ended on a boundary, already recorded as a sync: only the landing
            self.log.record("co2_landing", step=step, final=True, applied_round=applied)

    # ------------------------------------------------------------ accounting
    def extra_state_numel(self) -> int:
        """Anchor and momentum, plus the Δ buffer in flight: CO2's price for the overlap.

        The buffer is counted whether or not one is in flight when asked: a rank holds one from the first
        boundary to the end, and the memory report is taken after the end, when the last one has landed.
        """
        if self.outer is None:
            return 0
        return self.outer.numel() + sum(a.numel() for a in self.outer.anchors)

    def summary(self) -> dict[str, Any]:
        return {"syncs": self.n_syncs, "applied_rounds": self.stale_steps,
                "outer": self.co2_outer.settings() if self.outer is not None else None}
