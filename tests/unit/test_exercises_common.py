"""The shared answer readers: a malformed answer is a wrong answer (AssertionError), never a crash."""

from __future__ import annotations

import pytest

from edit_lab.exercises import as_numbers
from edit_lab.exercises.nb04 import check_transfer_ms
from edit_lab.exercises.nb05 import check_clip_factor, check_first_armed_step
from edit_lab.exercises.nb06 import check_aedit_round_steps
from edit_lab.exercises.nb07 import check_machine_of_rank, check_torchrun_sizes


def test_as_numbers_reads_lists_and_tuples_of_numbers():
    assert as_numbers([1, "2.5"], 2, "two numbers") == [1.0, 2.5]
    with pytest.raises(AssertionError, match="give two numbers: 2 numbers, not 3"):
        as_numbers((1, 2, 3), 2, "two numbers")
    with pytest.raises(AssertionError, match="is not two numbers"):
        as_numbers(7, 2, "two numbers")


@pytest.mark.parametrize("check, answer", [
    (check_clip_factor, "0.5, 0.5"),  # a string, not a number
    (check_clip_factor, ["a", "b"]),
    (check_aedit_round_steps, [8, None]),
    (check_torchrun_sizes, 48),
    (check_machine_of_rank, ["two", "five"]),
    (check_transfer_ms, "seven"),
    (check_first_armed_step, "step twelve"),
])
def test_a_malformed_answer_is_wrong_not_a_crash(check, answer):
    with pytest.raises(AssertionError):
        check(answer)


def test_a_fraction_is_not_a_whole_unit_or_step():
    with pytest.raises(AssertionError):
        check_first_armed_step(14.7)  # int() would have truncated it to the right answer
    with pytest.raises(AssertionError):
        check_machine_of_rank([2.9, 5], rank=21, shards=8)


def test_compare_prediction_prints_and_never_raises(capsys):
    from edit_lab.exercises import compare_prediction, not_yet

    assert compare_prediction(10, 10.4, what="x", why="because.", rel_tol=0.05) is True
    assert "matches" in capsys.readouterr().out
    assert compare_prediction(5, 10.0, what="x", why="because.", rel_tol=0.05) is False
    out = capsys.readouterr().out
    assert "Not quite" in out and "because." in out
    assert compare_prediction(9.8, 10.0, what="x", why="", rel_tol=0.0, abs_tol=0.5) is True
    assert compare_prediction(None, 10.0, what="x", why="") is False
    assert "No prediction" in capsys.readouterr().out
    assert compare_prediction([1, 2], 10.0, what="x", why="") is False
    assert "is not a number" in capsys.readouterr().out
    assert not_yet("reason") is False
    assert capsys.readouterr().out == "Not yet: reason\n"
