"""The virtual clock's time-only mode (`RunConfig.clock.compute = "charged"`, docs/edit-method.md §14).

The same `Trainer`, methods, penalty protocol, outer optimizer, `VirtualComm` and fabric as the virtual clock
(virtual.py), on the same costs, with one thing replaced: the sharded model. `ChargedModel` has the real
model's sync units and issues, unit by unit, the very shard-group collectives `ShardedModel` issues (the
forward all-gathers and their prefetch, the backward's re-gathers and reduce-scatters, the clip norm), at the
same moments, and charges the clock the same costs (`Clock.charge`); but it computes nothing. Why: a real
virtual run spends about 85 % of a rank-step in torch's forward and backward (21–76 ms per rank-step), which
the StragglerLab's preview cannot wait for, and none of it changes *when* anything happens on this clock.

What stands in for the model (and why it keeps the timeline exact):

- **Tiny shards, declared bytes.** Unit u's shard is `standin_numel(u)` values (2^u, × `wire.BLOCK` in an
  integer wire format) instead of the real ceil(params_u / S). Every collective that carries a model-sized
  tensor is recorded and charged with the bytes the real model's tensor has (`declared_bytes`): a unit's
  full buffer or shard (its `unit`), or a packed set of units' pseudo-gradients (DiLoCo, CO2, a Streaming
  DiLoCo fragment: no `unit`, so the set is read from the packed tensor's length, a sum of distinct powers
  of two: that is why the stand-in sizes are powers of two), in the run's wire format (`wire.wire_tensor_bytes`).
  The small exchanges (clocks, stop checks, norms, decisions, meetings) are the real tensors already.
- **No data, no FLOPs.** No model and no corpus are built; a batch is a tensor of zeros of the batch's shape
  (its `tokens` count is real); gradients are zeros.

What it cannot show: **losses** (recorded as NaN in metrics.jsonl and the summary) and **the penalty's
decisions**: its exchanges run and cost what they cost, but on the stand-in's pseudo-gradients, so its
records are not written (penalty.jsonl is empty) and its re-admissions not reported. The timeline does not
depend on them: a replica left out still sends (zeros) and every unit's outer step is charged whether it is
skipped or not; the preview simulator (sim/programs.py) assumes the same (every replica admitted, no
rollback). Nor **memory** (summary.json's `memory` is empty): the stand-in holds none of the model's.
"""

from __future__ import annotations

import math
from typing import Any

import torch
import torch.nn as nn

from edit_lab.config import RunConfig
from edit_lab.core.comm import Comm, Handle
from edit_lab.core.sharding import ShardedModel
from edit_lab.core.wire import PSEUDO_GRADIENT_KINDS, align, padded, wire_tensor_bytes
from edit_lab.core.wire import spec_of as wire_spec_of
from edit_lab.records.events import EventLog
from edit_lab.sizes import SIZES
from edit_lab.train.trainer import Trainer

#: Shard-group collectives of a unit's whole (padded) buffer: a forward or backward all-gather, a reduce-scatter.
UNIT_BUFFER_KINDS = frozenset({"all_gather", "all_gather_bwd", "reduce_scatter"})


def unit_params(model: str) -> list[int]:
    """Parameters of each sync unit of `model` (the root unit, then each block), from sizes.py: no torch model."""
    size = SIZES[model]
    return [size.root_params()] + [size.block_params()] * size.n_layers


