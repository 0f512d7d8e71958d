"""A reader's gradient all-reduce run by every rank of a real run (`grad_all_reduce_rule`, edit_lab/rules/), and
notebook 01's check that judges one by the run's losses and checkpoints (`check_all_reduce_in_a_run`).

The ring (a reduce-scatter, then an all-gather) must pass on a wall-clock 1 × 2 gloo run, against the built-in
all-reduce's run; each named wrong answer must run and be told what it got wrong (on the virtual clock, which runs
the same engine code with the same numerics, in-process); a rule that fails on a rank ends the run with that rank
named, one that cannot work is refused before any process starts, and the shipped cell (None) launches nothing.
Three real launches in all: the ring, its reference, the rule that fails on rank 1.
"""

from __future__ import annotations

import pytest

from edit_course.exercises.nb01 import check_all_reduce_in_a_run
from edit_lab import launch
from edit_lab.config import ConfigError
from edit_lab.rules import rule_source
from edit_lab.records.run import Run
from tests.course.exercise_asserts import not_yet
from tests.course.helpers import solution_function
from tests.helpers import small

STEPS = 4


def ring(grad, reduce_scatter, all_gather):
    return all_gather(reduce_scatter(grad))


def summed(grad, reduce_scatter, all_gather):
    piece = reduce_scatter(grad)  # the mean's slice; the sum is R× it
    return all_gather(piece) * (grad.numel() // piece.numel())


def own_gradient(grad, reduce_scatter, all_gather):
    return grad


def scatter_only(grad, reduce_scatter, all_gather):
    return reduce_scatter(grad)


def fails_on_rank_1(grad, reduce_scatter, all_gather):
    import torch.distributed as dist

    if dist.is_initialized() and dist.get_rank() == 1:  # never in the probe before launch: it runs in-process
        raise ArithmeticError("a rule that breaks on rank 1 only")
    return all_gather(reduce_scatter(grad))


def wall(**kw):
    """2 processes: 1 shard × 2 replicas of nano, a few steps."""
    return small(**{"method": "sync", "shards": 1, "replicas": 2, "steps": STEPS, **kw})


def virtual(**kw):
    return wall(clock="virtual", **kw)


@pytest.fixture(scope="module")
def wall_dir(tmp_path_factory):
    return tmp_path_factory.mktemp("wall")


@pytest.fixture(scope="module")
def virtual_dir(tmp_path_factory):
    """One `out` for every virtual check, so that its reference run (`run-builtin`) is launched once."""
    return tmp_path_factory.mktemp("virtual")


def test_the_ring_passes_on_a_wall_clock_run_against_the_built_in_all_reduce(wall_dir, capsys):
    result = check_all_reduce_in_a_run(ring, wall(), wall_dir / "run")
    out = capsys.readouterr().out
    assert result and result.state == "correct", out
    units = 1 + 2  # nano: the root unit and two blocks
    assert out.startswith(f"Correct: your all-reduce ran on all 2 ranks, {2 * units * STEPS} collectives per rank "
                          f"over {STEPS} steps; the replicas' parameters were identical after every step"), out
    run, ref = Run(wall_dir / "run"), Run(wall_dir / "run-builtin")
    assert run.config.rules.grad_all_reduce.startswith("def ring(grad, reduce_scatter, all_gather):")  # config.json
    assert ref.config.rules.grad_all_reduce is None and ref.config.inner.optimizer == "sgd"  # the check's reference
    for r, per_unit in ((run, 2), (ref, 1)):  # the rule's reduce-scatter and all-gather; the built-in all-reduce
        evs = [e for e in r.events_of("grad_all_reduce", rank=0) if e["group"] == "sync"]
        assert len(evs) == per_unit * units * STEPS
        assert sorted({e["unit"] for e in evs}) == list(range(units))
    assert len(list((wall_dir / "run" / "checkpoints").glob("sync-*"))) == STEPS  # every replica, every step


def test_a_rule_that_fails_on_a_rank_names_the_rank(wall_dir, capsys):
    assert not check_all_reduce_in_a_run(fails_on_rank_1, wall(), wall_dir / "crash")
    not_yet(capsys, None, "your rule failed on rank 1 during the run", "ArithmeticError: a rule that breaks on rank 1")


@pytest.mark.parametrize("rule, says", [
    (summed, ["every replica took the same step, but a 2.00× larger one than the built-in all-reduce's with 2 "
              "replicas: that is the sum of the gradients", "differ from the built-in run's from step 1 on"]),
    (own_gradient, ["after step 0 replica 1's parameters differ from replica 0's",
                    "your function called neither reduce_scatter nor all_gather", "the replicas drift apart",
                    "their losses differ from the built-in run's from step 1 on"]),
])
def test_a_wrong_answer_runs_and_is_told_why(virtual_dir, capsys, rule, says):
    assert not check_all_reduce_in_a_run(rule, virtual(), virtual_dir / "run")
    not_yet(capsys, None, *says)
    assert (virtual_dir / "run" / "summary.json").exists()  # the run itself finished: its records judged it
    assert Run(virtual_dir / "run").config.rules.grad_all_reduce.startswith(f"def {rule.__name__}(")


def test_a_rule_that_cannot_work_is_refused_before_launch(tmp_path, capsys):
    assert not check_all_reduce_in_a_run(scatter_only, virtual(), tmp_path / "refused")
    not_yet(capsys, None, "refused before any process started", "grad_all_reduce_rule='def scatter_only(",
            "it returned shape (4,) for a gradient of shape (8,) (2× too few values")
    assert not (tmp_path / "refused").exists()
    with pytest.raises(ConfigError, match=r"^grad_all_reduce_rule='def scatter_only\(.*' is not allowed"):
        launch(wall(grad_all_reduce_rule=rule_source(scatter_only), out=str(tmp_path / "direct")))
    assert not (tmp_path / "direct").exists()
    with pytest.raises(ConfigError, match=r"^grad_all_reduce_rule=.* None with method='edit' and warmup_steps=0"):
        launch(wall(method="edit", warmup_steps=0, grad_all_reduce_rule=rule_source(ring), out=str(tmp_path / "e")))
    assert not check_all_reduce_in_a_run(lambda g, rs, ag: ag(rs(g)), virtual(), tmp_path / "lambda")
    not_yet(capsys, None, "a lambda cannot be shipped")
    assert not check_all_reduce_in_a_run(ring, virtual(replicas=1), tmp_path / "one")
    not_yet(capsys, None, "at least 2 replicas")
    assert not check_all_reduce_in_a_run(None, virtual(), tmp_path / "none")
    assert capsys.readouterr().out.startswith("Not answered yet.")


def test_the_shipped_cell_is_not_answered_yet_and_launches_nothing(tmp_path, capsys):
    def my_all_reduce(grad, reduce_scatter, all_gather):
        return None  # TODO

    result = check_all_reduce_in_a_run(my_all_reduce, wall(), tmp_path / "run")
    assert not result and result.state == "not answered yet"
    assert capsys.readouterr().out.startswith("Not answered yet. Hint: your function still returns None")
    assert not (tmp_path / "run").exists() and not (tmp_path / "run-builtin").exists()


def test_the_answer_in_solutions_passes_the_check(virtual_dir, tmp_path, capsys):
    my_all_reduce = solution_function("01", "my_all_reduce", tmp_path)
    assert rule_source(my_all_reduce).startswith("def my_all_reduce(")
    assert check_all_reduce_in_a_run(my_all_reduce, virtual(), virtual_dir / "run"), capsys.readouterr().out
    assert capsys.readouterr().out.startswith("Correct")
