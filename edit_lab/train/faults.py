"""Failures on purpose, and the one guard against a silent one (a non-finite loss).

Why inject faults at all: a teaching lab has to *show* that a run with a broken rank ends quickly,
names the rank and leaves no process behind, and the tests have to prove it. Each kind exercises a
different path of the launcher:

- ``raise``: the rank raises a Python exception -> it writes its traceback and exits non-zero.
- ``kill``:  the rank SIGKILLs itself -> no traceback at all, only an exit by signal.
- ``hang``:  the rank sleeps forever inside the step -> its peers block in a collective until the
  collective timeout (``timeout_s``) ends them; the launcher must blame the rank that never arrived.
- ``nan``:   the rank's loss becomes NaN -> the pseudo-gradient penalty of EDiT / A-EDiT excludes that
  replica; every other method stops with ``FloatingPointError`` (see `check_finite`) rather than
  averaging NaN into every replica.

A whole replica fails with ``fault_replica`` (``kill`` or ``hang``, every rank of it at
``fault_replica_step``): the unit of failure survival (`edit_lab.core.survival`) trains through. Only the
replica's first life fails: its replacement (``life`` > 0) trains on. On the virtual clock the replica's threads
raise `ReplicaDeath` instead (a SIGKILL would end the caller's process).

The worker calls `inject` at the start of each step and `maybe_poison_loss` + `check_finite` right
after the forward; with the defaults (``fault_rank=-1``) all three are no-ops.
"""

from __future__ import annotations

import math
import os
import signal
import sys
import time
from typing import TYPE_CHECKING, Any

from edit_lab.config import FAULT_KINDS, deaths
from edit_lab.registry import capabilities

if TYPE_CHECKING:
    import torch

    from edit_lab.config import RunConfig

__all__ = ["FAULT_KINDS", "InjectedFault", "ReplicaDeath", "UnitFault", "check_finite", "inject", "maybe_poison_loss", "unit_fault"]


class InjectedFault(RuntimeError):
    """The exception a ``fault_kind="raise"`` rank raises (so tests can tell it from a real bug)."""


class ReplicaDeath(BaseException):
    """A replica's death on the virtual clock (`clock='virtual'`), where every rank is a thread of the caller's
    process and a SIGKILL would take the caller with it: the rank's thread ends with this (a BaseException, so
    that no `except Exception` of the training code, survival's included, mistakes it for a failed collective),
    and the fabric makes its peers' collectives fail as gloo's do (`clock/survive_virtual.py`)."""

    def __init__(self, kind: str, step: int) -> None:
        super().__init__(f"replica death ({kind}) at step {step} on the virtual clock")
        self.kind, self.step = kind, step


def _fires(cfg: "RunConfig", rank: int, step: int) -> bool:
    return cfg.trouble.fault_rank == rank and cfg.trouble.fault_step == step


def inject(cfg: "RunConfig", rank: int, step: int, life: int = 0) -> None:
    """At the start of a step: raise, die or hang if this rank and step are the configured fault.

    ("nan" acts on the loss instead: see `maybe_poison_loss`.) `life`: 0 for a rank of the run's start, n for
    the n-th replacement of its replica (`fault_replica` strikes the first life only).
    """
    if (deaths.life_dying_at(cfg, rank // cfg.shards, step) == life
            and not (life == 0 and step == cfg.trouble.fault_replica_step and cfg.trouble.fault_replica_unit >= 0)):
        _fail_replica(cfg, rank, step)
    if not _fires(cfg, rank, step) or cfg.trouble.fault_kind == "nan":
        return
    # one line in rank{rank}.log, so whoever reads the log knows this failure was on purpose
    print(f"edit_lab.train.faults: rank {rank} will {cfg.trouble.fault_kind} at the start of step {step} on purpose",
          file=sys.stderr, flush=True)
    if cfg.trouble.fault_kind == "raise":
        raise InjectedFault(f"fault injected on rank {rank} at step {step} (fault_kind='raise')")
    if cfg.trouble.fault_kind == "kill":
        os.kill(os.getpid(), signal.SIGKILL)
    if cfg.trouble.fault_kind == "hang":
        while True:  # peers block in their next collective with this rank until `timeout_s`
            time.sleep(3600)


def _fail_replica(cfg: "RunConfig", rank: int, step: int) -> None:
    """This rank's part of its replica's death (`fault_replica_kind`): SIGKILL itself, or sleep forever."""
    print(f"edit_lab.train.faults: rank {rank} of replica {rank // cfg.shards} will {cfg.trouble.fault_replica_kind} at the "
          f"start of step {step} on purpose", file=sys.stderr, flush=True)
    if cfg.clock.kind == "virtual":
        raise ReplicaDeath(cfg.trouble.fault_replica_kind, step)
    if cfg.trouble.fault_replica_kind == "kill":
        os.kill(os.getpid(), signal.SIGKILL)
    while True:  # the survivors' sync with this replica waits until `timeout_s`; the launcher then fences it
        time.sleep(3600)


class UnitFault:
    """The method's hooks, but this replica fails right before unit `fault_replica_unit` of step
    `fault_replica_step` (a death in the middle of EDiT's layer-wise sync: its peers have stepped the units before)."""

    def __init__(self, cfg: "RunConfig", rank: int, method: Any) -> None:
        self.cfg, self.rank, self.method = cfg, rank, method

    def __getattr__(self, name: str) -> Any:
        return getattr(self.method, name)

    def pre_unit(self, unit: int) -> None:
        if unit == self.cfg.trouble.fault_replica_unit and self.method.log.step == self.cfg.trouble.fault_replica_step:
            _fail_replica(self.cfg, self.rank, self.method.log.step)
        self.method.pre_unit(unit)


def unit_fault(cfg: "RunConfig", rank: int, life: int, method: Any) -> Any:
    """The hooks the forward calls: the method, or `UnitFault` around it on the replica that fails inside a step."""
    if life == 0 and cfg.trouble.fault_replica_unit >= 0 and 0 <= cfg.trouble.fault_replica == rank // cfg.shards:
        return UnitFault(cfg, rank, method)
    return method


def maybe_poison_loss(cfg: "RunConfig", rank: int, step: int, loss: "torch.Tensor") -> "torch.Tensor":
    """Right after the forward: the loss times NaN if this rank and step are a ``nan`` fault.

    Multiplying (rather than replacing) keeps the autograd graph, so the backward runs as it would
    with a real numerical blow-up and the gradients become NaN too.
    """
    if cfg.trouble.fault_kind == "nan" and _fires(cfg, rank, step):
        return loss * float("nan")
    return loss


def check_finite(cfg: "RunConfig", rank: int, step: int, loss: "torch.Tensor") -> None:
    """Stop the run with a clear message when the loss is NaN or infinite and nothing would exclude it.

    With ``sync`` (and every method without the penalty) the next gradient all-reduce or sync would
    average the NaN into every replica and the run would go on training a dead model. EDiT / A-EDiT
    with ``penalty_anomaly`` on treat that replica's pseudo-gradient as an anomaly and drop it, so the
    run is allowed to continue there.
    """
    if capabilities(cfg.method).has_penalty and cfg.penalty.anomaly:  # it can exclude the replica
        return
    value = float(loss.detach())
    if not math.isfinite(value):
        raise FloatingPointError(
            f"rank {rank}: the loss is {value} at step {step} (method {cfg.method!r}, no penalty to exclude this "
            f"replica); stopping instead of spreading it into every replica"
        )
