"""Streaming DiLoCo (Douillard et al., 2025, "Streaming DiLoCo with overlapping communication").

DiLoCo syncs the whole model at once: every H steps one burst of traffic the size of the model, and every
rank waits for it. Streaming DiLoCo answers the same problem as EDiT's layer-wise sync differently:

- **fragments**: the model is cut into P fragments (here: runs of consecutive sync units, `schedule.fragment_units`),
  each with its own anchor and its own outer Nesterov optimizer (the lab's `OuterState`, stepped per unit);
- **staggered**: fragment p syncs every H steps, offset by p·H/P (`protocol.fragment_landing`): one fragment's
  transfer every H/P steps, so the peak bandwidth per step is about 1/P of DiLoCo's. A reader's schedule
  (`RunConfig.rules.fragment_schedule`, notebook 09's exercise, edit_lab.rules) replaces `fragment_landing` on
  every rank: a pure function of the step and the config, so every rank sends and lands the same fragment;
- **overlap**: the pseudo-gradient Δ_p = a_p − θ_p leaves `fragment_sync_delay` (τ) inner steps before its outer
  step lands, and travels while those steps compute;
- **mixing**: when it lands, the new anchor a_p and the τ steps the replica trained meanwhile are merged,
  θ_p ← (1 − α)·a_p + α·θ_p (α = `fragment_update_alpha`; torch's `lerp`).

The order is torchft's `DiLoCo` (fragments, fragment_sync_delay, fragment_update_alpha), which the oracle
test compares with (edit_oracles/torchft_diloco.py): Δ is measured τ steps before the outer step, the outer
step moves the anchor, then the mix. With P = 1, τ = 0 and α = 0 this is exactly `diloco`. Where the lab
differs from torchft: fragments are whole sync units (torchft takes any list of modules), the anchors are
created after W synchronous warm-up steps (torchft has none: W = 0 matches it), and the run ends with a
closing sync of every fragment that trained since its last one (torchft stops where the loop stops): a
fragment still travelling at the end lands instead, and is not synced again (one outer step per fragment).

Time budgets: the budget meeting is held where a fragment leaves (every replica's sync points are the same
steps); a replica whose budget runs out while a fragment travels trains on to its landing (at most τ steps),
so that every replica lands it. Checkpoints are taken at each landing (nothing is in flight then: the next
fragment leaves at the landing or after it, since τ < H/P, or a reader's landings are at least τ apart); θ differs from the anchor there (the mix, the other fragments' local steps) and is saved as it is.


Time-only twin: `StreamingDiLoCoProgram` in `edit_lab/clock/sim/programs.py`,
the preview simulator's copy of this schedule: a change to *when* this method talks to the other replicas
changes it too (tests/distributed/test_sim_matches_virtual.py holds the two to the same timeline).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import torch

from edit_lab.core.comm import Handle
from edit_lab.core.methods.local_sgd import LocalSGDMethod
from edit_lab.core.wire import pack, unpack
from edit_lab.rules import RuleError
from edit_lab.protocol import fragment_units


@dataclass
class InFlight:
    """A fragment whose pseudo-gradient travels: its all-reduce, buffer, and when it left and lands."""

    fragment: int
    handle: Handle
    flat: torch.Tensor
    sizes: list[int]
    sent_at: int
    land_at: int


class StreamingDiLoCoMethod(LocalSGDMethod):
    name = "streaming_diloco"

    def __init__(self, cfg, engine) -> None:
        super().__init__(cfg, engine)
        self.fragments = fragment_units(engine.n_units, cfg.streaming.fragments)
        self.delay = cfg.streaming.fragment_sync_delay
        self.landing = self.rules.fragment_landing  # the library's, or the reader's rule
        self.alpha = float(cfg.streaming.fragment_update_alpha)
        self.in_flight: InFlight | None = None
        self.fragment_last: list[int] = [cfg.schedule.warmup_steps] * cfg.streaming.fragments  # each fragment's last landing

    def create_anchors(self, step: int, record: bool = True) -> None:
        super().create_anchors(step, record)
        self.fragment_last = [step] * len(self.fragments)
        self.in_flight = None

    # ------------------------------------------------------------ schedule
    def leaving(self, step: int) -> int | None:
        """The fragment whose pseudo-gradient leaves at the start of `step`: the one the schedule lands τ steps
        later (`fragment_landing`, or the reader's rule, asked the same question on every rank)."""
        cfg = self.cfg
        return self.landing(step + self.delay, cfg.schedule.warmup_steps, cfg.schedule.sync_interval, cfg.streaming.fragments)

    def after_optimizer(self, step: int) -> None:
        """Between steps, as DiLoCo: land the fragment due at the start of step+1, then send the next one."""
        if self.outer is None:
            return
        n = step + 1
        if self.in_flight is not None and self.in_flight.land_at == n:
            self.land(n)
        f = self.leaving(n)
        if f is not None and self.go_on(n):
            self.send(f, n)
            if self.delay == 0:
                self.land(n)

    def stop_here(self, step: int, spent: bool) -> bool:
        """A replica with a fragment in flight trains on to its landing: every replica lands it."""
        if self.in_flight is not None:
            return False
        return super().stop_here(step, spent)

    # region streaming-fragment
    @torch.no_grad()
    def send(self, fragment: int, step: int) -> None:
        """Δ_p = a_p − θ_p of the fragment's units, all-reduced over the sync group in one async collective."""
        outer = self.outer
        assert outer is not None
        if self.in_flight is not None:  # only a reader's schedule can (validation refuses it before launch)
            fl = self.in_flight
            raise RuleError(f"fragment {fragment} would leave at step {step} while fragment {fl.fragment} travels "
                            f"(it lands at {fl.land_at}): one fragment is in flight at a time")
        units = self.fragments[fragment]
        deltas = [outer.pseudo_gradient(u, self.engine.shards[u]) for u in units]
        flat = pack(deltas, self.wire)
        h = self.comm.compressed_all_reduce(flat, group="sync", kind="sync_reduce", unit=None, async_op=True)
        self.in_flight = InFlight(fragment, h, flat, [d.numel() for d in deltas], step, step + self.delay)
        self.log.record("fragment_sent", step=step, fragment=fragment, units=units, lands_at=step + self.delay)

    @torch.no_grad()
    def land(self, step: int, checkpoint: bool = True) -> int:
        """Wait for the fragment in flight, step its anchors with the mean Δ, mix θ_p ← (1 − α)·a_p + α·θ_p."""
        outer, fl = self.outer, self.in_flight
        assert outer is not None and fl is not None
        self.in_flight = None
        fl.handle.wait()
        fl.flat.div_(self.mesh.replicas)
        units = self.fragments[fl.fragment]
        for u, piece in zip(units, unpack(fl.flat, fl.sizes, self.wire)):
            theta = self.engine.shards[u]
            with self.log.span("outer_step", unit=u, fragment=fl.fragment):
                outer.step(u, piece)
                if self.alpha == 0.0:
                    outer.reset(u, theta)
                else:
                    theta.copy_(outer.anchor(u, theta.device).lerp(theta, self.alpha))
            if self.cfg.runtime.checksums:
                self.log_checksums(u)
        for u in units:  # no penalty: every Δ̂ is used (error feedback keeps no non-finite residual)
            outer.keep_residual(u, used=True)
        self.fragment_last[fl.fragment] = step
        self.sync_finished(step, checkpoint=checkpoint, fragment=fl.fragment, sent_at=fl.sent_at)
        return fl.fragment
    # endregion streaming-fragment

    # ------------------------------------------------------------ the end
    @torch.no_grad()
    def finalize(self, step: int) -> None:
        """Land what travels, then one blocking sync of every fragment that trained since its last landing;
        every replica ends holding the anchors (θ ← a everywhere).

        Each fragment gets at most one outer step here. A fragment still in flight lands now (τ steps after it
        left, or sooner when the loop ended first), and that landing is its outer step, so the closing sync
        leaves it out: a second step would move its anchor by Δ' = α·(a − θ) plus momentum (lr·μ²·b at
        α = 0). With α > 0 its θ then differs between the replicas (the mix keeps α of each one's deviation);
        θ ← a below ends every replica on its anchor, as for a fragment that landed at the loop's last step."""
        if self.outer is None:
            return
        landed = self.land(step, checkpoint=False) if self.in_flight is not None else None
        assert self.last_sync_step is not None
        trained = self.final_sync_needed(step)  # a budget run's meetings; else: steps since the last landing
        last = self.last_sync_step
        need = [f for f in range(len(self.fragments))
                if f != landed and (trained or self.fragment_last[f] < last)]
        outer = self.outer
        if need:
            units = [u for f in need for u in self.fragments[f]]
            deltas = [outer.pseudo_gradient(u, self.engine.shards[u]) for u in units]
            flat = pack(deltas, self.wire)
            self.comm.compressed_all_reduce(flat, group="sync", kind="sync_reduce", unit=None)
            flat.div_(self.mesh.replicas)
            for u, piece in zip(units, unpack(flat, [d.numel() for d in deltas], self.wire)):
                with self.log.span("outer_step", unit=u, final=True):
                    outer.step(u, piece)
                outer.keep_residual(u, used=True)
        for u, theta in enumerate(self.engine.shards):
            outer.reset(u, theta)
            if need and self.cfg.runtime.checksums:
                self.log_checksums(u)
        if need:
            for f in need:
                self.fragment_last[f] = step
            self.sync_finished(step, checkpoint=False, final=True, fragments=need)

    # ------------------------------------------------------------ state
    def extra_state_numel(self) -> int:
        """Anchors, momenta (and error feedback's residuals); a fragment's Δ buffer while it travels."""
        extra = 0 if self.in_flight is None else self.in_flight.flat.numel()
        return super().extra_state_numel() + extra

    def state_dict(self) -> dict[str, Any]:
        assert self.in_flight is None, "checkpoints are taken at a landing, when nothing travels"
        return {**super().state_dict(), "fragment_last": list(self.fragment_last)}

    def load_state_dict(self, state: dict[str, Any]) -> None:
        super().load_state_dict(state)
        self.fragment_last = list(state.get("fragment_last", self.fragment_last))

    def summary(self) -> dict[str, Any]:
        return {"syncs": self.n_syncs, "fragments": self.fragments, "fragment_sync_delay": self.delay,
                "fragment_update_alpha": self.alpha}
