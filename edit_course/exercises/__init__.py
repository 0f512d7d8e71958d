"""Check functions for the notebooks' exercises: one module per notebook (`nb02.py` for 02_…).

Convention: a check never raises at a student. Whatever the answer is (None, a wrong number, a
string, a list of the wrong length, a function that raises or returns garbage), `check_<name>(answer)`
prints one friendly line and returns a `CheckResult`:

- not answered yet (`None`): "Not answered yet. Hint: …" (so a notebook still runs top to bottom);
- wrong: "Not yet: …" — what came (the reader's answer, shown on one line), what is off (too high or
  too low, the units, which case failed, which number of a pair) and why, with the hint. An arithmetic
  check does not print the right number: the explanation shows the way to it;
- right: "Correct: …" with what the answer means.

Predictions (`compare_prediction`, `compare_yes_no`: the reader's guess against what the run measured) are
locked: with no prediction written (`None`, as shipped) they print "Not answered yet. …" and neither the
measured value nor the reason, and `unlocked(result)` keeps the rest of the reveal (a table, the run's checks
that answer the question) hidden too; once a prediction is committed, right or wrong, they print the measured
value and the reason ("Your prediction … matches", "Not quite: …", "Not this time."); a code check (`check_<name>(fn)`) runs the reader's function against the
library and prints "Not yet: …" with the reason (`not_yet`) when it does not match, raises, or is not
a function at all.

The `CheckResult` is truthy exactly when the answer is right (`passed = check_…(…)`, `if passed:`),
and displays nothing when it is the last expression of a notebook cell (`_ipython_display_` shows
nothing), so that no bare `True`/`False` reads like a second verdict under the printed one; outside
IPython its repr is a short label, `<check: correct>`, `<check: not yet right>` or
`<check: not answered yet>`. Compare it with `bool(…)`, never with `is True`.

Every message is printed by `say`, as one line that never starts with a verdict symbol of
`edit_course.verdict` (✓ or ✗ followed by a space): the notebook tests read those lines as claims about
the run, and an exercise's "Not yet" is not one.
"""

from __future__ import annotations

import itertools
import math
import numbers
import os
import warnings
from collections.abc import Callable, Sequence
from typing import Any

from edit_course.verdict import FAIL, PASS

_PACKAGE_DIR = os.path.dirname(os.path.abspath(__file__))  # frames in here are the checks' own


class CheckResult:
    """What a check returns: truthy exactly when the answer is right; shows nothing in a notebook."""

    __slots__ = ("passed", "state")

    CORRECT, WRONG, UNANSWERED = "correct", "not yet right", "not answered yet"

    def __init__(self, passed: bool, state: str) -> None:
        self.passed = bool(passed)
        self.state = state
        _record(self)

    def __bool__(self) -> bool:
        return self.passed

    def __repr__(self) -> str:
        return f"<check: {self.state}>"

    def _ipython_display_(self) -> None:
        """Display nothing: the line the check printed is the verdict."""


# ------------------------------------------------------------------------------------------ the score
#: Every check called in this process, by (check, the cell and line that called it): its latest result.
#: A re-run cell replaces its own entry (IPython names a cell's code after its source), so `score` counts
#: each check once, as it stands now.
_RESULTS: dict[tuple[str, str, int], tuple[str, CheckResult]] = {}


def _record(result: CheckResult) -> None:
    """File `result` under the check that made it and the place that called that check."""
    import inspect

    frame = inspect.currentframe()
    check, caller = None, None
    while frame is not None:
        name = frame.f_code.co_name
        if check is None and name.startswith(("check_", "compare_")):
            check = frame
        elif check is not None and not frame.f_code.co_filename.startswith(_PACKAGE_DIR):
            caller = frame
            break
        frame = frame.f_back
    if check is None:
        return
    where = (caller.f_code.co_filename, caller.f_lineno) if caller is not None else ("", 0)
    _RESULTS[(check.f_code.co_name, *where)] = (check.f_globals.get("__name__", ""), result)


