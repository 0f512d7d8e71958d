"""The gradient all-reduce (`RunConfig.rules.grad_all_reduce`, notebook 01), and the stand-in replicas it is probed on.

Part of `edit_lab.rules` (a reader's own rule, run by every rank), which re-exports every name here and says
how the rules work."""

from __future__ import annotations

import threading
from collections.abc import Callable, Sequence

from edit_lab.rules.source import RuleError, _shown, load_rule


GRAD_ALL_REDUCE_SIGNATURE = "fn(grad, reduce_scatter, all_gather) -> the gradient after the all-reduce"


def grad_all_reduce(source: str) -> Callable:
    """The gradient all-reduce rule as every rank calls it, once per unit and step (`methods.base.Method`):
    `reduce(grad, reduce_scatter, all_gather) -> tensor`, the reader's answer checked to be a floating tensor of
    grad's shape (what it does to `grad` in place does not count: it is handed a copy).

    `grad`: this rank's flat gradient shard of the unit, zero-padded to a multiple of the replicas R;
    `reduce_scatter(t)`: this rank's slice (1/R of `t`, in replica order) of the **mean** over the sync group of
    every member's `t`; `all_gather(t)`: every member's `t`, concatenated in replica order. `torch` is provided
    to the rule as `math` is."""
    import torch

    fn = load_rule(source, "gradient all-reduce rule", names={"torch": torch})

    def reduce(grad, reduce_scatter: Callable, all_gather: Callable):
        got = fn(grad.clone(), reduce_scatter, all_gather)
        if not isinstance(got, torch.Tensor):
            raise RuleError(f"it returned {_shown(got)}, not a tensor")
        if not got.is_floating_point():
            raise RuleError(f"it returned a tensor of {got.dtype}, not of floating point numbers")
        if tuple(got.shape) != tuple(grad.shape):
            part = (f" ({grad.numel() // got.numel()}× too few values: a reduce-scatter leaves each rank only its "
                    f"slice of the mean, and every rank needs all of it)"
                    if 0 < got.numel() < grad.numel() and grad.numel() % got.numel() == 0 else "")
            raise RuleError(f"it returned shape {tuple(got.shape)} for a gradient of shape {tuple(grad.shape)}{part}")
        return got.detach()

    return reduce


class _GroupError(RuleError):
    """Raised by a stand-in collective on every member at once (they called it differently): nobody is left
    waiting, so no member's wait needs to be broken."""


class StandInGroup:
    """The sync group's two collectives for `n` replicas that are threads of this process: what validation probes
    a gradient all-reduce rule with, before any process starts (`grad_all_reduce_problem`).

    Each member calls `reduce_scatter(rank)(t)` / `all_gather(rank)(t)` as the run's ranks call theirs; a call
    returns once every member has made it, with the same answers as the run's collectives (the mean, sliced)."""

    def __init__(self, n: int, timeout_s: float = 5.0) -> None:
        import threading

        self.n = n
        self.barrier = threading.Barrier(n, timeout=timeout_s)
        self.inbox: list = [None] * n

    def _exchange(self, rank: int, t: object, what: str) -> list:
        import torch

        if not isinstance(t, torch.Tensor):
            raise RuleError(f"{what} was handed {_shown(t)}, not a tensor")
        self.inbox[rank] = (what, t.detach().reshape(-1).clone())
        self.barrier.wait()
        called, ins = zip(*self.inbox)
        self.barrier.wait()  # everyone has read: the next collective may overwrite the inbox
        if len(set(called)) > 1:
            raise _GroupError(f"the replicas called different collectives at once ({', '.join(called)}, in replica "
                            f"order; a run would hang): every rank must call the same ones, in the same order")
        sizes = sorted({x.numel() for x in ins})
        if len(sizes) > 1:
            raise _GroupError(f"{what} was handed tensors of different sizes by the replicas ({sizes})")
        return ins

    def reduce_scatter(self, rank: int) -> Callable:
        def reduce_scatter(t):
            import torch

            ins = self._exchange(rank, t, "reduce_scatter")
            k, left = divmod(ins[0].numel(), self.n)
            if left:
                raise _GroupError(f"reduce_scatter was handed {ins[0].numel()} values, which {self.n} replicas cannot "
                                f"split evenly")
            return torch.stack(ins).mean(0)[rank * k:(rank + 1) * k].clone()

        return reduce_scatter

    def all_gather(self, rank: int) -> Callable:
        def all_gather(t):
            import torch

            return torch.cat(self._exchange(rank, t, "all_gather"))

        return all_gather


def on_stand_ins(rule: Callable, grads: Sequence, timeout_s: float = 5.0) -> list:
    """`rule(grad, reduce_scatter, all_gather)` called by every replica of a `StandInGroup` (one thread each, one
    gradient each): their answers, or a RuleError naming the replica whose own call failed."""
    import threading

    n = len(grads)
    group = StandInGroup(n, timeout_s)
    answers: list = [None] * n
    errors: list[BaseException | None] = [None] * n

    def member(r: int) -> None:
        try:
            answers[r] = rule(grads[r], group.reduce_scatter(r), group.all_gather(r))
        except BaseException as e:  # noqa: BLE001 - reported below, with the replica
            errors[r] = e
            if not isinstance(e, _GroupError):  # the others raised it too; else they leave the collective they wait in
                group.barrier.abort()

    threads = [threading.Thread(target=member, args=(r,), daemon=True) for r in range(n)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(3 * timeout_s)
    if any(t.is_alive() for t in threads):
        group.barrier.abort()
        raise RuleError(f"it did not return within {3 * timeout_s:g} s")
    own = [(r, e) for r, e in enumerate(errors) if e is not None and not isinstance(e, threading.BrokenBarrierError)]
    if own:
        r, e = own[0]
        raise RuleError(f"on replica {r} of {n}: {e if isinstance(e, RuleError) else f'{type(e).__name__}: {e}'}") from e
    if any(e is not None for e in errors):
        raise RuleError("the replicas called the collectives a different number of times (a run would hang): every "
                        "rank must call the same collectives, in the same order")
    return answers


def grad_all_reduce_problem(source: str, replicas: int = 2) -> str | None:
    """Why the gradient all-reduce rule cannot run (None when it can), found by calling it on `replicas` stand-in
    replicas (threads of this process, `StandInGroup`) for gradients of 4·R and 6·R values, before any process
    starts: it must not fail, and must return a floating tensor of the gradient's shape on every replica. Its
    values are not judged here: a rule that answers the wrong numbers runs (the exercise's check judges the run)."""
    try:
        import torch

        rule = grad_all_reduce(source)
        n = max(2, int(replicas))
        gen = torch.Generator().manual_seed(0)
        for length in (4 * n, 6 * n):
            on_stand_ins(rule, [torch.randn(length, generator=gen) for _ in range(n)])
    except Exception as e:  # noqa: BLE001 - whatever the reader's code raises is the reason
        return f"{GRAD_ALL_REDUCE_SIGNATURE}; it fails: {type(e).__name__}: {e}"
    return None
