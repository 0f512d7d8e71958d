"""The method interface: the few moments of a training step where methods differ.

A step is always: `begin_step` → forward (calling `pre_unit(l)` before each unit's all-gather) →
`before_backward` → backward (reduce-scatter in the shard group; `grad_ready` with each unit's final gradient shard when the
step all-reduces gradients) → `after_backward` → inner optimizer step → `after_optimizer`. Synchronous
training, Post Local SGD, DiLoCo, CO2, EDiT and A-EDiT are each a handful of these hooks, so a reader can
diff them side by side.

Time-only twin: `ReplicaProgram` (the hooks every program overrides) in `edit_lab/clock/sim/programs.py`,
the preview simulator's copy of this schedule: a change to *when* this method talks to the other replicas
changes it too (tests/distributed/test_sim_matches_virtual.py holds the two to the same timeline).
"""

from __future__ import annotations

import os
from dataclasses import asdict, fields
from typing import TYPE_CHECKING, Any, Callable

import torch

from edit_lab.config import RunConfig
from edit_lab.core.comm import Comm, Handle
from edit_lab.core.sharding import GradReady, ShardedModel
from edit_lab.protocol import in_warmup
from edit_lab.records.events import EventLog
from edit_lab.registry import REGISTRY, Capabilities
from edit_lab.rules import Rules, is_builtin

if TYPE_CHECKING:
    from edit_lab.core.quorum import Pause

#: "0" in the environment of every rank turns the overlap of the gradient all-reduce off (the tests' switch:
#: `tests/distributed/test_grad_overlap.py` checks that it changes the timeline and not one bit of the model).
OVERLAP_ENV = "EDIT_LAB_GRAD_ALL_REDUCE_OVERLAP"


