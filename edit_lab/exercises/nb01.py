"""Checks for notebook 01 (synchronous data parallel): an all-reduce built from two collectives, and what a
straggler costs.

Synchronous training all-reduces every gradient shard over the sync group every step, so the
slowest replica sets everybody's pace: the others stand blocked in that all-reduce. The sizes
(`model_parameters`, `sharded_values`) are shared with the later notebooks' checks.
"""

from __future__ import annotations

from typing import Any

from . import CheckResult, correct, judge_number, not_a_function, not_answered, not_yet, short_error, show

BYTES_PER_VALUE = 4  # float32 gradients


def model_parameters(model: str) -> int:
    """P: the model's parameter count (from its size, without building it)."""
    from ..model import get_size

    return get_size(model).num_params()


def sharded_values(model: str, shards: int) -> int:
    """Values one rank holds of the whole model: its shard of every unit's buffer, padded to a multiple of S
    (as edit_lab.sharding.UnitLayout pads it)."""
    from ..model import get_size

    size = get_size(model)
    units = [size.root_params()] + [size.block_params()] * size.n_layers
    return sum(-(-n // shards) for n in units)


def check_throughput_fraction(answer: Any, replicas: int = 8, factor: float = 3.0) -> CheckResult:
    """Fraction of the straggler-free tokens/s that `sync` reaches with one replica `factor`× slower."""
    want = 1.0 / factor
    return judge_number(
        answer, want, what="a fraction between 0 and 1", tol=0.01, unit="fraction",
        hint="every step lasts as long as the slowest replica's step; the number of replicas does not enter.",
        named=[(lambda got: abs(got - factor) <= 0.01,
                f"is the slowdown factor itself; the question asks what fraction of the straggler-free tokens/s "
                f"is left, a number between 0 and 1.")],
        why=(f"Each step every one of the {replicas} replicas waits for the slowest, which takes "
             f"{factor:g}× as long, so all of them make 1/{factor:g} of their progress: one slow replica out of "
             f"{replicas} costs as much as all of them being slow."),
        right=(f"Correct: 1/{factor:g} ≈ {want:.3f}, whether {replicas} replicas or 2: synchronous training "
               f"runs at the slowest replica's pace."))


# --- a code exercise: all-reduce = reduce-scatter, then all-gather ------------------------------------


def reference_all_reduce_mean(grads: list) -> list:
    """What the sync group's gradient all-reduce gives every rank: the element-wise mean of all inputs."""
    import torch

    mean = torch.stack([g.detach().to(torch.float64) for g in grads]).mean(0)
    return [mean.clone() for _ in grads]


def check_all_reduce_mean(fn: Any) -> CheckResult:
    """Does `fn(grads) -> list of tensors` give every rank the mean of `grads`, as the lab's all-reduce does?

    Tried on groups of 2, 3 and 4 ranks with tensors whose length the group size divides. Never raises:
    the notebook ships `fn` wrong on purpose; a wrong one prints "Not yet" with the reason (a falsy result).
    """
    import torch

    if (refused := not_a_function(fn, "fn(grads) -> list of tensors, one per rank")) is not None:
        return refused
    gen = torch.Generator().manual_seed(0)
    for ranks in (2, 3, 4):
        grads = [torch.randn(4 * ranks, generator=gen, dtype=torch.float64) for _ in range(ranks)]
        inputs = [g.clone() for g in grads]
        want = reference_all_reduce_mean(grads)[0]
        try:
            got = fn(inputs)
        except Exception as exc:  # the reader's code: any failure is an answer to explain, not a crash
            return not_yet(f"with {ranks} ranks your function raised {short_error(exc)}")
        if not isinstance(got, (list, tuple)) or len(got) != ranks:
            return not_yet(f"with {ranks} ranks, return a list of {ranks} tensors (one per rank), "
                           f"not {type(got).__name__}"
                           + (f" of length {len(got)}" if isinstance(got, (list, tuple)) else ""))
        try:
            got = [torch.as_tensor(t, dtype=torch.float64).reshape(-1) for t in got]
        except Exception as exc:
            return not_yet(f"with {ranks} ranks your function returned {show(got)}, which is not a list of tensors "
                           f"({short_error(exc)}).")
        if any(t.numel() != want.numel() for t in got):
            return not_yet(f"every rank must receive the whole tensor ({want.numel()} values); you gave "
                           f"{[t.numel() for t in got]}: an all-gather is missing after the reduce-scatter.")
        if all(torch.allclose(t, g) for t, g in zip(got, grads)):  # the notebook's shipped TODO
            return not_answered("every rank still holds its own gradient (the shipped TODO): nothing is exchanged "
                                "yet, and the replicas would take different optimizer steps and drift apart. Use "
                                "reduce_scatter_mean, then all_gather.")
        total = torch.stack(grads).sum(0)
        if all(torch.allclose(t, total) for t in got):
            return not_yet(f"that is the sum over the {ranks} ranks; the lab averages (divides by the group size), "
                           f"so the step does not grow with the number of replicas.")
        if not all(torch.allclose(t, got[0]) for t in got):
            return not_yet("the ranks disagree: after an all-reduce every rank holds the very same values.")
        if not torch.allclose(got[0], want):
            return not_yet(f"with {ranks} ranks rank 0 got {got[0][:3].tolist()} …, "
                           f"the mean is {want[:3].tolist()} ….")
    return correct("Correct: a reduce-scatter then an all-gather is an all-reduce. Each rank sends and receives "
                   "about 2·(n−1)/n of the tensor, whatever the number of ranks n: that is how a ring all-reduce "
                   "works.")


def check_slowdown_prediction(prediction: Any, measured: float, factor: float) -> CheckResult:
    """Predict, then run: tokens/s with one replica `factor`× slower, as a fraction of the baseline's."""
    from . import compare_prediction

    why = (f"Every step lasts as long as the straggler's, so the fraction is near 1/{factor:g} = {1 / factor:.2f}; "
           f"above that, since a straggler stretches only its own compute (forward, backward, optimizer), never "
           f"a collective, unless ranks sharing the cores push it down.")
    return compare_prediction(prediction, measured, what="tokens/s with the straggler ÷ without", why=why,
                              rel_tol=0.15)
