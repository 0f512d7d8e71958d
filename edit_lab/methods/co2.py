"""CO2 (Sun et al., ICLR 2024): local SGD whose outer all-reduce hides behind the next round.

Schedule as in `local_sgd`: W synchronous warm-up steps, anchors at step W, then rounds of τ local
steps. DiLoCo waits at every round boundary for the all-reduce of the pseudo-gradients; CO2 does not:
it issues the all-reduce of round k asynchronously and only waits for it at the *next* boundary, so
the transfer travels while round k+1 computes, and round k's mean moves the anchor one round late.
At the boundary that closes round k (k ≥ 1), on every rank, for its shard of every unit:

    Δ_k    ← a − θ                  # this replica's round k, measured from the anchor the round began at
    issue  all_reduce_sum(Δ_k) over the sync group, async        # kind 'co2_reduce'; waited at boundary k+1
    wait   for round k−1's all-reduce; Δ̄_{k−1} ← sum / R          # nothing in flight yet at k = 1
    b      ← μ·b + Δ̄_{k−1} / λ      # heavy-ball outer momentum (b starts at 0); λ: staleness-gap penalty
    b      ← clamp(b, −c, c)         # outer-momentum clipping, only when c > 0
    a      ← a − lr·b
    θ      ← a                       # every replica restarts from the updated anchor

This is the outer step of the authors' code (edit-method.md §9): heavy-ball, not Nesterov, with its
defaults lr = `co2_outer_lr` 1.0, μ = `co2_outer_momentum` 0.5, λ = `co2_staleness_penalty` 1.0 (no
penalty) and c = `co2_momentum_clip` 0 (no clipping). λ > 1 shrinks the stale update, which was
computed from an anchor one step older than the one it is applied to. CO2 therefore has its own outer
optimizer, `CO2Outer`, separate from the `outer_*` settings (Nesterov 0.7 / 0.8) of DiLoCo and EDiT.
Every local step enters the anchor exactly once: round k's Δ is measured from the anchor round k
started at, and round k+1 starts from an anchor that does not hold round k yet (that is the price of
the overlap). With lr 1, μ 0 and λ 1 CO2 is Post Local SGD one round late.

θ = a, bit for bit the same on every replica, after every boundary. `finalize` measures the steps
trained since the last boundary (against the anchor they started from), lands the round in flight,
averages that last partial round with a blocking all-reduce (kind 'sync_reduce') and applies it at
once, so the run ends with θ = a everywhere and every local step in the anchor.
"""

from __future__ import annotations

from typing import Any

import torch

from ..comm import Handle
from ..outer import OuterState
from .local_sgd import LocalSGDMethod


class CO2Outer(OuterState):
    """Anchor shards and CO2's heavy-ball outer momentum, one pair per unit: a boundary's arithmetic.

    Why not OuterState's torch SGD: the authors clamp the momentum buffer between its update and its
    use (and the clamped buffer is what carries over), which `torch.optim.SGD` cannot do. Without the
    clamp and with λ = 1 this is exactly torch's heavy-ball SGD (momentum μ, dampening 0, no Nesterov,
    the buffer starting at the first gradient, i.e. μ·0 + g); `tests/unit/test_co2.py` checks both,
    and a two-round sequence computed by hand. Everything here is local to one rank's shard: the
    clamp is element-wise, so unlike EDiT's norm clip it needs no exchange over the shard group.
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

    # ------------------------------------------------------------ one unit
    # region co2-outer-step
    @torch.no_grad()
    def step(self, unit: int, delta_bar: torch.Tensor) -> None:
        """b ← μ·b + Δ̄/λ; b ← clamp(b, −c, c) when c > 0; a ← a − lr·b (unit `unit`, this rank's shard)."""
        a, b = self.anchors[unit], self.momenta[unit]
        b.mul_(self.momentum).add_(delta_bar.to(a.device), alpha=1.0 / self.penalty)
        if self.clip > 0:
            b.clamp_(-self.clip, self.clip)
        a.sub_(b, alpha=self.lr)
    # endregion co2-outer-step

    # ------------------------------------------------------------ the whole shard, as a boundary does it
    @torch.no_grad()
    def pseudo_gradients(self, shards: list[torch.Tensor]) -> torch.Tensor:
        """Δ = a − θ of every unit, in one fresh flat buffer (it travels while θ trains on)."""
        return torch.cat([self.pseudo_gradient(unit, theta) for unit, theta in enumerate(shards)])

    @torch.no_grad()
    def apply(self, delta_bar: torch.Tensor) -> None:
        """One outer step of every unit with a mean pseudo-gradient laid out as `pseudo_gradients` makes it."""
        for unit, piece in enumerate(delta_bar.split([a.numel() for a in self.anchors])):
            self.step(unit, piece)

    @torch.no_grad()
    def restart(self, shards: list[torch.Tensor]) -> None:
        """θ ← a for every unit."""
        for unit, theta in enumerate(shards):
            self.reset(unit, theta)

    # ------------------------------------------------------------ accounting and state
    def numel(self) -> int:
        return sum(a.numel() for a in self.anchors) + sum(b.numel() for b in self.momenta)

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
        return CO2Outer(self.engine.shards, cfg.co2_outer_lr, cfg.co2_outer_momentum, cfg.co2_staleness_penalty,
                        cfg.co2_momentum_clip, cfg.cpu_offload)

    def create_anchors(self, step: int, record: bool = True) -> None:
        super().create_anchors(step, record)
        self.in_flight = None
        self.log_all_checksums()

    def log_all_checksums(self) -> None:
        if self.cfg.checksums:
            for unit in range(self.engine.n_units):
                self.log_checksums(unit)

    # ------------------------------------------------------------ a round boundary
    # region co2-boundary
    @torch.no_grad()
    def sync_between_steps(self, step: int) -> None:
        outer, shards = self.co2_outer, self.engine.shards
        flat = outer.pseudo_gradients(shards)  # Δ_k, before the anchor moves: measured from where round k began
        previous = self.in_flight
        self.in_flight = (self.comm.all_reduce(flat, group="sync", kind="co2_reduce", async_op=True), flat, step)
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
        self.land(pending)
        if partial is not None:
            self.comm.all_reduce(partial, group="sync", kind="sync_reduce")
            self.outer_step(partial)
            self.last_sync_step = step
            self.n_syncs += 1
        outer.restart(shards)
        self.log_all_checksums()
        self.log.record("sync", step=step, final=True)

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
