"""Checks for notebook 05 (the pseudo-gradient penalty): the reader's softmax weights, when the detector is armed, clipping.

The reference values are computed with the library's own pure functions (edit_lab.penalty), the same
ones every rank calls during a sync, and match docs/edit-method.md §8.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence
from typing import Any

from . import CheckResult, correct, judge_number, not_a_function, not_yet, read_numbers, short_error, show


def first_armed_step(warmup: int, interval: int, arming: int) -> int:
    """The step whose sync is the first where the detector may call an outlier.

    Syncs at W+τ, W+2τ, … (W only creates the anchors); each one updates the detector once, and
    it is armed once it holds E values, i.e. at the (E+1)-th sync: W + (E+1)·τ.
    """
    return warmup + (arming + 1) * interval


def check_softmax_function(fn: Callable[[Sequence[float], float, Sequence[bool]], Sequence[float] | None]
                           ) -> CheckResult:
    """Test the reader's `fn(norms, temperature, anomalous)` against the library's `penalty.softmax_weights`.

    Cases: two healthy replicas, a spike (0.3 against 80), an outlier among three, every replica an
    outlier, and norms of 1000 and 1001, where exp(−G/T) underflows to 0 unless the smallest norm is
    subtracted first (as the library does). A wrong weight prints "Not yet" naming the case; never raises.
    """
    from ..penalty import softmax_weights

    if (refused := not_a_function(fn, "fn(norms, temperature, anomalous) -> one weight per replica")) is not None:
        return refused
    cases = [("two healthy replicas", [1.0, 2.0], 1.0, [False, False]),
             ("a temperature of 0.5", [1.0, 2.0], 0.5, [False, False]),
             ("a spiked replica", [0.3, 80.0], 1.0, [False, False]),
             ("replica 1 flagged as an outlier", [0.3, 80.0, 0.35], 1.0, [False, True, False]),
             ("every replica flagged", [1.0, 2.0], 1.0, [True, True]),
             ("large norms, 1000 and 1001", [1000.0, 1001.0], 1.0, [False, False])]
    for name, norms, t, anomalous in cases:
        hint = (" exp(−1000) underflows to 0 and 0/0 is nan: subtract the smallest non-outlier norm from every "
                "norm first (it changes no weight)." if "1000" in name else
                " An outlier gets weight 0 and the others share 1; if every replica is an outlier, every weight "
                "is 0." if any(anomalous) else " w_r = exp(−G_r/T) / Σ_s exp(−G_s/T).")
        try:
            got = fn(list(norms), t, list(anomalous))
        except ZeroDivisionError:
            return not_yet(f"{name}: your function divides by zero.{hint}")
        except Exception as exc:  # the reader's code: explain, do not crash the notebook
            return not_yet(f"{name}: your function raised {short_error(exc)}.{hint}")
        if got is None:
            return not_yet("your function returns None; return one weight per replica.")
        want = softmax_weights(norms, t, anomalous)
        weights = read_numbers(got, nan_ok=True)  # a nan weight is a wrong weight, with the hint
        if weights is None:
            return not_yet(f"{name}: {show(got)} is not a list of numbers; return one weight per replica.")
        if len(weights) != len(want):
            return not_yet(f"{name}: {len(weights)} weights for {len(want)} replicas; return one weight per replica.")
        if not all(math.isclose(g, w, rel_tol=1e-6, abs_tol=1e-9) for g, w in zip(weights, want)):
            return not_yet(f"{name}: norms {norms}, T = {t:g}, outliers {anomalous}: your weights {weights}, "
                           f"the library's {want}.{hint}")
    return correct("Your softmax weights match edit_lab.penalty.softmax_weights in every case, the underflow "
                   "included: the replica that moved less gets more say, an outlier gets nothing.")


def check_first_armed_step(answer: Any, warmup: int = 4, interval: int = 2, arming: int = 4) -> CheckResult:
    """First sync step at which the detector (arming period `arming` syncs) may call an outlier."""
    want = first_armed_step(warmup, interval, arming)
    syncs = [warmup + k * interval for k in range(1, arming + 2)]
    return judge_number(
        answer, want, what="a step number (a whole number)", whole=True,
        hint=("list the sync steps: W+τ, W+2τ, …; each updates the detector once, and it needs E values before "
              "it judges one."),
        why=(f"The syncs are at steps {', '.join(map(str, syncs))}, … (step {warmup} only creates the anchors and "
             f"feeds no detector). The first {arming} syncs fill the history; the one after them is the first that "
             f"is judged."),
        right=(f"Correct: step {want} = W + (E+1)·τ = {warmup} + {arming + 1}·{interval}. Before it, z is 0 and "
               f"nothing can be an outlier (a NaN or infinite norm excepted)."))


def check_clip_factor(answer: Any, norm: float = 20.0, clip_norm: float = 10.0) -> CheckResult:
    """The factor min(1, φ/(n + 1e-6)) applied to an aggregated pseudo-gradient of norm `norm`."""
    from ..penalty import clip_factor

    want = clip_factor(norm, clip_norm)
    return judge_number(
        answer, want, what="a factor between 0 and 1", tol=1e-4,
        hint="clipping rescales the aggregate so that its norm is at most φ: factor = min(1, φ / n).",
        why=(f"The aggregate has norm {norm:g}; after clipping it must have norm {clip_norm:g}, so it "
             f"is multiplied by {clip_norm:g}/{norm:g} (a norm below φ would be left alone: factor 1)."),
        right=(f"Correct: {clip_norm:g}/({norm:g} + 1e-6) ≈ {want:.7f}. The direction is kept, only the "
               f"length is bounded, and it is the aggregate that is clipped, not each replica's Δ."))
