"""The shared answer readers and verdicts: a malformed answer is a wrong answer, said, never a crash."""

from __future__ import annotations

import pytest

from edit_course.exercises import CheckResult, read_number, read_numbers, read_yes_no, say, show
from edit_course.exercises.nb04 import check_transfer_ms
from edit_course.exercises.nb05 import check_clip_factor, check_first_armed_step
from edit_course.exercises.nb06 import check_aedit_round_steps
from edit_course.exercises.nb07 import check_machine_of_rank, check_torchrun_sizes
from edit_course.verdict import parse


def test_read_numbers_reads_lists_and_tuples_of_numbers():
    assert read_numbers([1, "2.5"]) == [1.0, 2.5]
    assert read_numbers((1, 2, 3)) == [1.0, 2.0, 3.0]  # the length is the check's to judge
    assert read_numbers(7) is None
    assert read_numbers("12") is None  # a string is not a list of digits
    assert read_numbers([8, None]) is None
    assert read_number("6.95") == 6.95 and read_number(3) == 3.0
    assert read_number(True) is None and read_number(float("nan")) is None and read_number([5]) is None
    assert read_yes_no(True) is True and read_yes_no("no") is False and read_yes_no(0) is False
    assert read_yes_no("abc") is None and read_yes_no(-1) is None and read_yes_no([1]) is None


@pytest.mark.parametrize("check, answer, says", [
    (check_clip_factor, "0.5, 0.5", "is not a number"),  # a string, not a number
    (check_clip_factor, ["a", "b"], "is not a number"),
    (check_aedit_round_steps, [8, None], "is not a list of numbers"),
    (check_torchrun_sizes, 48, "is not a list of numbers"),
    (check_machine_of_rank, ["two", "five"], "is not a list of numbers"),
    (check_transfer_ms, "seven", "'seven' is not a number"),
    (check_first_armed_step, "step twelve", "'step twelve' is not a number"),
])
def test_a_malformed_answer_is_wrong_not_a_crash(check, answer, says, capsys):
    result = check(answer)
    out = capsys.readouterr().out
    assert not result and isinstance(result, CheckResult)
    assert out.startswith("Not yet: ") and says in out and "Hint:" in out, out


def test_a_fraction_is_not_a_whole_unit_or_step(capsys):
    assert not check_first_armed_step(14.7)  # int() would have truncated it to the right answer
    assert "14.7 is not a whole number" in capsys.readouterr().out
    assert not check_machine_of_rank([2.9, 5], rank=21, shards=8)
    assert "whole numbers" in capsys.readouterr().out


def test_the_result_is_truthy_when_right_and_shows_no_bare_bool(capsys):
    right, wrong, none = check_clip_factor(0.5), check_clip_factor(2.0), check_clip_factor(None)
    assert right and not wrong and not none
    assert (repr(right), repr(wrong), repr(none)) == ("<check: correct>", "<check: not yet right>",
                                                       "<check: not answered yet>")
    assert "True" not in repr(right) and "False" not in repr(wrong)
    formatters = pytest.importorskip("IPython.core.formatters")
    assert formatters.DisplayFormatter().format(wrong) == ({}, {})  # the last line of a cell displays nothing


def test_messages_are_one_line_and_never_a_verdict(capsys):
    say("✗ looks like a claim\nand a second line")
    say("✓ so does this")
    out = capsys.readouterr().out
    assert out.count("\n") == 2 and parse(out) == []
    assert show("a\nb" * 100).count("\n") == 0 and len(show("x" * 500)) <= 80


def test_compare_prediction_prints_and_never_raises(capsys):
    from edit_course.exercises import compare_prediction, compare_yes_no, not_yet

    assert compare_prediction(10, 10.4, what="x", why="because.", rel_tol=0.05)
    assert "matches" in capsys.readouterr().out
    assert not compare_prediction(5, 10.0, what="x", why="because.", rel_tol=0.05)
    out = capsys.readouterr().out
    assert "Not quite" in out and "because." in out
    assert compare_prediction(9.8, 10.0, what="x", why="", rel_tol=0.0, abs_tol=0.5)
    assert not compare_prediction(None, 10.0, what="x", why="")
    assert "Not answered yet" in capsys.readouterr().out
    assert not compare_prediction([1, 2], 10.0, what="x", why="")
    assert "is not a number" in capsys.readouterr().out
    assert not compare_yes_no("maybe", True, "It was.")
    assert "not a yes/no answer" in capsys.readouterr().out
    assert compare_yes_no("yes", True, "It was.")
    assert "Your prediction holds" in capsys.readouterr().out
    assert not not_yet("reason")
    assert capsys.readouterr().out == "Not yet: reason\n"


def test_an_empty_prediction_is_locked_it_reveals_neither_the_value_nor_the_reason(capsys):
    from edit_course.exercises import CheckResult, compare_prediction, compare_yes_no, unlocked
    from edit_course.verdict import parse

    r = compare_prediction(None, 12345.0, what="units flagged", why="every parameter was multiplied.")
    out = capsys.readouterr().out
    assert not r and r.state == CheckResult.UNANSWERED
    assert out.startswith("Not answered yet.") and "12,345" not in out and "12345" not in out
    assert "multiplied" not in out and "units flagged" in out and "hidden" in out
    assert not unlocked(r)  # the reveal stays hidden, and says so on one line that is no verdict
    said = capsys.readouterr().out
    assert said.startswith("Locked:") and said.count("\n") == 1 and parse(said) == []
    y = compare_yes_no(None, True, "Replica 0 was flagged at step 14.")
    out = capsys.readouterr().out
    assert not y and "step 14" not in out and out.startswith("Not answered yet.")
    assert not unlocked(y) and not unlocked(None) and not unlocked("anything else")
    capsys.readouterr()
    # committed, right or wrong: the reveal opens, and the value and the reason are printed
    wrong = compare_prediction(3, 5.0, what="units flagged", why="every parameter was multiplied.", abs_tol=0.5)
    assert not wrong and unlocked(wrong)
    out = capsys.readouterr().out
    assert "5" in out and "multiplied" in out and "Locked" not in out
    right = compare_yes_no(True, True, "Replica 0 was flagged at step 14.")
    assert right and unlocked(right) and "step 14" in capsys.readouterr().out


def test_the_score_counts_each_calling_place_once_as_it_stands_now(capsys, monkeypatch):
    from edit_course import exercises
    from edit_course.exercises.nb00 import check_rank
    from edit_course.verdict import parse

    monkeypatch.setattr(exercises, "_RESULTS", {})
    assert exercises.score() == (0, 0)
    assert "No check has run" in capsys.readouterr().out

    def cell(answer):  # one notebook cell, run again with another answer
        return check_rank(answer, replica=2, shard=1, shards=4)

    cell(None)
    assert exercises.score() == (0, 1)
    cell(9)
    check_rank(3, replica=0, shard=3, shards=4)  # another place
    exercises.compare_prediction(None, 2.0, what="x", why="y")
    capsys.readouterr()
    assert exercises.score() == (2, 3)
    out = capsys.readouterr().out.splitlines()
    assert [line.split() for line in out[:3]] == [["check_rank", "correct"], ["check_rank", "correct"],
                                                  ["compare_prediction", "not", "answered", "yet"]]
    assert out[-1] == "Score: 2 of 3 checks passed; the lines above say which are still open."
    assert parse("\n".join(out)) == []  # no line reads as a claim about the run
