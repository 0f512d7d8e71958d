"""One rank's rules: the eight functions a reader may replace, each the library's own unless `RunConfig.rules` says.

Why one object: the core calls `rules.weighting(...)`, `rules.outer_step(...)`, ... and never asks whether a reader
gave one, so a rule and the library's function take the same path through the code, and the simulator builds the
same object (`Rules.from_config`) to take the same decisions. Built once per process and config (cached): every
component of a rank that asks gets this one object, and a rule's source is compiled once.

Three defaults are not one call but a path the library keeps for speed (they are marked `builtin`, and the
component that owns the path checks the mark once, when it is built, never per call): torch's fused SGD for the
outer step (`outer.OuterState`), the bucketed, overlapped gradient all-reduce (`methods.base.Method`) and no pause
(`train.stragglers.StragglerModel`, which measures a step's compute only for a pause that needs it). Each marked
default is still a callable doing what its path does, so it can be called and compared (tests/unit/test_rules_seam.py).
The sync groups' default is the mesh's columns; marked too, so the mesh keeps its own groups (`Mesh.build`).
"""

from __future__ import annotations

import functools
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from edit_lab.protocol import fragment_landing
from edit_lab.rules.donor_rule import Donor, donor_of
from edit_lab.rules.fragment_schedule_rule import FragmentSchedule, fragment_schedule_of
from edit_lab.rules.grad_all_reduce_rule import grad_all_reduce
from edit_lab.rules.outer_step_rule import outer_step
from edit_lab.rules.straggler_rule import Straggler, straggler
from edit_lab.rules.sync_group_rule import sync_groups
from edit_lab.rules.sync_schedule_rule import sync_schedule_plan
from edit_lab.rules.weighting_rule import Weighting, softmax_weights, weighting

Plan = list[list[tuple[str, int]]]  # per unit, the (kind, unit) operations of its pre-forward during a sync


def builtin(fn: Callable) -> Callable:
    """Mark `fn` as the library's own path (the owning component then keeps its fast path)."""
    fn.builtin = True  # type: ignore[attr-defined]
    return fn


def is_builtin(fn: Callable) -> bool:
    """Is `fn` a default marked with `builtin` (not a reader's rule)?"""
    return getattr(fn, "builtin", False)


@builtin
def no_pause(step: int, replica: int, compute_s: float) -> float:
    """The library's straggler rule: no replica pauses beyond the configured stragglers."""
    return 0.0


def library_weighting(enabled: bool) -> Weighting:
    """`penalty.softmax_weights` (the plain mean when weighting is off), as a rule is called."""
    return functools.partial(softmax_weights, enabled=enabled)


def torch_sgd(nesterov: bool) -> Callable:
    """torch's SGD step on one anchor shard, as a rule is called (`outer.OuterState` runs its fused optimizer)."""
    @builtin
    def step(anchor: Any, delta_bar: Any, buf: Any, lr: float, momentum: float) -> tuple[Any, Any]:
        import torch

        a = torch.nn.Parameter(anchor.detach().clone())
        a.grad = delta_bar.detach().clone()
        opt = torch.optim.SGD([a], lr=lr, momentum=momentum, nesterov=nesterov and momentum > 0)
        if momentum > 0:  # torch's first step starts its buffer at Δ̄, which momentum·0 + Δ̄ equals
            opt.state[a]["momentum_buffer"] = buf.detach().clone()
        opt.step()
        new_buf = opt.state[a].get("momentum_buffer", torch.zeros_like(anchor))
        return a.detach(), new_buf

    return step


@builtin
def mesh_columns(shards: int, replicas: int) -> list[list[int]]:
    """The mesh's own sync groups: the same shard index in every replica (`core.mesh.Mesh`)."""
    return [[r * shards + s for r in range(replicas)] for s in range(shards)]


# region edit-prefetch
def prefetch_plan(prefetch: bool) -> Callable[[int], Plan]:
    """The library's sync order: each unit issued one unit ahead (prefetch) or just before its own wait."""
    def plan(n_units: int) -> Plan:
        if not prefetch:
            return [[("issue", u), ("wait", u)] for u in range(n_units)]
        ahead = [[("issue", u + 1)] if u + 1 < n_units else [] for u in range(n_units)]
        return [([("issue", 0)] if u == 0 else []) + ahead[u] + [("wait", u)] for u in range(n_units)]

    return plan
# endregion edit-prefetch


@builtin
def all_reduce(grad: Any, reduce_scatter: Callable, all_gather: Callable) -> Any:
    """The built-in gradient all-reduce's answer: the mean over the sync group (`Method` issues it bucketed)."""
    return all_gather(reduce_scatter(grad))


@dataclass(frozen=True)
class Rules:
    """The functions one rank calls where a reader may replace the library's (module docstring)."""

    weighting: Weighting  # (norms, temperature, anomalous) -> weights: EDiT/A-EDiT's aggregation
    straggler: Straggler  # (step, replica, compute_s) -> seconds of pause after that step
    outer_step: Callable  # (anchor, delta_bar, buf, lr, momentum) -> (anchor, buf)
    sync_groups: Callable[[int, int], list[list[int]]]  # (shards, replicas) -> every sync group
    sync_plan: Callable[[int], Plan]  # n_units -> per unit, the sync's issues and waits in its pre-forward
    grad_all_reduce: Callable  # (grad, reduce_scatter, all_gather) -> the gradient after the all-reduce
    fragment_landing: FragmentSchedule  # (step, warmup, interval, fragments) -> fragment landing, or None
    donor: Donor  # (members, joined) -> the replica that hands a replacement its state

    @classmethod
    def from_config(cls, cfg: Any) -> "Rules":
        """This config's rules, each compiled from its source or the library's own (cached per process)."""
        return _compiled(cfg.rules, cfg.schedule.prefetch, cfg.penalty.weighting, cfg.outer.nesterov)


@functools.lru_cache(maxsize=16)
def _compiled(src: Any, prefetch: bool, weigh: bool, nesterov: bool) -> Rules:
    """`Rules.from_config`'s work, once per (rule sources, knobs the defaults read)."""
    def given(source: str | None, compile: Callable, default: Callable) -> Callable:
        return default if source is None else compile(source)

    return Rules(
        weighting=given(src.weighting, weighting, library_weighting(weigh)),
        straggler=given(src.straggler, straggler, no_pause),
        outer_step=given(src.outer_step, outer_step, torch_sgd(nesterov)),
        sync_groups=given(src.sync_group, lambda s: functools.partial(sync_groups, s), mesh_columns),
        sync_plan=given(src.sync_schedule, lambda s: functools.partial(sync_schedule_plan, s), prefetch_plan(prefetch)),
        grad_all_reduce=given(src.grad_all_reduce, grad_all_reduce, all_reduce),
        fragment_landing=fragment_schedule_of(src.fragment_schedule),
        donor=donor_of(src.donor),
    )


__all__ = ["Plan", "Rules", "all_reduce", "builtin", "fragment_landing", "is_builtin", "library_weighting",
           "mesh_columns", "no_pause", "prefetch_plan", "torch_sgd"]
