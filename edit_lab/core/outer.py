"""The anchor and the outer optimizer, kept per unit on this rank's shard.

The anchor `a` is the model every replica agreed on at the last sync; the pseudo-gradient of a
replica is Δ = a − θ (old minus new, so it points "downhill" like a gradient). The outer optimizer
is a plain `torch.optim.SGD` (Nesterov momentum by default) whose parameters *are* the anchor
shards: feeding it the aggregated pseudo-gradient as `.grad` moves the anchor. With lr 1 and
momentum 0 the new anchor is exactly the average of the replicas (periodic model averaging).

Each rank holds only its shard of the anchor and of the momentum: 2·P/S values, against 2·P for an
unsharded DiLoCo. With `cpu_offload` they live on the CPU between syncs, freeing accelerator memory.

A reader's outer step (`RunConfig.rules.outer_step`, `edit_lab.rules.outer_step`, notebook 02's exercise)
replaces torch's step: `fn(anchor, delta_bar, buf, lr, momentum) -> (new_anchor, new_buf)` on this rank's
shard of the unit, with the optimizer's lr and momentum. Its buffer lives where torch keeps its own (the
optimizer's `momentum_buffer`, zeros before the first step), so checkpoints, `numel` and a resume are
unchanged, and a rule's checkpoint resumes under the library's step and back.

Compressed pseudo-gradients (`RunConfig.wire.format`, edit_lab/core/wire.py): `pseudo_gradient` returns what the
other replicas will receive, Δ̂ = decode(encode(Δ + e)), so that every method judges, weighs, clips and
averages the decompressed pseudo-gradient; with error feedback the residual e ← (Δ + e) − Δ̂ is kept per unit
on this rank's shard (and checkpointed, and counted by `numel`), added to the next sync's Δ.

Error feedback keeps only what was sent and used, in two phases. `pseudo_gradient` computes Δ̂ and the *candidate*
residual (Δ + e) − Δ̂, and holds the residual from before this sync beside it (one more residual per undecided unit,
for the length of a sync; `numel` counts the kept ones); once the method knows what became of the unit's Δ̂ it calls
`keep_residual(unit, used)`. Used (the replica's weight is not 0, the unit's outer step is taken, its G is finite;
every sync of a method without a penalty), the candidate is kept: the rounding error of a Δ̂ that moved the anchor
is owed to a later sync. Not used (flagged, or excluded with k = 0, or the unit's step skipped, or a non-finite G),
the residual goes back to what it was before this sync: this Δ never reached the anchor, so its rounding error is
owed to nobody, while the earlier error is still owed (it was computed from Δs that were used). Restoring rather
than zeroing keeps that debt: zeroing would drop it, and the identity Σ sent + e = Σ Δ over the used syncs would no
longer hold. Keeping the candidate instead lets one rejected Δ come back through e: a rejected ×100 spike left a
residual many times the next healthy Δ (leaking into the anchor, or keeping the replica out), and an inf in Δ
decoded to NaN over its 256-value block, so e turned NaN and that replica was flagged at every later sync. For the
same reason a non-finite candidate is never kept, used or not. A method that calls `pseudo_gradient` again before
deciding keeps the candidate as used (the non-finite rule aside); a checkpoint refuses undecided candidates
(`state_dict`), so each method decides every unit before its checkpoint moment.

The natural Nesterov formula, b ← μ·b + Δ̄; a ← a − lr·(Δ̄ + μ·b), rounds differently from torch's fused kernel,
about one float32 ulp per step (3e-8 on a nano run's losses). Written as `b = buf.mul(momentum).add(delta_bar)`,
`a.add(delta_bar.add(b, alpha=momentum), alpha=-lr)` it matches the kernel's vectorised loop bit for bit (a nano
run's losses come out identical on an x86 CPU); the kernel's scalar tail (the last values of a shard whose length is
no multiple of the vector width) uses fused multiply-adds, an ulp away again.
"""

from __future__ import annotations

import copy
from collections.abc import Callable
from typing import Any

import torch
import torch.nn as nn

from edit_lab.rules.rules import is_builtin, torch_sgd


