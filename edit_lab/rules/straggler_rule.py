"""A straggler kind (`RunConfig.rules.straggler`, notebook 06).

Part of `edit_lab.rules` (a reader's own rule, run by every rank), which re-exports every name here and says
how the rules work."""

from __future__ import annotations

import math
from collections.abc import Callable

from edit_lab.rules.source import RuleError, load_rule


STRAGGLER_SIGNATURE = "fn(step, replica, compute_s) -> seconds of pause (0 for none)"

Straggler = Callable[[int, int, float], float]


def straggler(source: str) -> Straggler:
    """The straggler rule as every rank calls it: its answer as a float, finite and >= 0 (0: no pause)."""
    fn = load_rule(source, "straggler rule")

    def pause_s(step: int, replica: int, compute_s: float) -> float:
        got = fn(int(step), int(replica), float(compute_s))
        if isinstance(got, bool) or got is None:
            raise RuleError(f"the straggler rule returned {got!r}, not a number of seconds")
        try:
            out = float(got)
        except (TypeError, ValueError) as e:
            raise RuleError(f"the straggler rule returned {got!r}, not a number of seconds") from e
        if not (math.isfinite(out) and out >= 0.0):
            raise RuleError(f"the straggler rule returned {out}: a pause must be finite and >= 0 seconds")
        return out

    return pause_s


def straggler_problem(source: str) -> str | None:
    """Why the straggler rule cannot run (None when it can), found by calling it on a few steps of two replicas,
    with and without compute, before any process starts."""
    try:
        rule = straggler(source)
        for step in (0, 1, 2, 7):
            for replica in (0, 1):
                for compute_s in (0.0, 0.01, 0.25):
                    rule(step, replica, compute_s)
    except Exception as e:  # noqa: BLE001 - whatever the reader's code raises is the reason
        return f"{STRAGGLER_SIGNATURE}; it fails: {type(e).__name__}: {e}"
    return None
