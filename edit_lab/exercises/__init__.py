"""Check functions for the notebooks' exercises: one module per notebook (`nb02.py` for 02_…).

Convention: `check_<name>(answer)` prints a hint and returns False when the answer is `None`
(not attempted yet, so a notebook still runs top to bottom), raises `AssertionError` with an
explanation for a wrong answer, and prints a short confirmation and returns True for a right one.

Two kinds never raise, because the notebook ships them unanswered or wrong on purpose and papermill
runs it top to bottom: a prediction check (`compare_prediction`: the reader's guess against what the
run measured, with the reason) and a code check (`check_<name>(fn)` runs the reader's function
against the library and prints "Not yet: …" with the reason, via `not_yet`). Both return a bool.
"""

from __future__ import annotations

from typing import Any


def unanswered(answer: Any, hint: str) -> bool:
    """True (after printing the hint) when the reader has not answered yet."""
    if answer is None:
        print(f"Not answered yet. Hint: {hint}")
        return True
    return False


def as_number(answer: Any, what: str = "a number") -> float:
    """The answer as a float; anything that is not a number is a wrong answer (AssertionError), not a crash."""
    try:
        return float(answer)
    except (TypeError, ValueError):
        raise AssertionError(f"{answer!r} is not {what}.") from None


def as_numbers(answer: Any, count: int, what: str) -> list[float]:
    """A list answer as `count` floats; not a list of numbers, or the wrong length, is a wrong answer."""
    try:
        got = [float(x) for x in answer]
    except (TypeError, ValueError):
        raise AssertionError(f"{answer!r} is not {what}.") from None
    assert len(got) == count, f"give {what}: {count} numbers, not {len(got)}"
    return got


def correct(message: str = "Correct!") -> bool:
    print(message)
    return True


# --- predict, then run; change the code, then check: helpers that never raise ------------------------
# A notebook ships these cells unanswered or with a body that is wrong on purpose, and papermill runs
# it top to bottom: so they print "Not yet" with the reason and return False instead of raising.


def not_yet(message: str) -> bool:
    """A code exercise that does not pass yet: print why, return False (the notebook keeps running)."""
    print(f"Not yet: {message}")
    return False


def compare_prediction(prediction: Any, measured: float, *, what: str, why: str, rel_tol: float = 0.1,
                       abs_tol: float = 0.0) -> bool:
    """Predict, then run: compare the reader's `prediction` with the value the run `measured`.

    True when the prediction is within `rel_tol` of the measured value (or `abs_tol`, whichever is larger).
    Always prints the measured value and `why` (the reason it came out so), so that the cell teaches
    whether or not a prediction was written; never raises.
    """
    if prediction is None:
        print(f"No prediction written. The run measured {what}: {measured:,.4g}. {why}")
        return False
    try:
        p = float(prediction)
    except (TypeError, ValueError):
        print(f"{prediction!r} is not a number. The run measured {what}: {measured:,.4g}. {why}")
        return False
    if abs(p - measured) <= max(rel_tol * abs(measured), abs_tol):
        print(f"Your prediction {p:,.4g} matches: the run measured {what}: {measured:,.4g}. {why}")
        return True
    print(f"Not quite: you predicted {p:,.4g}, the run measured {what}: {measured:,.4g}. {why}")
    return False


def compare_yes_no(prediction: Any, truth: bool, measured: str) -> bool:
    """Predict, then run, for a yes/no question: `measured` says what the run found. Never raises."""
    if prediction is None:
        print(f"No prediction written. {measured}")
        return False
    if bool(prediction) == truth:
        return correct(f"Your prediction holds. {measured}")
    print(f"Not this time. {measured}")
    return False
