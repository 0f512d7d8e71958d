"""A reader's own rule, run by every rank of a real run: a function written in a notebook, shipped as source.

Why source and not the function itself: the ranks are fresh processes, and a function defined in a notebook
cell lives in the kernel's `__main__`, which no other process can import or unpickle. Its source text is
plain data: it travels in the `RunConfig` (so `config.json` records what ran), every rank compiles it once,
and a rule that cannot work is refused before any process starts, like every other knob.

Two rules are pluggable:
- the penalty's **weighting** (`RunConfig.penalty_weighting_rule`, notebook 05's exercise), which replaces
  `penalty.softmax_weights` at every sync of EDiT and A-EDiT, on every rank. The rule is called with the
  library's own inputs (the norms, per step when `penalty_weight_per_step`, the temperature T and the anomaly
  decisions), so a rule equal to the softmax gives the library's run;
- a **straggler** kind (`RunConfig.straggler_rule`, notebook 06's exercise): `fn(step, replica, compute_s)`,
  the seconds that replica pauses after that step, whose own compute took `compute_s` (0: no pause). Every
  rank calls it after every step (`stragglers.StragglerModel.delay`, reason "rule"), on top of the consistent
  and random stragglers; on the virtual clock `compute_s` is the calibrated compute of a step.
"""

from __future__ import annotations

import ast
import inspect
import math
import textwrap
from collections.abc import Callable, Sequence

WEIGHTING_SIGNATURE = "fn(norms, temperature, anomalous) -> one weight per replica"
STRAGGLER_SIGNATURE = "fn(step, replica, compute_s) -> seconds of pause (0 for none)"

Weighting = Callable[[Sequence[float], float, Sequence[bool]], list[float]]
Straggler = Callable[[int, int, float], float]


class RuleError(ValueError):
    """A rule that cannot be run: not a single function, or one that fails or answers in the wrong shape."""


def rule_source(fn: Callable) -> str:
    """The source of `fn`, ready for a RunConfig: a function defined with `def` in a cell or a module.

    Refused: a lambda (its source is the whole line it sits in) and a function that reads variables of an
    enclosing function (they would not exist on the ranks). Module-level names it uses must be imported
    inside the function, or be `math`, which every rank provides.
    """
    if not inspect.isfunction(fn):
        raise RuleError(f"expected a function defined with def, got {type(fn).__name__}")
    if fn.__name__ == "<lambda>":
        raise RuleError("a lambda cannot be shipped to the ranks: define the rule with def")
    if fn.__code__.co_freevars:
        raise RuleError(f"{fn.__name__} reads {', '.join(fn.__code__.co_freevars)} of an enclosing function, which "
                        f"the ranks do not have: define it at the top level of a cell")
    try:
        return textwrap.dedent(inspect.getsource(fn))
    except (OSError, TypeError) as e:
        raise RuleError(f"the source of {fn.__name__} cannot be read ({e}): define it in a cell or a file") from e


def load_rule(source: str, what: str = "rule") -> Callable:
    """Compile `source` (exactly one top-level `def`; imports may precede it) and return that function."""
    if not isinstance(source, str):
        raise RuleError(f"the {what} must be Python source text, got {type(source).__name__}")
    try:
        tree = ast.parse(source)
    except SyntaxError as e:
        raise RuleError(f"the {what} does not parse: {e.msg} (line {e.lineno})") from e
    defs = [n for n in tree.body if isinstance(n, ast.FunctionDef)]
    others = [n for n in tree.body if not isinstance(n, (ast.FunctionDef, ast.Import, ast.ImportFrom))]
    if len(defs) != 1 or others:
        raise RuleError(f"the {what} must be one function defined with def (imports may come first), "
                        f"found {len(defs)} function(s) and {len(others)} other statement(s)")
    namespace: dict = {"math": math, "__name__": "edit_lab_rule"}
    exec(compile(tree, f"<{what}>", "exec"), namespace)  # noqa: S102 - the reader's own code, on their own machine
    return namespace[defs[0].name]


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