def score() -> tuple[int, int]:
    """Print which checks (exercises and predictions) passed in this kernel, each once as it stands now, then
    the count. Returns (passed, checked). Never raises."""
    if not _RESULTS:
        say("No check has run in this kernel yet: run the exercise cells above, then this one again.")
        return 0, 0
    width = max(len(name) for name, _, _ in _RESULTS)
    for (name, _, _), (_, r) in _RESULTS.items():
        print(f"  {name.ljust(width)}  {r.state}")
    passed = sum(1 for _, r in _RESULTS.values() if r)
    say(f"Score: {passed} of {len(_RESULTS)} checks passed"
        + ("." if passed == len(_RESULTS) else "; the lines above say which are still open."))
    return passed, len(_RESULTS)


def _right() -> CheckResult:
    return CheckResult(True, CheckResult.CORRECT)


def _wrong() -> CheckResult:
    return CheckResult(False, CheckResult.WRONG)


def _unanswered() -> CheckResult:
    return CheckResult(False, CheckResult.UNANSWERED)


# ------------------------------------------------------------------------------------------ printing
_VERDICT_STARTS = (PASS + " ", FAIL + " ")


def say(message: str) -> None:
    """Print `message` as one line that edit_course.verdict.parse can never take for a claim's verdict."""
    line = " ".join(str(message).split())
    if line.startswith(_VERDICT_STARTS):
        line = "Note: " + line
    print(line)


def show(value: Any, limit: int = 80) -> str:
    """The reader's answer as it came, on one line and at most `limit` characters; never raises."""
    try:
        text = repr(value)
    except Exception:
        text = f"<a {type(value).__name__} that cannot be shown>"
    text = " ".join(text.split())
    return text if len(text) <= limit else text[:limit - 1] + "…"


def num(x: float) -> str:
    """A number the reader gave, as they would write it (6, 6.9536, 0.333333, 1e+09)."""
    return f"{x:.6g}"


def short_error(exc: BaseException, limit: int = 160) -> str:
    """`TypeError: …` of an exception the reader's code raised, on one line; never raises."""
    try:
        text = " ".join(str(exc).split())
    except Exception:
        text = ""
    text = text if len(text) <= limit else text[:limit - 1] + "…"
    return f"{type(exc).__name__}: {text}" if text else type(exc).__name__


# ------------------------------------------------------------------------------------ reading answers
def read_number(answer: Any, nan_ok: bool = False) -> float | None:
    """The answer as a float, or None when it is not one number (True/False, lists, and NaN unless
    `nan_ok`, are not)."""
    if answer is None or isinstance(answer, bool):
        return None
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            x = float(answer)
    except Exception:  # a string, a list, a tensor of several values, an object: not a number
        return None
    return None if math.isnan(x) and not nan_ok else x


def read_numbers(answer: Any, limit: int = 1000, nan_ok: bool = False) -> list[float] | None:
    """A list (tuple, array) answer as floats, or None when it is not a sequence of numbers."""
    if answer is None or isinstance(answer, (str, bytes, dict)):
        return None
    try:
        items = list(itertools.islice(iter(answer), limit))
    except Exception:
        return None
    got = [read_number(x, nan_ok) for x in items]
    return None if any(g is None for g in got) else got  # type: ignore[return-value]


def is_whole(x: float) -> bool:
    return math.isfinite(x) and x == round(x)


# --------------------------------------------------------------------------------------------- verdicts
def correct(message: str = "Correct!") -> CheckResult:
    """A right answer: print what it means, return a truthy result."""
    say(message)
    return _right()


def not_yet(message: str) -> CheckResult:
    """A wrong answer, or a code exercise that does not pass yet: print why, return a falsy result
    (the notebook keeps running)."""
    say(f"Not yet: {message}")
    return _wrong()


def not_answered(hint: str) -> CheckResult:
    say(f"Not answered yet. Hint: {hint}")
    return _unanswered()


def not_a_function(fn: Any, call: str) -> CheckResult | None:
    """A falsy result (after saying so) when a code check was given something that is not a function."""
    if callable(fn):
        return None
    if fn is None:
        return not_answered(f"pass your function itself: {call}.")
    return not_yet(f"{show(fn)} is not a function; expected a function to call as {call}.")