class OuterState:
    """Anchor shards + outer optimizer (one parameter per unit, so units can be stepped one at a time)."""

    def __init__(self, shards: list[torch.Tensor], lr: float, momentum: float, nesterov: bool,
                 cpu_offload: bool = False, outer_step: Callable = torch_sgd(True)) -> None:
        self.offload = cpu_offload
        home = torch.device("cpu") if cpu_offload else shards[0].device
        self.anchors = [nn.Parameter(s.detach().clone().to(home)) for s in shards]
        # fused: one pass over the shard instead of four (the outer step is on the critical path of every
        # unit's sync, and on a CPU it costs about as much as the transfer it follows)
        self.optimizer = torch.optim.SGD(self.anchors, lr=lr, momentum=momentum, nesterov=nesterov and momentum > 0,
                                         fused=True)
        # `Rules.outer_step`: the library's (marked builtin: torch's fused SGD above), or a reader's step
        self.rule = outer_step
        self.step_shard = self.torch_step if is_builtin(outer_step) else self.rule_step
        self.wire = "none"
        self.decay = 1.0  # error feedback's decay β of the residual before it joins Δ (sparseloco's; 1 otherwise)
        self.residuals: list[torch.Tensor] | None = None  # error feedback's e per unit (None: no feedback)
        # units whose residual holds an undecided candidate: the residual from before that sync (`keep_residual`)
        self.owed: dict[int, torch.Tensor] = {}

    def set_wire(self, fmt: str, error_feedback: bool) -> None:
        """Send pseudo-gradients in wire format `fmt` (edit_lab.core.wire), with error feedback or without; in
        sparseloco with its decay β (`wire.sparse(fmt).beta`)."""
        from edit_lab.core.wire import sparse

        sp = sparse(fmt)
        self.decay = sp.beta if sp is not None else 1.0
        self.wire = fmt
        self.residuals = ([torch.zeros_like(a.detach()) for a in self.anchors]
                          if error_feedback and fmt != "none" else None)
        self.owed = {}

    def anchor(self, unit: int, device: torch.device) -> torch.Tensor:
        return self.anchors[unit].detach().to(device)

    # region outer-step
    @torch.no_grad()
    def pseudo_gradient(self, unit: int, theta: torch.Tensor) -> torch.Tensor:
        """Δ = a − θ for this rank's shard of `unit`; in a wire format, what the others receive of it (Δ̂).

        With error feedback this is phase one: Δ̂ = decode(encode(Δ + e)), and the candidate residual
        (Δ + e) − Δ̂ (in sparseloco Δ + β·e, SparseLoCo's decayed accumulator, in place of Δ + e) becomes
        `residuals[unit]`, the residual from before held in `owed` until the method calls
        `keep_residual(unit, used)` (module docstring). A candidate still undecided from an earlier call is kept as
        used first (unless non-finite)."""
        delta = self.anchor(unit, theta.device) - theta.detach()
        if self.wire == "none":
            return delta
        from edit_lab.core.wire import roundtrip

        if self.residuals is None:
            return roundtrip(delta, self.wire)
        if unit in self.owed:
            self.keep_residual(unit, used=True)
        e = self.residuals[unit]
        decay = getattr(self, "decay", 1.0)
        # SparseLoCo's accumulator e ← β·e + Δ (β = 1: the plain error feedback of the other formats)
        x = delta + (e.to(delta.device) if decay == 1.0 else decay * e.to(delta.device))
        sent = roundtrip(x, self.wire)
        # a fresh tensor, not e.copy_: the residual before this sync stays intact until the decision
        self.owed[unit] = e
        self.residuals[unit] = (x - sent).to(e.device)
        return sent

    @torch.no_grad()
    def keep_residual(self, unit: int, used: bool) -> bool:
        """Phase two of error feedback: commit or roll back the candidate residual of `unit`'s last
        `pseudo_gradient`.

        `used`: this replica's Δ̂ of the unit was sent with a weight other than 0, its G is finite and the unit's
        outer step was taken (a method without a penalty: always). The candidate is kept when used and finite;
        otherwise the residual goes back to what it was before the sync (module docstring: this Δ never reached
        the anchor, the earlier error is still owed, and a non-finite residual would poison every later Δ̂ of
        its block). Returns whether the candidate was kept; nothing happens (True) when nothing is undecided
        (no error feedback, or decided already)."""
        before = self.owed.pop(unit, None)
        if before is None:
            return True
        assert self.residuals is not None
        if used and bool(torch.isfinite(self.residuals[unit]).all()):
            return True
        self.residuals[unit] = before
        return False

    @torch.no_grad()
    def step(self, unit: int, delta_bar: torch.Tensor) -> None:
        """One outer optimizer step on unit `unit`'s anchor shard with the aggregated pseudo-gradient."""
        a = self.anchors[unit]
        self.step_shard(a, delta_bar.to(a.device))

    @torch.no_grad()
    def torch_step(self, a: nn.Parameter, delta_bar: torch.Tensor) -> None:
        """torch's fused SGD on one anchor shard. Only this unit has a gradient, so SGD leaves the other units
        (and their momentum) untouched."""
        a.grad = delta_bar
        self.optimizer.step()
        a.grad = None

    @torch.no_grad()
    def rule_step(self, a: nn.Parameter, delta_bar: torch.Tensor) -> None:
        """The reader's step on one anchor shard: its answer becomes the anchor and the momentum buffer."""
        state = self.optimizer.state[a]
        buf = state.get("momentum_buffer")
        group = self.optimizer.param_groups[0]
        new_anchor, new_buf = self.rule(a.detach(), delta_bar, torch.zeros_like(a) if buf is None else buf,
                                        group["lr"], group["momentum"])
        a.copy_(new_anchor)
        state["momentum_buffer"] = new_buf.contiguous()

    @torch.no_grad()
    def reset(self, unit: int, theta: torch.Tensor) -> None:
        """θ ← a: every replica restarts local training from the new anchor."""
        theta.copy_(self.anchors[unit].detach().to(theta.device))
    # endregion outer-step

    def numel(self) -> int:
        """Values held: anchor shards plus whatever momentum buffers exist."""
        n = sum(a.numel() for a in self.anchors) + sum(e.numel() for e in self.residuals or [])
        for st in self.optimizer.state.values():
            buf = st.get("momentum_buffer")
            if buf is not None:
                n += buf.numel()
        return n

    def state_dict(self) -> dict[str, Any]:
        # a checkpoint between the two phases of error feedback would save a residual whose fate is not known
        assert not self.owed, (f"units {sorted(self.owed)} hold an undecided error-feedback residual: "
                               "keep_residual must be called before a checkpoint")
        # deepcopy: the optimizer's state_dict shares its momentum tensors with the live optimizer
        out = {"anchors": [a.detach().cpu().clone() for a in self.anchors],
               "optimizer": copy.deepcopy(self.optimizer.state_dict())}
        if self.residuals is not None:
            out["residuals"] = [e.detach().cpu().clone() for e in self.residuals]
        return out

    def load_state_dict(self, state: dict[str, Any]) -> None:
        self.owed = {}
        with torch.no_grad():
            for a, v in zip(self.anchors, state["anchors"]):
                a.copy_(v)
            if self.residuals is not None and state.get("residuals") is not None:
                for e, v in zip(self.residuals, state["residuals"]):
                    e.copy_(v)
        self.optimizer.load_state_dict(state["optimizer"])
