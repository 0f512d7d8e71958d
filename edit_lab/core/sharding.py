"""ZeRO-3 inside a replica, written out on raw collectives so every step is visible.

Each sync unit (the root unit, then one per transformer block) is flattened into one buffer padded
to a multiple of S; rank s of the shard group keeps slice s of it as its only trainable parameter
(its *shard*). The forward all-gathers a unit right before computing it, the backward
reduce-scatters the unit's gradient (the mean over the shard group) back to the shards.

What happens to a block's gathered (full) parameters between its forward and its backward is the
`reshard_after_forward` switch, named and defaulted as in FSDP:

- **on (default, what FSDP does)**: right after a block's forward its full parameters are freed
  (the buffer's storage is resized to 0; only the shard stays), and the backward all-gathers them
  again right before that block's backward compute (`all_gather_bwd` in the timeline). Why FSDP
  pays this second all-gather: without it, every unit's full parameters are alive from its forward
  to its backward, so the peak holds the *whole* model unsharded — exactly what ZeRO-3 set out to
  avoid. Re-gathering, only the root and one block (two while the next one is prefetched) are alive
  at a time: the peak of gathered parameters is root + 2 blocks instead of root + L blocks, for one
  more all-gather per block and step (about twice the shard group's all-gather traffic).
  The backward prefetches like FSDP2: while block l's backward computes, block l−1's all-gather is
  already in flight (issued just before block l's backward, waited for just before block l−1's);
  the last block's is issued before `loss.backward()`, so it travels during the head's backward.
  The root unit (embedding, final norm, head) is never resharded, as FSDP2 keeps the root: its
  parameters are needed again at the very first moment of the backward (the head).
  Nothing is recomputed: the activations autograd saved stay; what it saved of the parameters are
  views of the freed buffer, which see the re-gathered values once the storage is filled again.
- **off** (FSDP's `reshard_after_forward=False`): the full parameters stay from the forward to the
  end of the backward; no all-gather in the backward, but the whole model is alive at the peak.

Either way the arithmetic is the same, so the results are bit-for-bit equal.

Why not FSDP2: EDiT's sync must slot in *right before each unit's all-gather*, prefetch must overlap
the next unit's sync with this unit's compute, and every collective must be timed and delayable.
Writing the sharding ourselves makes all three a one-line hook (`pre_unit`); FSDP2 is kept as the
independent oracle the tests compare against (tests/oracles/fsdp2.py).
"""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, Protocol

import torch
import torch.nn as nn
from torch.func import functional_call as _functional_call

from edit_lab.core.comm import Comm, Handle
from edit_lab.core.penalty import CLIP_EPS
from edit_lab.core.model import Llama, loss_fn
from edit_lab.records.events import EventLog


def functional_call(module: nn.Module, params: dict[str, torch.Tensor], args: tuple) -> Any:
    """`torch.func.functional_call` without its search for tied weights: the model ties none (model.py), and
    the search costs a pass over the module's parameters at every unit's forward."""
    return _functional_call(module, params, args, tie_weights=False)


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
    def pre_unit(self, unit: int) -> None:
        """Runs right before unit `unit` is all-gathered (EDiT syncs the unit's shard here)."""

    def may_gather_early(self, unit: int) -> bool:
        """False while `pre_unit(unit)` may still change the unit's shard (its sync has not happened)."""

    def grad_ready_hook(self) -> "GradReady | None":
        """Asked once per training forward (optional: a hooks object without it gets None): what the backward
        calls with each unit's gradient shard as soon as it is final (`ShardedModel._after_reduce_scatter`), or
        None. `sync` (and every method's warm-up) starts the unit's gradient all-reduce over the replicas there."""


#: Called during the backward with (unit, its final gradient shard: the shard's `.grad`).
GradReady = Callable[[int, torch.Tensor], None]


class _GatherUnit(torch.autograd.Function):
    """Forward: all-gather a unit's shards. Backward: reduce-scatter its gradient (asynchronously).

    The backward returns no gradient to autograd: the reduce-scatter is still in flight when it
    returns, and the engine writes the shard's `.grad` once it lands (`_land`: during the backward when
    the method asked to hear of it, `_after_reduce_scatter`; else in `finish_backward`), which lets the
    reduce-scatter of unit l overlap the backward compute of unit l-1. It runs once every use of the
    unit's parameters has had its backward, so with resharding the re-gathered full parameters are
    freed here again.
    """

    @staticmethod
    def forward(ctx, shard: torch.Tensor, engine: "ShardedModel", unit: int) -> torch.Tensor:  # type: ignore[override]
        ctx.engine, ctx.unit = engine, unit
        full = engine.gather(unit, shard)
        engine._hold(unit, full, shard.detach())
        return full

    @staticmethod
    def backward(ctx, grad_full: torch.Tensor):  # type: ignore[override]
        ctx.engine._reduce_scatter_grad(ctx.unit, grad_full)
        if ctx.engine._reshards(ctx.unit):
            ctx.engine._free(ctx.unit)
        return None, None, None


