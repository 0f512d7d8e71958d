"""Checks for notebook 05 (the pseudo-gradient penalty): softmax weights, when the detector is armed, clipping.

The reference values are computed with the library's own pure functions (edit_lab.penalty), the same
ones every rank calls during a sync, and match docs/edit-method.md §8.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from typing import Any

from . import as_number, as_numbers, correct, unanswered


def first_armed_step(warmup: int, interval: int, arming: int) -> int:
    """The step whose sync is the first where the detector may call an outlier.

    Syncs at W+τ, W+2τ, … (W only creates the anchors); each one updates the detector once, and
    it is armed once it holds E values, i.e. at the (E+1)-th sync: W + (E+1)·τ.
    """
    return warmup + (arming + 1) * interval


def check_softmax_weights(answer: Any, norms: Sequence[float] = (1.0, 2.0), temperature: float = 1.0) -> bool:
    """Softmax weights over replicas of −G/T for the norms `norms` (no anomalous replica)."""
    from ..penalty import softmax_weights

    if unanswered(answer, "w_r = exp(−G_r/T) / Σ_s exp(−G_s/T): the smaller norm gets the larger weight, and the "
                          "weights sum to 1."):
        return False
    want = softmax_weights(list(norms), temperature, [False] * len(norms))
    got = as_numbers(answer, len(want), "one weight per replica")
    assert all(abs(g - w) <= 1e-3 for g, w in zip(got, want)), (
        f"{got} is not it. exp(−1) = {math.exp(-1):.4f} and exp(−2) = {math.exp(-2):.4f}; divide each by their "
        f"sum. (If your weights favour the replica with the larger norm, you used +G/T instead of −G/T.)")
    return correct(f"Correct: {[round(w, 7) for w in want]}. The replica that moved less gets more say; an "
                   f"outlier would get exactly 0 and the others would be renormalised.")


def check_first_armed_step(answer: Any, warmup: int = 4, interval: int = 2, arming: int = 4) -> bool:
    """First sync step at which the detector (arming period `arming` syncs) may call an outlier."""
    if unanswered(answer, "list the sync steps: W+τ, W+2τ, …; each updates the detector once, and it needs E "
                          "values before it judges one."):
        return False
    want = first_armed_step(warmup, interval, arming)
    syncs = [warmup + k * interval for k in range(1, arming + 2)]
    assert as_number(answer, "a step number") == want, (
        f"step {answer} is not it. The syncs are at steps {', '.join(map(str, syncs))}, … (step {warmup} only "
        f"creates the anchors and feeds no detector). The first {arming} syncs fill the history; the one after "
        f"them is the first that is judged.")
    return correct(f"Correct: step {want} = W + (E+1)·τ = {warmup} + {arming + 1}·{interval}. Before it, z is 0 "
                   f"and nothing can be an outlier (a NaN or infinite norm excepted).")


def check_clip_factor(answer: Any, norm: float = 20.0, clip_norm: float = 10.0) -> bool:
    """The factor min(1, φ/(n + 1e-6)) applied to an aggregated pseudo-gradient of norm `norm`."""
    from ..penalty import clip_factor

    if unanswered(answer, "clipping rescales the aggregate so that its norm is at most φ: factor = min(1, φ / n)."):
        return False
    want = clip_factor(norm, clip_norm)
    assert abs(as_number(answer) - want) <= 1e-4, (
        f"{answer} is not it. The aggregate has norm {norm:g}; after clipping it must have norm {clip_norm:g}, "
        f"so it is multiplied by {clip_norm:g}/{norm:g} (a norm below φ would be left alone: factor 1).")
    return correct(f"Correct: {clip_norm:g}/({norm:g} + 1e-6) ≈ {want:.7f}. The direction is kept, only the "
                   f"length is bounded, and it is the aggregate that is clipped, not each replica's Δ.")
