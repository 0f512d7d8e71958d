"""The penalty's weighting (`RunConfig.rules.weighting`, notebook 05).

Part of `edit_lab.rules` (a reader's own rule, run by every rank), which re-exports every name here and says
how the rules work."""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence

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