@dataclass
class _Held:
    """A unit's gathered full parameters during a training step: the buffer autograd's saved views
    point into, and an alias of its storage to refill it through (with its own version counter, so
    refilling does not look like an in-place change of a tensor autograd saved)."""

    storage: Any  # torch.UntypedStorage
    alias: torch.Tensor
    shard: torch.Tensor
    nbytes: int


class ShardedModel:
    """A Llama whose parameters exist only as shards, one per unit, on this rank."""

    def __init__(self, model: Llama, comm: Comm, device: torch.device | str = "cpu", bf16: bool = False,
                 reshard_after_forward: bool = True) -> None:
        self.comm = comm
        self.bf16 = bf16  # autocast the compute to bfloat16; shards, gradients and collectives stay float32
        self.reshard_after_forward = reshard_after_forward  # free a block's full params after its forward
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
        self._grad_ready: GradReady | None = None  # this step's `hooks.grad_ready_hook()`
        self._bwd_marks: list[tuple[str, Any]] = []
        self._held: dict[int, _Held] = {}  # units gathered by this training step's forward
        self._ag_pending: dict[int, Handle] = {}  # backward re-gathers in flight
        self._fwd_pending: dict[int, tuple[Handle, torch.Tensor]] = {}  # forward all-gathers issued early
        self.peak_gathered_bytes = 0  # the most full-parameter bytes ever alive at once (training steps)

    # ------------------------------------------------------------------ collectives on units
    def _issue_gather(self, unit: int, shard: torch.Tensor, async_op: bool) -> tuple[Handle, torch.Tensor]:
        """The forward all-gather of a unit into a fresh full buffer: (its handle, the buffer)."""
        full = torch.empty(self.layouts[unit].padded, dtype=shard.dtype, device=shard.device)
        h = self.comm.all_gather(full, shard.detach(), group="shard", kind="all_gather", unit=unit, async_op=async_op)
        return h, full

    def gather(self, unit: int, shard: torch.Tensor) -> torch.Tensor:
        """The unit's full parameters: the forward-prefetched all-gather if one is in flight, else a blocking one."""
        h, full = self._fwd_pending.pop(unit, None) or self._issue_gather(unit, shard, async_op=False)
        h.wait()  # returns at once for a blocking one
        return full

    def _gather_ahead(self, unit: int, shard: torch.Tensor) -> None:
        """Forward prefetch, as FSDP2 does: issue unit's all-gather now, so it travels while the unit before
        it computes. Only called once nothing can change the unit's shard before its turn (see forward)."""
        self._fwd_pending[unit] = self._issue_gather(unit, shard, async_op=True)
        self._count()

    def _reduce_scatter_grad(self, unit: int, grad_full: torch.Tensor) -> None:
        out = torch.empty(self.layouts[unit].shard_size, dtype=grad_full.dtype, device=grad_full.device)
        h = self.comm.reduce_scatter(out, grad_full.contiguous(), group="shard", kind="reduce_scatter",
                                     unit=unit, async_op=True)
        self._rs_pending.append((unit, h, out))
        self._after_reduce_scatter()

    # ------------------------------------------------------------------ gradient shards
    def _land(self, unit: int, h: Handle, out: torch.Tensor) -> None:
        """Wait for unit's reduce-scatter, make its result the shard's `.grad`, and tell the method."""
        h.wait()
        p = self.shards[unit]
        p.grad = out if p.grad is None else p.grad + out
        if self._grad_ready is not None:
            self._grad_ready(unit, p.grad)

    def _after_reduce_scatter(self) -> None:
        """Right after a unit's reduce-scatter is issued: hand the method every gradient shard that is final.

        Only when the method asked (`grad_ready_hook`); otherwise every shard lands in `finish_backward`, as
        always. The rule depends on S alone, so a real run, the virtual clock and the simulator
        (`sim/programs.py` `ReplicaProgram.backward`) all follow it:

        - S = 1: the reduce-scatter of a group of one is a copy, complete when issued: unit l's shard is
          handed over at once, at the end of unit l's backward;
        - S > 1: unit l's shard is handed over when unit l-1's reduce-scatter has been issued (at the end of
          unit l-1's backward): unit l's had that backward compute to travel, and is waited for then (the
          wait is the shard group's, recorded as usual). The last one, the root unit's, lands in
          `finish_backward`. Not `Work.is_completed()`: what it answers depends on this machine's speed.
        """
        if self._grad_ready is None:
            return
        ready = self._rs_pending if self.S == 1 else self._rs_pending[:-1]
        self._rs_pending = self._rs_pending[len(ready):]
        for unit, h, out in ready:
            self._land(unit, h, out)

    # ------------------------------------------------------------------ resharding
    def _reshards(self, unit: int) -> bool:
        """Is this unit freed after its forward and re-gathered in the backward? Blocks only, never the root."""
        return self.reshard_after_forward and unit >= 1

    def _count(self) -> None:
        """Update the peak with the full-parameter bytes alive now (held units and forward prefetches)."""
        alive = (sum(h.storage.nbytes() for h in self._held.values())
                 + sum(full.untyped_storage().nbytes() for _, full in self._fwd_pending.values()))
        self.peak_gathered_bytes = max(self.peak_gathered_bytes, alive)

    def _hold(self, unit: int, full: torch.Tensor, shard: torch.Tensor) -> None:
        with torch.no_grad():
            alias = torch.empty(0, dtype=full.dtype, device=full.device).set_(full.untyped_storage(), 0, full.shape)
        self._held[unit] = _Held(full.untyped_storage(), alias, shard, full.untyped_storage().nbytes())
        self._count()

    def _free(self, unit: int) -> None:
        """Drop a unit's full parameters, keeping the buffer (and autograd's views of it) to refill later."""
        self._held[unit].storage.resize_(0)
        self._count()

    def _regather(self, unit: int) -> None:
        """Issue (async) the backward all-gather of a freed unit, into its old buffer."""
        if unit in self._ag_pending or unit not in self._held or self._held[unit].storage.nbytes() > 0:
            return
        held = self._held[unit]
        held.storage.resize_(held.nbytes)
        self._count()
        self._ag_pending[unit] = self.comm.all_gather(held.alias, held.shard, group="shard", kind="all_gather_bwd",
                                                      unit=unit, async_op=True)

    def _before_unit_backward(self, unit: int) -> None:
        """Right before a resharded unit's backward: its parameters back in place, the next one's on the way."""
        self._regather(unit)  # a no-op if prefetched
        h = self._ag_pending.pop(unit, None)
        if h is not None:
            h.wait()
        if self._reshards(unit - 1):
            self._regather(unit - 1)  # backward prefetch: travels while this unit's backward computes

    def _gathered(self, unit: int, shard: torch.Tensor, grad: bool) -> dict[str, torch.Tensor]:
        full = _GatherUnit.apply(shard, self, unit) if grad else self.gather(unit, shard)
        return self.layouts[unit].views(full)

    # ------------------------------------------------------------------ forward / backward
    def forward(self, tokens: torch.Tensor, targets: torch.Tensor, shards: list[torch.Tensor] | None = None,
                hooks: UnitHooks | None = None, grad: bool = True) -> torch.Tensor:
        """Mean cross-entropy of this rank's micro-batch, computing the model unit by unit.

        `hooks.pre_unit(l)` runs before unit l is all-gathered: that is where EDiT syncs unit l.
        Unit l+1's all-gather is issued before unit l computes (forward prefetch) when
        `hooks.may_gather_early(l+1)` says its shard is final, i.e. outside a sync: during EDiT's sync
        a unit is gathered only after its own sync, which is what makes the gathered values fresh.
        """
        shards = self.shards if shards is None else shards
        log, clock = self.log, self.log.clock
        blocks = self.units_modules[1:]
        root = self.units_modules[0]
        cos, sin = self.model.rope(tokens.shape[1], self.device)
        marks: list[tuple[str, Any]] = []
        if grad:
            self._held, self._ag_pending = {}, {}
            self._count()
            ask = getattr(hooks, "grad_ready_hook", None)
            self._grad_ready = ask() if ask is not None else None

        may_early = hooks.may_gather_early if hooks is not None else (lambda unit: True)

        def gather_next(unit: int) -> None:
            if unit < self.n_units and may_early(unit):
                self._gather_ahead(unit, shards[unit])

        def at_output(h: torch.Tensor, unit: int) -> None:
            """When the gradient reaches `h` (the output of `unit`, the input of unit+1), unit+1's backward
            is done ("in{unit+1}"); then `unit` is re-gathered if resharded, and its backward starts ("start{unit}")."""
            def hook(g: torch.Tensor) -> None:
                marks.append((f"in{unit + 1}", log.mark()))
                if self._reshards(unit):
                    self._before_unit_backward(unit)
                marks.append((f"start{unit}", log.mark()))
                clock.charge("bwd", unit, "embed" if unit == 0 else None)  # the virtual clock's cost model
            h.register_hook(hook)

        with torch.autocast(self.device.type, dtype=torch.bfloat16, enabled=self.bf16):
            if hooks is not None:
                hooks.pre_unit(0)
            root_params = self._gathered(0, shards[0], grad)
            gather_next(1)
            m0 = log.mark()
            h = functional_call(root, root_params, (tokens, "embed"))
            clock.charge("fwd" if grad else "eval_fwd", 0, "embed")
            log.add_span("compute_fwd", m0, log.mark(), unit=0, part="embed")
            if grad:
                at_output(h, 0)
            # region engine-unit-loop
            for i, block in enumerate(blocks, start=1):
                if hooks is not None:
                    hooks.pre_unit(i)
                params = self._gathered(i, shards[i], grad)
                gather_next(i + 1)
                m0 = log.mark()
                h = functional_call(block, params, (h, cos, sin))
                clock.charge("fwd" if grad else "eval_fwd", i)
                log.add_span("compute_fwd", m0, log.mark(), unit=i)
                del params  # with resharding, nothing but autograd's saved views keeps the buffer
                if grad:
                    if self._reshards(i):
                        self._free(i)
                    at_output(h, i)
            # endregion engine-unit-loop
            m0 = log.mark()
            logits = functional_call(root, root_params, (h, "head"))
            loss = loss_fn(logits, targets)
            clock.charge("fwd" if grad else "eval_fwd", 0, "head")
            log.add_span("compute_fwd", m0, log.mark(), unit=0, part="head")
        self._bwd_marks = marks
        return loss

    def backward(self, loss: torch.Tensor) -> None:
        """loss.backward(), then wait for every reduce-scatter and hand each shard its gradient."""
        log = self.log
        n_blocks = self.n_units - 1
        if self._reshards(n_blocks):
            self._regather(n_blocks)  # the last block's re-gather travels during the head's backward
        t_start = log.mark()
        log.clock.charge("bwd", 0, "head")
        loss.backward()
        t_end = log.mark()
        self._log_backward_spans(dict(self._bwd_marks), t_start, t_end)
        self._held, self._ag_pending = {}, {}  # autograd has let go of the graph: every full buffer is gone
        self._count()
        self.finish_backward()

    def _log_backward_spans(self, ready: dict[str, Any], t_start: Any, t_end: Any) -> None:
        """Backward compute spans, from the moments the gradient reached each unit's input:
        "in{j}" = gradient w.r.t. the input of unit j (= output of unit j-1) is ready;
        "start{j}" = unit j's backward compute begins (after its re-gather, when resharded)."""
        log, n_blocks = self.log, self.n_units - 1
        prev = ready.get(f"in{n_blocks + 1}", t_start)
        log.add_span("compute_bwd", t_start, prev, unit=0, part="head")
        for j in range(n_blocks, 0, -1):
            start = ready.get(f"start{j}", prev)
            t = ready.get(f"in{j}", start)
            log.add_span("compute_bwd", start, t, unit=j)
            prev = t
        log.add_span("compute_bwd", ready.get("start0", prev), t_end, unit=0, part="embed")

    def drop_backward(self) -> None:
        """No backward this step (a late replica of backup workers, core/methods/backup.py): let go of what
        the forward gathered for it; the caller drops the loss and with it autograd's graph."""
        self._held, self._ag_pending, self._rs_pending = {}, {}, []
        self._grad_ready = None
        self._count()

    def finish_backward(self) -> None:
        """Land every reduce-scatter still pending (all of them unless the method asked to hear of each)."""
        pending, self._rs_pending = self._rs_pending, []
        for unit, h, out in pending:
            self._land(unit, h, out)
        self._grad_ready = None

    # ------------------------------------------------------------------ helpers
    def grad_norm_(self, max_norm: float) -> float:
        """Clip the replica's gradient (norm over all its shards) to max_norm, like clip_grad_norm_."""
        sq = torch.stack([squared_norm(p.grad) for p in self.shards if p.grad is not None]).sum()
        sq = sq.reshape(1).to(torch.float64)
        self.comm.all_reduce(sq, group="shard", kind="grad_norm")
        total = float(sq.sqrt())
        if max_norm > 0:
            coef = max_norm / (total + CLIP_EPS)
            if coef < 1.0:
                for p in self.shards:
                    if p.grad is not None:
                        p.grad.mul_(coef)
        return total

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


def squared_norm(x: torch.Tensor) -> torch.Tensor:
    """‖x‖² as a 0-dim float64 tensor on x's device.

    float64 because the partial sums of S shards are added across ranks, and a pseudo-gradient's norm
    feeds the anomaly detector, whose z-scores compare norms that differ in their later digits.
    `vector_norm(dtype=float64)` casts element by element inside one fused pass; the obvious
    `x.double().pow(2).sum()` writes two float64 copies of the shard first and is about six times
    slower on a CPU, which showed in every sync step of a 3 MB-per-unit model.
    """
    return torch.linalg.vector_norm(x, dtype=torch.float64).square()
