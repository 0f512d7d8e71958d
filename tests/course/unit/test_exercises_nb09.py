"""Notebook 09's exercise: the fragment schedule against the library's on a grid, without launching a run (the
check that runs it on every rank: tests/course/distributed/test_fragment_schedule_rule.py)."""

from __future__ import annotations

from edit_course.exercises.nb09 import check_fragment_schedule
from edit_lab import RunConfig
from edit_lab.protocol import fragment_landing

from tests.course.exercise_asserts import not_yet


def right(step, warmup, interval, fragments):
    every = interval // fragments
    if step <= warmup or (step - warmup) % every:
        return None
    return ((step - warmup) // every - 1) % fragments


def off_by_one(step, warmup, interval, fragments):  # fragment 1 first
    every = interval // fragments
    return None if step <= warmup or (step - warmup) % every else ((step - warmup) // every) % fragments


def test_unanswered_wrong_and_right(capsys):
    assert not check_fragment_schedule(None) and "Not answered yet" in capsys.readouterr().out
    assert not check_fragment_schedule(lambda *a: None) and "Not answered yet" in capsys.readouterr().out
    not_yet(capsys, check_fragment_schedule(off_by_one), "fragment 0 first", "H/P")
    not_yet(capsys, check_fragment_schedule(lambda s, w, h, p: 1 / 0), "ZeroDivisionError")
    not_yet(capsys, check_fragment_schedule(lambda s, w, h, p: True if s > w else None), "True")
    assert check_fragment_schedule(right) and "on every setting tried" in capsys.readouterr().out
    assert check_fragment_schedule(fragment_landing)  # the library's own


def test_no_run_and_a_folder_without_one(capsys, tmp_path):
    # a folder with no run in it: the grid alone decides, said (the run itself: tests/course/distributed/
    # test_fragment_schedule_rule.py)
    assert check_fragment_schedule(right, tmp_path / "nothing") and "no run was there" in capsys.readouterr().out


def test_a_run_that_is_not_streaming_and_a_lambda_launch_nothing(capsys, tmp_path):
    (tmp_path / "diloco").mkdir()
    (tmp_path / "diloco" / "config.json").write_text(RunConfig(method="diloco", model="nano").to_json())
    not_yet(capsys, check_fragment_schedule(right, tmp_path / "diloco"), "should be a streaming_diloco run")
    (tmp_path / "stream").mkdir()
    (tmp_path / "stream" / "config.json").write_text(RunConfig(method="streaming_diloco", model="nano").to_json())
    lam = lambda s, w, h, p: None if s <= w or (s - w) % (h // p) else ((s - w) // (h // p) - 1) % p  # noqa: E731
    not_yet(capsys, check_fragment_schedule(lam, tmp_path / "stream"), "lambda", "Nothing was launched")
