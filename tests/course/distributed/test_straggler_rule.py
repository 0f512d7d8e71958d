"""A reader's straggler kind run by every rank of a real run (`straggler_rule`, edit_lab/rules/), and notebook
06's check that judges one by the run's own pause events (`check_straggler_in_a_run`).

The throttle (replica 1 pauses after each odd step for that step's own compute) must pass on the virtual clock
and on a wall-clock 1 × 2 run; each named wrong kind must run and be told what it got wrong; a rule that fails
on a rank ends the run with that rank named, one that cannot work is refused before any process starts, and
the shipped cell (None) launches nothing.
"""

from __future__ import annotations

import pytest

from edit_course.exercises.nb06 import check_straggler_in_a_run
from edit_lab import launch
from edit_lab.rules import rule_source
from tests.course.exercise_asserts import not_yet
from tests.course.helpers import solution_function
from tests.helpers import small


def throttle(step, replica, compute_s):
    return compute_s if replica == 1 and step % 2 == 1 else 0.0


def every_step(step, replica, compute_s):
    return compute_s if replica == 1 else 0.0


def even_steps(step, replica, compute_s):
    return compute_s if replica == 1 and step % 2 == 0 else 0.0


def wrong_replica(step, replica, compute_s):
    return compute_s if replica == 0 and step % 2 == 1 else 0.0


def three_times_as_slow(step, replica, compute_s):
    return 2 * compute_s if replica == 1 and step % 2 == 1 else 0.0


def fails_late(step, replica, compute_s):
    if step >= 9:  # never on the refusal's probe (steps 0, 1, 2, 7), always on a 12-step run
        raise ArithmeticError("a rule that breaks on the ranks only")
    return 0.0


def virtual(**kw):
    """The notebook's base: the virtual clock, 2 replicas × 1 shard of nano (threads of this process)."""
    return small(**{"method": "edit", "clock": "virtual", "shards": 1, "replicas": 2, "steps": 12, **kw})


def test_the_throttle_passes_on_the_virtual_clock_and_its_pauses_are_the_steps_compute(tmp_path, capsys):
    result = check_straggler_in_a_run(throttle, virtual(), tmp_path / "run")
    out = capsys.readouterr().out
    assert result and result.state == "correct", out
    assert out.startswith("Correct: your rule ran on all 2 ranks (virtual clock); replica 1 paused after each "
                          "of its 6 odd steps"), out
    from edit_lab.records.run import Run

    run = Run(tmp_path / "run")
    assert run.config.rules.straggler.startswith("def throttle(step, replica, compute_s):")  # config.json has it
    pauses = run.events_of("straggle")
    assert sorted((e["replica"], e["step"]) for e in pauses) == [(1, s) for s in range(1, 12, 2)]
    assert all(e["data"]["reason"] == "rule" and e["data"]["planned"] == e["data"]["compute"] > 0 for e in pauses)
    assert all(e["t1"] - e["t0"] == pytest.approx(e["data"]["planned"]) for e in pauses)  # the clock advanced so


def test_the_throttle_passes_on_a_wall_clock_run(tmp_path, capsys):
    base = small(method="edit", shards=1, replicas=2, steps=6)  # 2 processes
    result = check_straggler_in_a_run(throttle, base, tmp_path / "wall")
    out = capsys.readouterr().out
    assert result and result.state == "correct", out
    assert "(wall clock); replica 1 paused after each of its 3 odd steps" in out, out


@pytest.mark.parametrize("rule, says", [
    (every_step, "replica 1 paused after every step (even ones too: 0, 2, 4"),
    (even_steps, "replica 1 paused after even steps (0, 2, 4"),
    (wrong_replica, "replica 0 paused (after steps 1, 3, 5"),
    (three_times_as_slow, "(2× its compute); that makes the step 3× as slow, not 2×"),
])
def test_a_wrong_kind_runs_and_is_told_why(tmp_path, capsys, rule, says):
    assert not check_straggler_in_a_run(rule, virtual(), tmp_path / "run")
    out = not_yet(capsys, None, says)
    assert (tmp_path / "run" / "summary.json").exists(), out  # the run itself finished: its records judged it
    if rule is wrong_replica:
        assert "you paused the wrong replica" in out and "replica 1 never did" in out


def test_a_rule_that_fails_on_a_rank_or_cannot_run_is_said_not_raised(tmp_path, capsys):
    assert not check_straggler_in_a_run(fails_late, virtual(), tmp_path / "crash")
    not_yet(capsys, None, "your rule failed on rank", "ArithmeticError: a rule that breaks on the ranks only")

    def negative(step, replica, compute_s):
        return -compute_s

    assert not check_straggler_in_a_run(negative, virtual(), tmp_path / "refused")
    not_yet(capsys, None, "refused before any process started", "straggler_rule", "finite and >= 0")
    assert not (tmp_path / "refused").exists()
    assert not check_straggler_in_a_run(lambda s, r, c: c, virtual(), tmp_path / "lambda")
    not_yet(capsys, None, "a lambda cannot be shipped")
    assert not check_straggler_in_a_run(throttle, virtual(replicas=1), tmp_path / "one")
    not_yet(capsys, None, "the exercise needs replica 1")
    assert not check_straggler_in_a_run(None, virtual(), tmp_path / "none")
    capsys.readouterr()


def test_the_shipped_cell_is_not_answered_yet_and_launches_nothing(tmp_path, capsys):
    def my_throttle(step, replica, compute_s):
        return None  # TODO

    result = check_straggler_in_a_run(my_throttle, virtual(), tmp_path / "run")
    assert not result and result.state == "not answered yet"
    assert capsys.readouterr().out.startswith("Not answered yet. Hint: your function still returns None")
    assert not (tmp_path / "run").exists()


def test_the_answer_in_solutions_passes_the_check(tmp_path, capsys):
    my_throttle = solution_function("06", "my_throttle", tmp_path)
    assert rule_source(my_throttle).startswith("def my_throttle(")
    assert check_straggler_in_a_run(my_throttle, virtual(), tmp_path / "run"), capsys.readouterr().out
    assert capsys.readouterr().out.startswith("Correct")


def test_the_rule_pauses_a_run_launched_directly(tmp_path):
    run = launch(virtual(steps=4, straggler_replicas=(0,), straggler_factor=2.0,
                         straggler_rule=rule_source(throttle), out=str(tmp_path / "both")))
    reasons = {(e["replica"], e["step"]): e["data"]["reason"] for e in run.events_of("straggle")}
    assert reasons == {(0, 0): "consistent", (0, 1): "consistent", (0, 2): "consistent", (0, 3): "consistent",
                       (1, 1): "rule", (1, 3): "rule"}
