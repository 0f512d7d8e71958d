"""The shared answer readers: a malformed answer is a wrong answer (AssertionError), never a crash."""

from __future__ import annotations

import pytest

from edit_lab.exercises import as_numbers
from edit_lab.exercises.nb04 import check_unhidden_unit
from edit_lab.exercises.nb05 import check_first_armed_step, check_softmax_weights
from edit_lab.exercises.nb06 import check_aedit_round_steps
from edit_lab.exercises.nb07 import check_machine_of_rank, check_torchrun_sizes


def test_as_numbers_reads_lists_and_tuples_of_numbers():
    assert as_numbers([1, "2.5"], 2, "two numbers") == [1.0, 2.5]
    with pytest.raises(AssertionError, match="give two numbers: 2 numbers, not 3"):
        as_numbers((1, 2, 3), 2, "two numbers")
    with pytest.raises(AssertionError, match="is not two numbers"):
        as_numbers(7, 2, "two numbers")


@pytest.mark.parametrize("check, answer", [
    (check_softmax_weights, "0.73, 0.27"),  # a string, not a list
    (check_softmax_weights, ["a", "b"]),
    (check_aedit_round_steps, [8, None]),
    (check_torchrun_sizes, 48),
    (check_machine_of_rank, ["two", "five"]),
    (check_unhidden_unit, "the first"),
    (check_first_armed_step, "step twelve"),
])
def test_a_malformed_answer_is_wrong_not_a_crash(check, answer):
    with pytest.raises(AssertionError):
        check(answer)


def test_a_fraction_is_not_a_whole_unit_or_step():
    with pytest.raises(AssertionError):
        check_unhidden_unit(0.7)  # int() would have truncated it to the right answer
    with pytest.raises(AssertionError):
        check_machine_of_rank([2.9, 5], rank=21, shards=8)
