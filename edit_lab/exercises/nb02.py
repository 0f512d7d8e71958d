"""Checks for notebook 02 (Local SGD and DiLoCo): the outer Nesterov step, the sync schedule, the bytes saved.

Nesterov's first outer step moves the anchor by lr·(1+μ)·Δ̄ (the momentum buffer starts at Δ̄ and
is looked ahead once more): `check_outer_step` runs the reader's step against the lab's
`OuterState`. The first sync that changes the model is at step W+τ (step W only creates the
anchors). A Local-SGD method sends one model shard over the sync group every τ steps instead of
one gradient shard every step.
"""

from __future__ import annotations

from typing import Any

from . import CheckResult, correct, judge_number, not_a_function, not_answered, not_yet, short_error, show


def nesterov_first_step(lr: float, momentum: float) -> float:
    """The factor of Δ̄ by which torch's SGD(nesterov=True) moves its parameter on its first step."""
    return lr * (1.0 + momentum)


def first_model_sync(warmup: int, interval: int) -> int:
    """The first step whose parameters come from a sync that changed the model: W + τ."""
    return warmup + interval


def check_first_sync_step(answer: Any, warmup: int = 3, interval: int = 2) -> CheckResult:
    """With W warm-up steps and sync interval τ, at the start of which step is the model first synced?"""
    want = first_model_sync(warmup, interval)
    return judge_number(
        answer, want, what="a step number (a whole number)", whole=True,
        hint=("steps 0…W−1 are synchronous; at step W the anchors are created (a = θ, nothing changes); "
              "then τ local steps."),
        why=(f"Steps 0…{warmup - 1} all-reduce gradients; the 'sync' at step {warmup} only copies θ into the "
             f"anchor; then each replica trains alone for τ={interval} steps, and the first sync that averages "
             f"anything comes at the start of the step after those."),
        right=f"Correct: step {want}; then {want + interval}, {want + 2 * interval}, …")


# --- a code exercise: the outer Nesterov step, checked against the lab's OuterState ---------------------


def check_outer_step(fn: Any, lr: float = 0.7, momentum: float = 0.8) -> CheckResult:
    """Does `fn(anchor, delta_bar, buf, lr, momentum) -> (new_anchor, new_buf)` move the anchor as the lab's
    outer optimizer does (`edit_lab.outer.OuterState`: torch's SGD with Nesterov momentum)?

    Three steps with changing Δ̄ on a 3-value anchor; `buf` starts at zeros. Never raises: the notebook
    ships `fn` wrong on purpose (heavy-ball fed Δ̄); a wrong one prints "Not yet" and why.
    """
    import torch

    from ..outer import OuterState

    if (refused := not_a_function(fn, "fn(anchor, delta_bar, buf, lr, momentum) -> (new_anchor, new_buf)")) is not None:
        return refused
    deltas = [torch.tensor([0.2, -0.1, 0.05]), torch.tensor([0.1, 0.1, -0.2]), torch.tensor([0.3, 0.0, 0.1])]
    a0 = torch.tensor([1.0, 2.0, 0.5])

    def trajectory(nesterov: bool, mu: float) -> list[torch.Tensor]:
        outer = OuterState([a0.clone()], lr=lr, momentum=mu, nesterov=nesterov)
        out = []
        for d in deltas:
            outer.step(0, d.clone())
            out.append(outer.anchors[0].detach().clone())
        return out

    want = trajectory(True, momentum)
    anchor, buf, got = a0.clone(), torch.zeros(3), []
    for k, d in enumerate(deltas, start=1):
        try:
            out = fn(anchor.clone(), d.clone(), buf.clone(), lr, momentum)
        except Exception as exc:  # the reader's code: explain, do not crash the notebook
            return not_yet(f"at step {k} your function raised {short_error(exc)}")
        try:
            anchor, buf = out
            anchor, buf = torch.as_tensor(anchor, dtype=torch.float32), torch.as_tensor(buf, dtype=torch.float32)
        except Exception:
            return not_yet(f"at step {k} your function returned {show(out)}; return the pair (new_anchor, new_buf), "
                           f"two tensors of {a0.numel()} values.")
        if anchor.shape != a0.shape or buf.shape != a0.shape:
            return not_yet(f"at step {k} your function returned a new anchor of shape {tuple(anchor.shape)} and a "
                           f"buffer of shape {tuple(buf.shape)}; both must have the anchor's shape {tuple(a0.shape)}.")
        got.append(anchor)

    def same(path: list[torch.Tensor]) -> bool:
        return all(torch.allclose(g, w, atol=1e-6) for g, w in zip(got, path))

    if not same(want):
        if same(trajectory(False, momentum)):  # the notebook's shipped step
            return not_answered("this is still heavy-ball momentum fed Δ̄: b ← μ·b + Δ̄, a ← a − lr·b (CO2's outer "
                                "step is heavy-ball too, fed a − x̄ = Δ̄ − lr·b). Nesterov looks ahead once more: "
                                "after b ← μ·b + Δ̄, a ← a − lr·(Δ̄ + μ·b).")
        if same(trajectory(False, 0.0)):
            return not_yet(f"that is plain SGD on Δ̄ (no momentum): the anchor moves by lr·Δ̄, "
                           f"{lr:g}× Δ̄ on the first "
                           f"step, where the lab's outer step moves by {nesterov_first_step(lr, momentum):.3g}×.")
        k = next(i for i, (g, w) in enumerate(zip(got, want)) if not torch.allclose(g, w, atol=1e-6))
        moved = float((a0[0] - got[0][0]) / deltas[0][0])
        return not_yet(f"after step {k + 1} the anchor is {[round(x, 4) for x in got[k].tolist()]}; the lab's "
                       f"OuterState has {[round(x, 4) for x in want[k].tolist()]} (your first step moved it by "
                       f"{moved:.3g}× Δ̄, the lab's by {lr * (1 + momentum):.3g}×).")
    return correct(f"Correct: three steps equal to edit_lab.outer.OuterState (torch's SGD, Nesterov, lr {lr:g}, "
                   f"μ {momentum:g}). The first moved the anchor by {lr * (1 + momentum):.3g}× Δ̄.")


def check_bytes_ratio_prediction(prediction: Any, measured: float, interval: int) -> CheckResult:
    """Predict, then run: how many times more sync-group bytes per step `sync` sends than DiLoCo after warm-up."""
    from . import compare_prediction

    why = (f"sync all-reduces one gradient shard every step; DiLoCo one parameter shard (the same size) every "
           f"τ = {interval} steps, the final sync included.")
    return compare_prediction(prediction, measured, what="sync's bytes per step ÷ DiLoCo's, after warm-up", why=why,
                              rel_tol=0.1)