def reference_run(cfg: Any, out: Any, suffix: str) -> Any:
    """The library's own run of `cfg`, in `<out>-<suffix>` next to the reader's run: reused when a finished run
    of the same configuration (its folder and progress bar aside) is there, else launched (that folder
    overwritten). What a code exercise's run is judged against."""
    from pathlib import Path

    from edit_lab.records.run import Run
    from edit_lab.runtime.launch import launch

    where = Path(out).with_name(f"{Path(out).name}-{suffix}")
    want = cfg.replace(out=str(where))
    if (where / "summary.json").exists():
        try:
            old = Run(where)
            if old.config.replace(out=None, progress=False).to_dict() == want.replace(out=None, progress=False).to_dict():
                return old
        except Exception:  # noqa: BLE001 - an unreadable folder is launched again
            pass
    return launch(want, overwrite=True)


def run_a_rule(launch_cfg: Callable[[], Any]) -> tuple[Any, CheckResult | None]:
    """(the run, None), or (None, the verdict) when a reader's rule kept the run from finishing: refused before
    any process started, failed on a rank (named, with its last traceback line), or anything else. Never raises.

    `launch_cfg` builds the configuration from the rule's source and launches it (edit_lab.rules)."""
    from edit_lab.config import ConfigError
    from edit_lab.rules import RuleError
    from edit_lab.runtime.launch import WorkerError

    try:
        return launch_cfg(), None
    except (RuleError, ConfigError) as e:
        return None, not_yet(f"the run was refused before any process started: {short_error(e, 400)}")
    except WorkerError as e:
        last = [line for line in e.traceback.strip().splitlines() if line.strip()][-1:] or ["?"]
        return None, not_yet(f"your rule failed on rank {e.rank} during the run: {last[0][:300]}")
    except Exception as e:  # noqa: BLE001 - a check never raises at a student
        return None, not_yet(f"the run did not finish: {short_error(e, 300)}")


Named = Sequence[tuple[Callable[[Any], bool], str]]  # (test on the answer read, what to say)


def judge_number(answer: Any, want: float, *, what: str, hint: str, why: str, right: str, tol: float = 0.0,
                 whole: bool = False, unit: str = "", named: Named = ()) -> CheckResult:
    """One number against `want`: a hint while unanswered, else the verdict, printed; never raises.

    `what`: what was expected ("a rank (a whole number)"); `why`: the explanation of a wrong answer;
    `named`: (test, text) pairs for known wrong answers, said instead of too high/low ("5 counts the
    forward only…"); `unit` "ms" or "fraction" also recognises an answer in seconds or in percent.
    The right number is never printed for a wrong answer.
    """
    if answer is None:
        return not_answered(hint)
    got = read_number(answer)
    if got is None:
        return not_yet(f"{show(answer)} is not a number; expected {what}. Hint: {hint}")
    shown = num(got) + (f" {unit}" if unit == "ms" else "")
    if abs(got - want) <= tol:
        return correct(right)
    if whole and not is_whole(got):
        return not_yet(f"{shown} is not a whole number; expected {what}. {why} Hint: {hint}")
    for test, text in named:
        try:
            hit = test(got)
        except Exception:
            hit = False
        if hit:
            return not_yet(f"{shown} {text}")
    if unit == "ms" and abs(got * 1e3 - want) <= tol:
        return not_yet(f"{num(got)} looks like seconds; the answer is in milliseconds (1 s = 1000 ms).")
    if unit == "fraction" and abs(got / 100 - want) <= tol:
        return not_yet(f"{num(got)} looks like a percentage; give a fraction between 0 and 1 (50% is 0.5).")
    off = "too high" if got > want else "too low"
    return not_yet(f"{shown} is {off}. {why} Hint: {hint}")


def judge_numbers(answer: Any, want: Sequence[float], *, what: str, labels: Sequence[str], hint: str, why: str,
                  right: str, tol: float = 0.0, whole: bool = False, named: Named = ()) -> CheckResult:
    """A list of numbers against `want` (one per `labels`): says which of them is off; never raises.

    `named`: (test on the list of floats, text) pairs for known wrong answers ("swapped").
    """
    if answer is None:
        return not_answered(hint)
    got = read_numbers(answer)
    if got is None:
        return not_yet(f"{show(answer)} is not a list of numbers; expected {what}. Hint: {hint}")
    if len(got) != len(want):
        return not_yet(f"{show(answer)} has {len(got)} number{'s' * (len(got) != 1)}; expected {what}: "
                       f"{len(want)} numbers. Hint: {hint}")
    shown = "(" + ", ".join(num(g) for g in got) + ")"
    if all(abs(g - w) <= tol for g, w in zip(got, want)):
        return correct(right)
    if whole and not all(is_whole(g) for g in got):
        return not_yet(f"{shown}: expected {what}, whole numbers. {why} Hint: {hint}")
    for test, text in named:
        try:
            hit = test(list(got))
        except Exception:
            hit = False
        if hit:
            return not_yet(f"{shown} {text}")
    off = [f"the {label} is {'too high' if g > w else 'too low'}" for label, g, w in zip(labels, got, want)
           if abs(g - w) > tol]
    return not_yet(f"{shown} is not it: {', '.join(off)}. {why} Hint: {hint}")


