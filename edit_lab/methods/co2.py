"""CO2 (Sun et al., ICLR 2024): local SGD whose outer all-reduce hides behind the next round.

Schedule as in `local_sgd`: W synchronous warm-up steps, anchors at step W, then rounds of τ local
steps. DiLoCo waits at every round boundary for the all-reduce of the pseudo-gradients; CO2 does not:
it issues the all-reduce of round k asynchronously and only waits for it at the *next* boundary, so
the transfer travels while round k+1 computes, and the average of round k moves the anchor one round
late. At the boundary that closes round k (k ≥ 1), on every rank:

    Δ_k    ← s − θ                            # this replica's progress in round k (s: where it began round k)
    issue  all_reduce_sum(Δ_k) over the sync group, async        # kind 'co2_reduce'; waited at boundary k+1
    wait   for round k−1's all-reduce; Δ̄_{k−1} ← sum / R          # nothing to wait for at k = 1
    a      ← outer Nesterov step on a with Δ̄_{k−1}                # stale by one round; a is the same everywhere
    θ      ← a − λ·Δ_k                        # staleness penalty λ = `staleness_penalty`
    s      ← θ

Why θ ← a − λ·Δ_k. The fresh anchor a still lacks round k, whose average is in flight. Restarting from
a alone (λ = 0) would drop this replica's own last round until the average lands a round later; keeping
it in full (λ = 1) builds the next round on a private, unaveraged step. λ in between penalises the
stale gap: the replica keeps a fraction λ of its own not-yet-averaged progress. That local part is only
a stand-in: at the next boundary θ is rebuilt from the anchor, which by then holds the *average* of
round k, so every local step enters the anchor exactly once (Δ is measured from s, not from a, for that
reason). With λ = 0 CO2 is DiLoCo with a one-round-late outer step.

The anchor (what is evaluated, `eval_shards`) is identical on every replica at every boundary; θ is
not when λ > 0. `finalize` waits for the last round in flight, then averages whatever was trained
since the last boundary with a blocking all-reduce (kind 'sync_reduce') and applies it at once, so the
run ends with θ = a everywhere.
"""

from __future__ import annotations

from typing import Any

import torch

from ..comm import Handle
from .local_sgd import LocalSGDMethod


class CO2Method(LocalSGDMethod):
    name = "co2"

    def __init__(self, cfg, engine) -> None:
        super().__init__(cfg, engine)
        self.round_start: list[torch.Tensor] = []  # s: this replica's θ when the current round began
        self.in_flight: tuple[Handle, torch.Tensor, int] | None = None  # (handle, Δ sum buffer, boundary step)
        self.stale_steps: list[int] = []  # boundary whose average was applied, per outer step (for the record)

    def create_anchors(self, step: int, record: bool = True) -> None:
        super().create_anchors(step, record)
        self.round_start = [p.detach().clone() for p in self.engine.shards]
        self.in_flight = None
        if self.cfg.checksums:
            for unit in range(self.engine.n_units):
                self.log_checksums(unit)

    # ------------------------------------------------------------ a round boundary
    @torch.no_grad()
    def sync_between_steps(self, step: int) -> None:
        outer = self.outer
        assert outer is not None
        shards = self.engine.shards
        deltas = [s - theta.detach() for s, theta in zip(self.round_start, shards)]
        flat = torch.cat(deltas)  # a fresh buffer: θ may change while it is in flight
        previous = self.in_flight
        self.in_flight = (self.comm.all_reduce(flat, group="sync", kind="co2_reduce", async_op=True), flat, step)
        applied = self.apply_average(previous)
        lam = self.cfg.staleness_penalty
        for unit, (theta, delta) in enumerate(zip(shards, deltas)):
            theta.copy_(outer.anchor(unit, theta.device) - lam * delta)
            self.round_start[unit].copy_(theta.detach())
            if self.cfg.checksums:
                self.log_checksums(unit)
        self.sync_finished(step, checkpoint=False, applied_round=applied)  # a round is still in flight

    @torch.no_grad()
    def apply_average(self, pending: tuple[Handle, torch.Tensor, int] | None) -> int | None:
        """Wait for an all-reduce issued at an earlier boundary and step the anchor with its mean.

        Returns the boundary step the average belongs to (None when there was nothing in flight).
        """
        if pending is None:
            return None
        handle, flat, issued_at = pending
        handle.wait()  # the overlapped wait: only what round k+1's compute did not hide shows up here
        flat.div_(self.mesh.replicas)
        self.outer_step(flat)
        self.stale_steps.append(issued_at)
        return issued_at

    def outer_step(self, flat: torch.Tensor) -> None:
        outer = self.outer
        assert outer is not None
        with self.log.span("outer_step"):
            for unit, piece in enumerate(flat.split([p.numel() for p in self.engine.shards])):
                outer.step(unit, piece)

    # ------------------------------------------------------------ the end
    @torch.no_grad()
    def finalize(self, step: int) -> None:
        """Land the round in flight, average the last partial round (blocking), end with θ = a everywhere."""
        outer = self.outer
        if outer is None:
            return
        pending, self.in_flight = self.in_flight, None
        self.apply_average(pending)
        if self.last_sync_step != step:  # steps trained since the last boundary
            flat = torch.cat([s - theta.detach() for s, theta in zip(self.round_start, self.engine.shards)])
            self.comm.all_reduce(flat, group="sync", kind="sync_reduce")
            flat.div_(self.mesh.replicas)
            self.outer_step(flat)
            self.last_sync_step = step
            self.n_syncs += 1
        for unit, theta in enumerate(self.engine.shards):
            outer.reset(unit, theta)
            self.round_start[unit].copy_(theta.detach())
            if self.cfg.checksums:
                self.log_checksums(unit)
        self.log.record("sync", step=step, final=True)

    # ------------------------------------------------------------ accounting
    def extra_state_numel(self) -> int:
        """Anchor and momentum, plus the round start s and the buffer in flight (CO2's price for the overlap)."""
        n = super().extra_state_numel() + sum(s.numel() for s in self.round_start)
        return n + (self.in_flight[1].numel() if self.in_flight is not None else 0)

    def state_dict(self) -> dict[str, Any]:
        """CO2 never reaches a moment where every replica holds the agreed model before the end (θ ≠ a
        while a round is in flight), so it offers no checkpoint moment; this is the bookkeeping only."""
        return {**super().state_dict(), "staleness_penalty": self.cfg.staleness_penalty}

    def summary(self) -> dict[str, Any]:
        return {"syncs": self.n_syncs, "staleness_penalty": self.cfg.staleness_penalty,
                "applied_rounds": self.stale_steps}
