"""What the exercise-check tests assert about a wrong answer, in one place."""

from __future__ import annotations


def not_yet(capsys, result, *reasons: str) -> str:
    """A wrong answer: a falsy result and one printed "Not yet" line that names every reason."""
    out = capsys.readouterr().out
    assert not result, out
    assert out.startswith("Not yet: ") and out.count("\n") == 1, out
    assert all(r in out for r in reasons), (reasons, out)
    return out
