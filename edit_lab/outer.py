"""The anchor and the outer optimizer, kept per unit on this rank's shard.

The anchor `a` is the model every replica agreed on at the last sync; the pseudo-gradient of a
replica is Δ = a − θ (old minus new, so it points "downhill" like a gradient). The outer optimizer
is a plain `torch.optim.SGD` (Nesterov momentum by default) whose parameters *are* the anchor
shards: feeding it the aggregated pseudo-gradient as `.grad` moves the anchor. With lr 1 and
momentum 0 the new anchor is exactly the average of the replicas (periodic model averaging).

Each rank holds only its shard of the anchor and of the momentum: 2·P/S values, against 2·P for an
unsharded DiLoCo. With `cpu_offload` they live on the CPU between syncs, freeing accelerator memory.
"""

from __future__ import annotations

import copy
from typing import Any

import torch
import torch.nn as nn


class OuterState:
    """Anchor shards + outer optimizer (one parameter per unit, so units can be stepped one at a time)."""

    def __init__(self, shards: list[torch.Tensor], lr: float, momentum: float, nesterov: bool,
                 cpu_offload: bool = False) -> None:
        self.offload = cpu_offload
        home = torch.device("cpu") if cpu_offload else shards[0].device
        self.anchors = [nn.Parameter(s.detach().clone().to(home)) for s in shards]
        # fused: one pass over the shard instead of four (the outer step is on the critical path of every
        # unit's sync, and on a CPU it costs about as much as the transfer it follows)
        self.optimizer = torch.optim.SGD(self.anchors, lr=lr, momentum=momentum, nesterov=nesterov and momentum > 0,
                                         fused=True)

    def anchor(self, unit: int, device: torch.device) -> torch.Tensor:
        return self.anchors[unit].detach().to(device)

    # region outer-step
    def pseudo_gradient(self, unit: int, theta: torch.Tensor) -> torch.Tensor:
        """Δ = a − θ for this rank's shard of `unit`."""
        return self.anchor(unit, theta.device) - theta.detach()

    @torch.no_grad()
    def step(self, unit: int, delta_bar: torch.Tensor) -> None:
        """One outer optimizer step on unit `unit`'s anchor shard with the aggregated pseudo-gradient."""
        a = self.anchors[unit]
        a.grad = delta_bar.to(a.device)
        # Only this unit has a gradient, so SGD leaves the other units (and their momentum) untouched.
        self.optimizer.step()
        a.grad = None

    @torch.no_grad()
    def reset(self, unit: int, theta: torch.Tensor) -> None:
        """θ ← a: every replica restarts local training from the new anchor."""
        theta.copy_(self.anchors[unit].detach().to(theta.device))
    # endregion outer-step

    def numel(self) -> int:
        """Values held: anchor shards plus whatever momentum buffers exist."""
        n = sum(a.numel() for a in self.anchors)
        for st in self.optimizer.state.values():
            buf = st.get("momentum_buffer")
            if buf is not None:
                n += buf.numel()
        return n

    def state_dict(self) -> dict[str, Any]:
        # deepcopy: the optimizer's state_dict shares its momentum tensors with the live optimizer
        return {"anchors": [a.detach().cpu().clone() for a in self.anchors],
                "optimizer": copy.deepcopy(self.optimizer.state_dict())}

    def load_state_dict(self, state: dict[str, Any]) -> None:
        with torch.no_grad():
            for a, v in zip(self.anchors, state["anchors"]):
                a.copy_(v)
        self.optimizer.load_state_dict(state["optimizer"])
