"""The penalty's weighting (`RunConfig.rules.weighting`, notebook 05).

Part of `edit_lab.rules` (a reader's own rule, run by every rank), which re-exports every name here and says
how the rules work. The library's own weighting, `softmax_weights`, lives here too: it is the rule's default
(`rules.Rules`), which the core (`core.penalty` re-exports it) calls as it would call a reader's."""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence

from edit_lab.detector import _check_positive
from edit_lab.rules.source import RuleError, load_rule


WEIGHTING_SIGNATURE = "fn(norms, temperature, anomalous) -> one weight per replica"

Weighting = Callable[[Sequence[float], float, Sequence[bool]], list[float]]


def weighting(source: str) -> Weighting:
    """The weighting rule as every rank calls it: its answer as floats, one per replica, each finite and >= 0."""
    fn = load_rule(source, "weighting rule")

    def weights(norms: Sequence[float], temperature: float, anomalous: Sequence[bool]) -> list[float]:
        got = fn(list(norms), temperature, list(anomalous))
        try:
            out = [float(w) for w in got]
        except TypeError as e:
            raise RuleError(f"the weighting rule returned {got!r}, not a list of numbers") from e
        if len(out) != len(norms):
            raise RuleError(f"the weighting rule returned {len(out)} weights for {len(norms)} replicas")
        if not all(math.isfinite(w) and w >= 0.0 for w in out):
            raise RuleError(f"the weighting rule returned {out}: every weight must be finite and >= 0")
        return out

    return weights


def weighting_problem(source: str) -> str | None:
    """Why the weighting rule cannot run (None when it can), found by calling it on two healthy replicas and on
    one flagged replica, before any process starts."""
    try:
        rule = weighting(source)
        rule([1.0, 2.0], 1.0, [False, False])
        rule([1.0, 2.0, 1.5], 1.0, [False, True, False])
    except Exception as e:  # noqa: BLE001 - whatever the reader's code raises is the reason
        return f"{WEIGHTING_SIGNATURE}; it fails: {type(e).__name__}: {e}"
    return None


def _check_replicas(norms: Sequence[float] | None, anomalous: Sequence[bool]) -> None:
    if len(anomalous) == 0:
        raise ValueError("need at least one replica")
    if norms is not None and len(norms) != len(anomalous):
        raise ValueError(f"got {len(norms)} norms for {len(anomalous)} anomaly flags; need one per replica")


# region softmax-weights
def softmax_weights(
    norms: Sequence[float],
    temperature: float,
    anomalous: Sequence[bool],
    enabled: bool = True,
) -> list[float]:
    """Aggregation weights of the replicas' pseudo-gradients for one unit (decision D2: used whenever enabled).

    enabled:  w_r = exp(−G_r/T) / Σ_{non-anomalous} exp(−G_s/T) for non-anomalous r, 0 for anomalous r.
              Computed as exp(−(G_r − G_min)/T) with G_min the smallest norm among the non-anomalous
              replicas, so the largest term is exactly 1 and nothing overflows or underflows to 0/0.
    disabled: plain mean over the non-anomalous replicas (1/k each, k of them); the norms are not looked at.
    all anomalous: all zeros (the caller then skips the outer step, see `outer_step_skipped`).

    Anomalous replicas are excluded in both modes, so switching weighting off keeps the anomaly filter
    (with no anomalies, disabled gives the paper's plain 1/R). With weighting on, a non-anomalous replica
    whose norm is +inf or NaN (possible when the anomaly filter is off) gets weight 0, the limit of the
    softmax for an infinitely large norm; if no finite norm is left the weights are all zero. T = inf
    gives equal weights. Weights sum to 1 up to rounding whenever one is non-zero.
    """
    _check_replicas(norms, anomalous)
    _check_positive("temperature", temperature, "T of the softmax weights")
    keep = [not bool(a) for a in anomalous]
    if not enabled:
        k = sum(keep)
        return [1.0 / k if kept else 0.0 for kept in keep] if k else [0.0] * len(keep)
    usable = [kept and math.isfinite(float(g)) for kept, g in zip(keep, norms)]
    if not any(usable):
        return [0.0] * len(keep)
    g_min = min(float(g) for g, ok in zip(norms, usable) if ok)
    t = float(temperature)
    e = [math.exp(-(float(g) - g_min) / t) if ok else 0.0 for g, ok in zip(norms, usable)]
    total = math.fsum(e)
    return [v / total for v in e]
# endregion softmax-weights