# --- predict, then run: helpers that never raise ------------------------------------------------------
# A notebook ships these cells unanswered, and papermill runs it top to bottom: they print the measured
# value and the reason in every case.


def compare_prediction(prediction: Any, measured: float, *, what: str, why: str, rel_tol: float = 0.1,
                       abs_tol: float = 0.0) -> CheckResult:
    """Predict, then run: compare the reader's `prediction` with the value the run `measured`.

    Truthy when the prediction is within `rel_tol` of the measured value (or `abs_tol`, whichever is larger).
    Locked until a prediction is committed: with `None` (the shipped default) it prints "Not answered yet" and
    neither the measured value nor `why`; with any answer, right or wrong, it prints both. Never raises.
    """
    if prediction is None:
        return _locked(f"the run's answer ({what})")
    p = read_number(prediction)
    if p is None:
        say(f"Not quite: {show(prediction)} is not a number. The run measured {what}: {measured:,.4g}. {why}")
        return _wrong()
    if abs(p - measured) <= max(rel_tol * abs(measured), abs_tol):
        return correct(f"Your prediction {p:,.4g} matches: the run measured {what}: {measured:,.4g}. {why}")
    say(f"Not quite: you predicted {p:,.4g}, the run measured {what}: {measured:,.4g}. {why}")
    return _wrong()


LOCKED_NOTE = "stays hidden until you commit one"


def _locked(what: str) -> CheckResult:
    """No prediction written: say so, and reveal nothing of the run's answer."""
    say(f"Not answered yet. Write your prediction in the cell above (it is still None), run it, then this cell "
        f"again: {what} {LOCKED_NOTE}.")
    return _unanswered()


def unlocked(result: Any) -> bool:
    """Whether the reveal of a prediction may show: True once the reader committed a prediction (the result of
    `compare_prediction` or `compare_yes_no` is right or wrong, not "not answered yet").

    A notebook puts what answers the question (the run's table, the checks that print the number) under
    `if unlocked(answer):`. While locked it prints one line saying so (never a verdict symbol) and returns False,
    so an empty answer never passes silently and the answer stays hidden; the run's other checks still print.
    Never raises."""
    state = getattr(result, "state", None)
    if state in (CheckResult.CORRECT, CheckResult.WRONG):
        return True
    say(f"Locked: the rest of this cell's answer {LOCKED_NOTE} (a prediction in the cell above).")
    return False


_YES, _NO = ("true", "yes", "y"), ("false", "no", "n")


def read_yes_no(answer: Any) -> bool | None:
    """True/False (also 1/0 and the words yes/no, true/false), or None for anything else."""
    if isinstance(answer, bool) or type(answer).__name__ == "bool_":  # numpy's bool too
        return bool(answer)
    if isinstance(answer, numbers.Integral) and answer in (0, 1):
        return bool(answer)
    if isinstance(answer, str) and answer.strip().lower() in _YES + _NO:
        return answer.strip().lower() in _YES
    return None


def compare_yes_no(prediction: Any, truth: bool, measured: str) -> CheckResult:
    """Predict, then run, for a yes/no question: `measured` says what the run found, printed once a prediction
    is committed (locked while it is `None`, as `compare_prediction`). Never raises."""
    if prediction is None:
        return _locked("what the run found")
    said = read_yes_no(prediction)
    if said is None:
        say(f"Not quite: {show(prediction)} is not a yes/no answer; write True or False. {measured}")
        return _wrong()
    if said == bool(truth):
        return correct(f"Your prediction holds. {measured}")
    say(f"Not this time. {measured}")
    return _wrong()
