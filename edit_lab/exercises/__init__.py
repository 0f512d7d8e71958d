"""Check functions for the notebooks' exercises: one module per notebook (`nb02.py` for 02_…).

Convention: `check_<name>(answer)` prints a hint and returns False when the answer is `None`
(not attempted yet, so a notebook still runs top to bottom), raises `AssertionError` with an
explanation for a wrong answer, and prints a short confirmation and returns True for a right one.
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