class Method:
    """Base class; also the behaviour every method shares (a synchronous gradient all-reduce)."""

    name = "base"

    def __init_subclass__(cls, **kwargs: Any) -> None:
        """A method registered by name gets its capabilities (`is_local_sgd`, `has_penalty`, …) as class
        attributes from `registry.REGISTRY`, the one place they are stated: the config reads them there
        without loading torch, and a class cannot disagree with it (stating one in a class body is refused)."""
        super().__init_subclass__(**kwargs)
        stated = sorted(set(vars(cls)) & {f.name for f in fields(Capabilities)})
        if stated:
            raise TypeError(f"{cls.__name__} states {', '.join(stated)}: capabilities live in edit_lab/registry.py")
        if cls.name in REGISTRY:
            for capability, value in asdict(REGISTRY[cls.name]).items():
                setattr(cls, capability, value)

    def __init__(self, cfg: RunConfig, engine: ShardedModel) -> None:
        self.cfg = cfg
        self.engine = engine
        self.comm: Comm = engine.comm
        self.log: EventLog = engine.log
        self.mesh = self.comm.mesh
        self.optimizer: torch.optim.Optimizer | None = None  # set by the worker
        self.on_synced: Callable[[int], None] | None = None  # set by the worker (checkpoints)
        self.survival: Any = None  # with RunConfig.runtime.survive: this rank's `core.survival.Survival` (set by the worker)
        # the gradient all-reduces issued during this step's backward (`grad_ready`), by unit, in issue order
        self._grads_in_flight: dict[int, tuple[torch.Tensor, Handle]] = {}
        self.overlap_grads = os.environ.get(OVERLAP_ENV, "1") != "0"
        self.rules = Rules.from_config(cfg)  # this rank's rules: the library's functions, or a reader's (edit_lab.rules)
        # the built-in all-reduce is bucketed and overlapped with the backward; a reader's goes unit by unit
        self.builtin_grads = is_builtin(self.rules.grad_all_reduce)

    # ---------------------------------------------------------------- hooks
    def begin_step(self, step: int) -> None:
        """Called before step `step` starts (local-SGD methods create the anchors at step W here)."""

    def pre_unit(self, unit: int) -> None:
        """Called in the forward right before unit `unit` is all-gathered in the shard group."""

    def may_gather_early(self, unit: int) -> bool:
        """May the engine all-gather `unit` before `pre_unit(unit)` has run (forward prefetch)? Yes unless
        `pre_unit` is about to change the unit's shard."""
        return True

    def all_reduces_grads(self, step: int) -> bool:
        """Does `after_backward(step)` all-reduce the gradient shards over the sync group
        (`all_reduce_grads_over_sync_group`)? Synchronous training at every step (sync.py), a Local-SGD method
        during its warm-up (`LocalSGDMethod.after_backward`). A method that answers yes here and then does not
        call it fails at its next step (`grad_ready_hook`)."""
        return not getattr(self, "is_local_sgd", False) or in_warmup(step, self.cfg.schedule.warmup_steps)

    def grad_ready_hook(self) -> GradReady | None:
        """The engine asks at each training forward: `grad_ready` when this step's gradients are all-reduced by
        the built-in all-reduce and there is another replica to talk to, else None (the engine then lands every
        shard after the backward, as before)."""
        if self._grads_in_flight:
            raise RuntimeError(f"{type(self).__name__}: gradient all-reduces of units {sorted(self._grads_in_flight)} "
                               f"were issued during the last backward and never waited for: all_reduces_grads() "
                               f"said yes, but after_backward did not call all_reduce_grads_over_sync_group()")
        # with survival every all-reduce waits for `after_backward`, where every rank of a replica meets a death alike
        if (not self.overlap_grads or self.mesh.sync_size == 1 or not self.builtin_grads or self.survival is not None
                or not self.all_reduces_grads(self.log.step)):
            return None
        return self.grad_ready

    def grad_ready(self, unit: int, grad: torch.Tensor) -> None:
        """During the backward: unit `unit`'s gradient shard is final (`ShardedModel._after_reduce_scatter` says
        when). Its all-reduce over the sync group starts now and travels under the rest of the backward, as
        DDP's and HSDP's bucket all-reduces do; `all_reduce_grads_over_sync_group` waits for it."""
        self._grads_in_flight[unit] = (grad, self.comm.all_reduce(grad, group="sync", kind="grad_all_reduce",
                                                                  unit=unit, async_op=True))

    def before_backward(self, step: int, pause: "Pause | None") -> bool:
        """Between the forward and the backward: does this replica run its backward this step? Yes, for every
        method but backup workers (backup.py), who spend a straggler's `pause` here (the trainer hands it over
        only to them) and drop the backward of a replica that is late."""
        return True

    def after_backward(self, step: int) -> None:
        """Gradient shards are ready (already averaged over the shard group, D5)."""

    def after_optimizer(self, step: int) -> None:
        """The inner optimizer has updated this rank's shards."""

    def finalize(self, step: int) -> None:
        """End of training: leave every replica holding the model they agree on."""

    # ---------------------------------------------------------------- time budgets (edit-method.md §12)
    def replica_clock(self) -> float:
        """Mean over the shard group of the ranks' clocks: every rank of the replica gets the same value.

        Decisions taken from the clock (A-EDiT's meetings, the end of a time budget, a timed validation)
        must be the same on every rank of a replica, or its ranks would issue different collectives.
        """
        t = torch.tensor([self.log.clock.now()], dtype=torch.float64, device=self.comm.device)
        self.comm.all_reduce(t, group="shard", kind="clock")
        return float(t) / self.mesh.shards

    # region stop-check
    def stop_here(self, step: int, spent: bool) -> bool:
        """Time-budget runs: should this replica stop before training `step`? `spent`: its budget is.

        Replicas that run in lockstep (synchronous training, and the warm-up of every method) must stop at
        the same step, so they agree with one tiny exchange over the sync group (kind 'stop_check'): the
        first replica whose budget is spent stops everyone.
        """
        return self.any_replica(spent)

    def any_replica(self, flag: bool) -> bool:
        """True when `flag` is set on any replica (a sum over the sync group; 0 or 1 per replica)."""
        t = torch.tensor([float(flag)], dtype=torch.float64, device=self.comm.device)
        self.comm.all_reduce(t, group="sync", kind="stop_check")
        return float(t) > 0.0
    # endregion stop-check

    def eval_shards(self) -> list[torch.Tensor]:
        """The parameters to evaluate: the model every replica agrees on."""
        return list(self.engine.shards)

    def extra_state_numel(self) -> int:
        """Values this method keeps per rank beyond parameters and inner optimizer state."""
        return 0

    def state_dict(self) -> dict[str, Any]:
        return {}

    def load_state_dict(self, state: dict[str, Any]) -> None:
        pass

    # ---------------------------------------------------------------- surviving a death (core/survival.py)
    def abandon_sync(self) -> None:
        """A sync failed (a peer died): let go of whatever it has in flight, before its snapshot is restored."""

    def syncs_in_step(self, step: int) -> bool:
        """Does step `step` hold a sync before its optimizer (EDiT's in the forward, sync's gradient all-reduce)?
        Survival then retries the step up to its optimizer after a death (`Trainer.until_optimizer`)."""
        return False

    def join_first_sync(self, step: int) -> None:
        """A replacement that took a donor's state at `step`: what it does before training that step (the local-SGD
        methods: k = 0 in the sync that admits it; `sync`: nothing, its first step's all-reduce admits it)."""

    def discard_round(self, step: int) -> None:
        """`survive_on_failure='discard'`: drop the round a death interrupted (the local-SGD methods: θ ← a)."""

    def on_view(self, view: Any) -> None:
        """This rank moved to a new view (`core.view.View`): the members, who joined and who died."""

    def synced(self, next_step: int) -> None:
        """Tell the worker that every replica now holds the agreed model (θ = anchor): a checkpoint moment.

        `next_step` is the first step that still has to run from here on.
        """
        if self.on_synced is not None:
            self.on_synced(next_step)

    # ---------------------------------------------------------------- shared building blocks
    def all_reduce_grads_over_sync_group(self) -> None:
        """Average the gradient shards over the replicas: synchronous data parallel across the sync group.

        One all-reduce per unit (the unit is the bucket). Each started during the backward, as soon as the
        unit's gradient shard was final (`grad_ready`, unless the overlap is off); any unit not started
        then is issued here, all at once (asynchronously); then every one is waited for in issue order and
        divided by R. The same tensors summed by the same collectives: only the timing differs.
        """
        R = self.mesh.sync_size
        if R == 1:
            return
        if not self.builtin_grads:
            self.all_reduce_grads_by_rule()
            return
        in_flight, self._grads_in_flight = self._grads_in_flight, {}
        handles = list(in_flight.values())
        for unit, p in enumerate(self.engine.shards):
            if p.grad is None or unit in in_flight:
                continue
            handles.append((p.grad, self.comm.all_reduce(p.grad, group="sync", kind="grad_all_reduce", unit=unit,
                                                         async_op=True)))
        n = self.contributors()
        for grad, h in handles:
            h.wait()
            grad.div_(n)

    def contributors(self) -> int:
        """How many replicas' gradients the sync group's sum holds: all R of them (backup workers: m; survival:
        the view's members)."""
        return self.mesh.sync_size

    @torch.no_grad()
    def all_reduce_grads_by_rule(self) -> None:
        """The reader's all-reduce (`RunConfig.rules.grad_all_reduce`), unit by unit, from the sync group's real
        collectives: each unit's gradient shard, zero-padded to a multiple of R, is handed to the rule with a
        blocking `reduce_scatter` (this rank's slice of the mean) and `all_gather`, both recorded as the unit's
        `grad_all_reduce` events; what the rule returns, unpadded, becomes the shard's gradient."""
        R = self.mesh.replicas
        for unit, p in enumerate(self.engine.shards):
            if p.grad is None:
                continue
            n = p.grad.numel()
            grad = torch.zeros(-(-n // R) * R, dtype=p.grad.dtype, device=p.grad.device)
            grad[:n] = p.grad.reshape(-1)
            answer = self.rules.grad_all_reduce(grad, *self.sync_collectives(unit))
            p.grad.copy_(answer[:n].to(p.grad.dtype).view_as(p.grad))

    def sync_collectives(self, unit: int) -> tuple[Callable, Callable]:
        """(reduce_scatter, all_gather) over the sync group, as a gradient all-reduce rule is given them."""
        from edit_lab.rules import RuleError

        R = self.mesh.replicas

        def flat(t: Any, what: str) -> torch.Tensor:
            if not isinstance(t, torch.Tensor) or not t.is_floating_point():
                raise RuleError(f"{what} was handed {type(t).__name__} {getattr(t, 'dtype', '')}, not a tensor of "
                                f"floating point numbers")
            return t.detach().reshape(-1).contiguous()

        def reduce_scatter(t: Any) -> torch.Tensor:
            t = flat(t, "reduce_scatter")
            if t.numel() % R:
                raise RuleError(f"reduce_scatter was handed {t.numel()} values, which {R} replicas cannot split evenly")
            out = torch.empty(t.numel() // R, dtype=t.dtype, device=t.device)
            self.comm.reduce_scatter(out, t, group="sync", kind="grad_all_reduce", unit=unit, mean=True)
            return out

        def all_gather(t: Any) -> torch.Tensor:
            t = flat(t, "all_gather")
            out = torch.empty(t.numel() * R, dtype=t.dtype, device=t.device)
            self.comm.all_gather(out, t, group="sync", kind="grad_all_reduce", unit=unit)
            return out

        return reduce_scatter, all_gather
