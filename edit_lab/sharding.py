"""ZeRO-3 inside a replica, written out on raw collectives so every step is visible.

Each sync unit (the root unit, then one per transformer block) is flattened into one buffer padded
to a multiple of S; rank s of the shard group keeps slice s of it as its only trainable parameter
(its *shard*). The forward all-gathers a unit right before computing it, the backward
reduce-scatters the unit's gradient (the mean over the shard group) back to the shards.

Why not FSDP2: EDiT's sync must slot in *right before each unit's all-gather*, prefetch must overlap
the next unit's sync with this unit's compute, and every collective must be timed and delayable.
Writing the sharding ourselves makes all three a one-line hook (`pre_unit`); FSDP2 is kept as the
independent reference that the tests compare against.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any, Protocol

import torch
import torch.nn as nn
from torch.func import functional_call

from .comm import Comm, Handle
from .events import EventLog
from .model import Llama, loss_fn
from .norms import squared_norm


@dataclass(frozen=True)
class UnitLayout:
    """Where each parameter of one unit lives inside its flat buffer."""

    names: tuple[str, ...]
    shapes: tuple[torch.Size, ...]
    offsets: tuple[int, ...]
    numel: int  # real values
    padded: int  # numel rounded up to a multiple of S
    shard_size: int  # padded / S

    @classmethod
    def of(cls, module: nn.Module, shards: int) -> "UnitLayout":
        names, shapes, offsets, off = [], [], [], 0
        for name, p in module.named_parameters():
            names.append(name)
            shapes.append(p.shape)
            offsets.append(off)
            off += p.numel()
        padded = math.ceil(off / shards) * shards
        return cls(tuple(names), tuple(shapes), tuple(offsets), off, padded, padded // shards)

    def flatten(self, module: nn.Module) -> torch.Tensor:
        params = dict(module.named_parameters())
        flat = torch.zeros(self.padded, dtype=torch.float32)
        for name, off in zip(self.names, self.offsets):
            p = params[name].detach()
            flat[off:off + p.numel()] = p.reshape(-1)
        return flat

    def views(self, flat: torch.Tensor) -> dict[str, torch.Tensor]:
        return {n: flat[o:o + s.numel()].view(s) for n, s, o in zip(self.names, self.shapes, self.offsets)}


class UnitHooks(Protocol):
    def pre_unit(self, unit: int) -> None: ...


class _GatherUnit(torch.autograd.Function):
    """Forward: all-gather a unit's shards. Backward: reduce-scatter its gradient (asynchronously).

    The backward returns no gradient to autograd: the reduce-scatter is still in flight when it
    returns, and `ShardedModel.finish_backward` writes each shard's `.grad` once it lands, which
    lets the reduce-scatter of unit l overlap the backward compute of unit l-1.
    """

    @staticmethod
    def forward(ctx, shard: torch.Tensor, engine: "ShardedModel", unit: int) -> torch.Tensor:  # type: ignore[override]
        ctx.engine, ctx.unit = engine, unit
        return engine.gather(unit, shard)

    @staticmethod
    def backward(ctx, grad_full: torch.Tensor):  # type: ignore[override]
        ctx.engine._reduce_scatter_grad(ctx.unit, grad_full)
        return None, None, None


class ShardedModel:
    """A Llama whose parameters exist only as shards, one per unit, on this rank."""

    def __init__(self, model: Llama, comm: Comm, device: torch.device | str = "cpu", bf16: bool = False) -> None:
        self.comm = comm
        self.bf16 = bf16  # autocast the compute to bfloat16; shards, gradients and collectives stay float32
        self.log: EventLog = comm.log
        self.S = comm.mesh.shards
        self.s = comm.mesh.shard
        self.device = torch.device(device)
        self.units_modules = model.units()
        self.n_units = len(self.units_modules)
        self.layouts = [UnitLayout.of(u, self.S) for u in self.units_modules]
        self.shards: list[nn.Parameter] = []
        for lay, mod in zip(self.layouts, self.units_modules):
            flat = lay.flatten(mod)
            piece = flat[self.s * lay.shard_size:(self.s + 1) * lay.shard_size].clone().to(self.device)
            self.shards.append(nn.Parameter(piece))
        # The module keeps only the *structure* (for functional_call); its real values live in the shards.
        model.to("meta")
        self.model = model
        self.size = model.size
        self._rs_pending: list[tuple[int, Handle, torch.Tensor]] = []
        self._bwd_marks: list[tuple[str, Any]] = []

    # ------------------------------------------------------------------ facts
    def shard_numel(self) -> int:
        return sum(p.numel() for p in self.shards)

    def full_numel(self) -> int:
        return sum(lay.numel for lay in self.layouts)

    def unit_names(self) -> list[str]:
        return ["root"] + [f"block{i}" for i in range(self.n_units - 1)]

    # ------------------------------------------------------------------ collectives on units
    def gather(self, unit: int, shard: torch.Tensor) -> torch.Tensor:
        lay = self.layouts[unit]
        full = torch.empty(lay.padded, dtype=shard.dtype, device=shard.device)
        self.comm.all_gather(full, shard.detach(), group="shard", kind="all_gather", unit=unit)
        return full

    def _reduce_scatter_grad(self, unit: int, grad_full: torch.Tensor) -> None:
        out = torch.empty(self.layouts[unit].shard_size, dtype=grad_full.dtype, device=grad_full.device)
        h = self.comm.reduce_scatter(out, grad_full.contiguous(), group="shard", kind="reduce_scatter",
                                     unit=unit, async_op=True)
        self._rs_pending.append((unit, h, out))

    def _gathered(self, unit: int, shard: torch.Tensor, grad: bool) -> dict[str, torch.Tensor]:
        full = _GatherUnit.apply(shard, self, unit) if grad else self.gather(unit, shard)
        return self.layouts[unit].views(full)

    # ------------------------------------------------------------------ forward / backward
    def forward(self, tokens: torch.Tensor, targets: torch.Tensor, shards: list[torch.Tensor] | None = None,
                hooks: UnitHooks | None = None, grad: bool = True) -> torch.Tensor:
        """Mean cross-entropy of this rank's micro-batch, computing the model unit by unit.

        `hooks.pre_unit(l)` runs before unit l is all-gathered: that is where EDiT syncs unit l.
        """
        shards = self.shards if shards is None else shards
        log, clock = self.log, self.log.clock
        blocks = self.units_modules[1:]
        root = self.units_modules[0]
        cos, sin = self.model.rope(tokens.shape[1], self.device)
        marks: list[tuple[str, Any]] = []

        def mark_grad_ready(h: torch.Tensor, name: str) -> None:
            """When the gradient reaches `h` (the input of unit j), unit j's backward is done."""
            h.register_hook(lambda g: marks.append((name, log.mark())) or None)

        with torch.autocast(self.device.type, dtype=torch.bfloat16, enabled=self.bf16):
            if hooks is not None:
                hooks.pre_unit(0)
            root_params = self._gathered(0, shards[0], grad)
            m0 = log.mark()
            h = functional_call(root, root_params, (tokens, "embed"))
            log.add_span("compute_fwd", m0, log.mark(), unit=0, part="embed")
            if grad:
                mark_grad_ready(h, "in1")
            for i, block in enumerate(blocks, start=1):
                if hooks is not None:
                    hooks.pre_unit(i)
                params = self._gathered(i, shards[i], grad)
                m0 = log.mark()
                h = functional_call(block, params, (h, cos, sin))
                log.add_span("compute_fwd", m0, log.mark(), unit=i)
                if grad:
                    mark_grad_ready(h, f"in{i + 1}")
            m0 = log.mark()
            logits = functional_call(root, root_params, (h, "head"))
            loss = loss_fn(logits, targets)
            log.add_span("compute_fwd", m0, log.mark(), unit=0, part="head")
        self._bwd_marks = marks
        return loss

    def backward(self, loss: torch.Tensor) -> None:
        """loss.backward(), then wait for every reduce-scatter and hand each shard its gradient."""
        log = self.log
        t_start = log.mark()
        loss.backward()
        t_end = log.mark()
        # Backward compute spans, from the moments the gradient reached each unit's input:
        # "in{j}" = gradient w.r.t. the input of unit j (= output of unit j-1) is ready.
        ready = dict(self._bwd_marks)
        n_blocks = self.n_units - 1
        prev = ready.get(f"in{n_blocks + 1}", t_start)
        log.add_span("compute_bwd", t_start, prev, unit=0, part="head")
        for j in range(n_blocks, 0, -1):
            t = ready.get(f"in{j}", prev)
            log.add_span("compute_bwd", prev, t, unit=j)
            prev = t
        log.add_span("compute_bwd", prev, t_end, unit=0, part="embed")
        self.finish_backward()

    def finish_backward(self) -> None:
        for unit, h, out in self._rs_pending:
            h.wait()
            p = self.shards[unit]
            p.grad = out if p.grad is None else p.grad + out
        self._rs_pending = []

    # ------------------------------------------------------------------ helpers
    def grad_norm_(self, max_norm: float) -> float:
        """Clip the replica's gradient (norm over all its shards) to max_norm, like clip_grad_norm_."""
        sq = torch.stack([squared_norm(p.grad) for p in self.shards if p.grad is not None]).sum()
        sq = sq.reshape(1).to(torch.float64)
        self.comm.all_reduce(sq, group="shard", kind="grad_norm")
        total = float(sq.sqrt())
        if max_norm > 0:
            coef = max_norm / (total + 1e-6)
            if coef < 1.0:
                for p in self.shards:
                    if p.grad is not None:
                        p.grad.mul_(coef)
        return total

    @torch.no_grad()
    def full_flat(self, unit: int, shards: list[torch.Tensor] | None = None) -> torch.Tensor:
        shards = self.shards if shards is None else shards
        return self.gather(unit, shards[unit])[: self.layouts[unit].numel]

    @torch.no_grad()
    def full_state_dict(self, shards: list[torch.Tensor] | None = None) -> dict[str, torch.Tensor]:
        """The whole model as a plain state dict (names as in `Llama.state_dict()`); a shard-group collective."""
        shards = self.shards if shards is None else shards
        prefixes = ["root."] + [f"blocks.{i}." for i in range(self.n_units - 1)]
        out: dict[str, torch.Tensor] = {}
        for unit, prefix in enumerate(prefixes):
            full = self.gather(unit, shards[unit])
            for name, v in self.layouts[unit].views(full).items():
                out[prefix + name] = v.clone().cpu()
        return out