def shard_numel(cfg: RunConfig) -> list[int]:
    """Values of one rank's shard of each unit in the real model (`UnitLayout.shard_size`: padded to S)."""
    return [-(-n // cfg.shards) for n in unit_params(cfg.data.model)]


def standin_numel(cfg: RunConfig, unit: int) -> int:
    """Values of the stand-in's shard of `unit`: distinct powers of two, so that any set of units packed into one
    collective is known from its length; whole blocks in an integer wire format, whole chunks in sparseloco, which
    pad each unit to one."""
    return (1 << unit) * align(wire_spec_of(cfg))


class DeclaredSizes:
    """The real model's byte counts of the collectives a `ChargedModel` run issues with its tiny tensors."""

    def __init__(self, cfg: RunConfig) -> None:
        self.S, self.R = cfg.shards, cfg.replicas
        self.shard = shard_numel(cfg)
        self.scale = align(wire_spec_of(cfg))

    def units_of(self, numel: int) -> list[int]:
        """The units whose stand-in pseudo-gradients were packed into a tensor of `numel` values."""
        bits = numel // self.scale
        units = [u for u in range(len(self.shard)) if bits >> u & 1]
        if bits <= 0 or bits >= 1 << len(self.shard) or numel % self.scale:
            raise RuntimeError(f"time-only mode: a packed pseudo-gradient of {numel} values is no set of units")
        return units

    def nbytes(self, kind: str, group: str, unit: int | None, t: torch.Tensor, wire: str) -> int | None:
        """The real model's whole tensor of this collective (`Comm` records and charges it by the ring rule,
        `wire.ring_bytes`); None: the tensor's own (a small exchange)."""
        if group == "shard" and kind in UNIT_BUFFER_KINDS and unit is not None:
            return 4 * self.shard[unit] * self.S  # the unit's full buffer, float32
        if group == "sync" and kind == "grad_all_reduce" and unit is not None:
            return 4 * self.shard[unit]
        if group == "sync" and kind in PSEUDO_GRADIENT_KINDS:
            units = [unit] if unit is not None else self.units_of(t.numel())
            return wire_tensor_bytes(sum(padded(self.shard[u], wire) for u in units), wire, self.R)
        return None


class ChargedModel:
    """`ShardedModel`'s collectives and charges, unit by unit in its order, on tiny shards, computing nothing.

    Mirrors sharding.py's forward (pre_unit hook, all-gather or its prefetch, the next unit's prefetch, the
    compute charge, resharding) and backward (the last block's re-gather before the head's backward; per block,
    last to first: its re-gather and the next one's prefetch, its compute charge, then its reduce-scatter; the
    embedding's, then the root's reduce-scatter), as autograd runs them in the real engine. The compute spans
    are recorded from the same marks. tests/distributed/test_virtual_time_only.py holds it to the real
    engine's events, event by event.
    """

    def __init__(self, cfg: RunConfig, comm: Comm, device: torch.device | str = "cpu") -> None:
        self.comm = comm
        self.log: EventLog = comm.log
        self.S = comm.mesh.shards
        self.device = torch.device(device)
        self.reshard_after_forward = cfg.runtime.reshard_after_forward
        self.n_units = SIZES[cfg.data.model].n_layers + 1
        self.shards: list[nn.Parameter] = [nn.Parameter(torch.zeros(standin_numel(cfg, u), device=self.device))
                                           for u in range(self.n_units)]
        self.peak_gathered_bytes = 0  # not tracked: a time-only run reports no memory
        self._rs_pending: list[tuple[int, Handle, torch.Tensor]] = []
        self._grad_ready: Any = None  # this step's `hooks.grad_ready_hook()`
        self._bwd_marks: list[tuple[str, Any]] = []
        self._freed: set[int] = set()  # units resharded after this step's forward, not yet re-gathered
        self._ag_pending: dict[int, Handle] = {}
        self._fwd_pending: dict[int, Handle] = {}

    # ------------------------------------------------------------------ collectives on units
    def _issue_gather(self, unit: int, shard: torch.Tensor, async_op: bool) -> Handle:
        full = torch.empty(shard.numel() * self.S, dtype=shard.dtype, device=shard.device)
        return self.comm.all_gather(full, shard.detach(), group="shard", kind="all_gather", unit=unit,
                                    async_op=async_op)

    def gather(self, unit: int, shard: torch.Tensor) -> None:
        h = self._fwd_pending.pop(unit, None) or self._issue_gather(unit, shard, async_op=False)
        h.wait()

    def _reshards(self, unit: int) -> bool:
        return self.reshard_after_forward and unit >= 1

    def _regather(self, unit: int) -> None:
        if unit in self._ag_pending or unit not in self._freed:
            return
        self._freed.discard(unit)
        shard = self.shards[unit].detach()
        full = torch.empty(shard.numel() * self.S, dtype=shard.dtype, device=shard.device)
        self._ag_pending[unit] = self.comm.all_gather(full, shard, group="shard", kind="all_gather_bwd", unit=unit,
                                                      async_op=True)

    def _before_unit_backward(self, unit: int) -> None:
        self._regather(unit)
        h = self._ag_pending.pop(unit, None)
        if h is not None:
            h.wait()
        if self._reshards(unit - 1):
            self._regather(unit - 1)

    def _reduce_scatter_grad(self, unit: int) -> None:
        n = self.shards[unit].numel()
        out = torch.empty(n, device=self.device)
        h = self.comm.reduce_scatter(out, torch.zeros(n * self.S, device=self.device), group="shard",
                                     kind="reduce_scatter", unit=unit, async_op=True)
        self._rs_pending.append((unit, h, out))
        self._after_reduce_scatter()

    # ------------------------------------------------------------------ forward / backward
    def forward(self, tokens: torch.Tensor, targets: torch.Tensor, shards: list[torch.Tensor] | None = None,
                hooks: Any = None, grad: bool = True) -> torch.Tensor:
        """`ShardedModel.forward`'s collectives and charges; the "loss" is 0 (a time-only run records NaN)."""
        shards = self.shards if shards is None else shards
        log, clock = self.log, self.log.clock
        what = "fwd" if grad else "eval_fwd"
        if grad:
            self._freed, self._ag_pending = set(), {}
            ask = getattr(hooks, "grad_ready_hook", None)
            self._grad_ready = ask() if ask is not None else None
        may_early = hooks.may_gather_early if hooks is not None else (lambda unit: True)

        def gather_next(unit: int) -> None:
            if unit < self.n_units and may_early(unit):
                self._fwd_pending[unit] = self._issue_gather(unit, shards[unit], async_op=True)

        def compute(unit: int, part: str | None) -> None:
            m0 = log.mark()
            clock.charge(what, unit, part)
            kw = {"part": part} if part is not None else {}
            log.add_span("compute_fwd", m0, log.mark(), unit=unit, **kw)

        if hooks is not None:
            hooks.pre_unit(0)
        self.gather(0, shards[0])
        gather_next(1)
        compute(0, "embed")
        for i in range(1, self.n_units):
            if hooks is not None:
                hooks.pre_unit(i)
            self.gather(i, shards[i])
            gather_next(i + 1)
            compute(i, None)
            if grad and self._reshards(i):
                self._freed.add(i)
        compute(0, "head")
        return torch.zeros((), device=self.device)

    def backward(self, loss: torch.Tensor) -> None:
        """`ShardedModel.backward`: what autograd runs there, in its order, with the same compute spans."""
        log, clock = self.log, self.log.clock
        n_blocks = self.n_units - 1
        if self._reshards(n_blocks):
            self._regather(n_blocks)
        t_start = log.mark()
        clock.charge("bwd", 0, "head")
        marks: list[tuple[str, Any]] = []
        for unit in range(n_blocks, -1, -1):  # the hook on unit's output, then its reduce-scatter (_GatherUnit)
            marks.append((f"in{unit + 1}", log.mark()))
            if self._reshards(unit):
                self._before_unit_backward(unit)
            marks.append((f"start{unit}", log.mark()))
            clock.charge("bwd", unit, "embed" if unit == 0 else None)
            self._reduce_scatter_grad(unit)
            if self._reshards(unit):
                self._freed.discard(unit)
        self._log_backward_spans(dict(marks), t_start, log.mark())
        self._freed, self._ag_pending = set(), {}
        self.finish_backward()

    def drop_backward(self) -> None:
        """`ShardedModel.drop_backward`: a late replica of backup workers runs no backward this step."""
        self._freed, self._ag_pending, self._rs_pending = set(), {}, []
        self._grad_ready = None

    # the real engine's own code: they act on the shards and the shard-group collectives only
    _log_backward_spans = ShardedModel._log_backward_spans
    _land = ShardedModel._land  # the method's gradient all-reduce starts here as in the real engine
    _after_reduce_scatter = ShardedModel._after_reduce_scatter
    finish_backward = ShardedModel.finish_backward
    grad_norm_ = ShardedModel.grad_norm_

    def full_state_dict(self, shards: list[torch.Tensor] | None = None) -> dict[str, torch.Tensor]:
        """The same all-gathers as `ShardedModel.full_state_dict`; no state (there is no model)."""
        shards = self.shards if shards is None else shards
        for unit in range(self.n_units):
            self.gather(unit, shards[unit])
        return {}


class ChargedTrainer(Trainer):
    """`Trainer` on a `ChargedModel` and batches of zeros: no model, no corpus; its losses are not reported."""

    def make_engine(self) -> Any:
        return ChargedModel(self.cfg, self.comm, self.device)

    def load_data(self) -> None:
        cfg = self.cfg
        self.corpus = None
        x = torch.zeros(cfg.data.batch_size, cfg.data.seq_len, dtype=torch.long, device=self.device)
        self.val = [(x, x)] * cfg.data.eval_batches

    def batch(self, step: int) -> tuple[torch.Tensor, torch.Tensor]:
        x = torch.zeros(self.cfg.data.batch_size, self.cfg.data.seq_len, dtype=torch.long, device=self.device)
        return x, x

    def rank_record(self) -> Any:
        """The rank's record with what a time-only run cannot know taken out: losses (NaN), the penalty's
        records and re-admissions (decided on stand-in numbers), memory (the stand-in's is not the model's)."""
        rec = super().rank_record()
        for m in rec.metrics:
            for key in ("loss", "val_loss"):
                if key in m:
                    m[key] = math.nan
        rec.records = [r for r in rec.records if r.get("kind") != "penalty"]
        rec.memory = {}
        if "penalty_readmissions" in rec.method_info:
            rec.method_info = {**rec.method_info, "penalty_readmissions": []}
        return rec
