"""A reader's outer step run by every rank of a real run (`outer_step_rule`, edit_lab/rules/), and notebook 02's
check that judges one by the run's losses against the library's run (`check_outer_step_in_a_run`).

The right step passes on a wall-clock 1 × 2 gloo run (the natural formula within the tolerance, and torch's
own arithmetic written as a rule); each named wrong step runs (on the virtual clock, sharing one reference run) and is
told what it got wrong; a rule that fails on a rank names the rank; one that cannot work is refused before any
process starts; the shipped cell launches nothing; a checkpoint keeps the rule's buffer as the momentum
buffer.
"""

from __future__ import annotations

import contextlib
import io
from pathlib import Path

import pytest

from edit_course.exercises.nb02 import LOSS_REL_TOL, check_outer_step_in_a_run
from edit_lab import launch
from edit_lab.config import ConfigError
from edit_lab.rules import rule_source
from edit_lab.records.run import Run
from tests.course.exercise_asserts import not_yet
from tests.course.helpers import solution_function
from tests.helpers import small


def nesterov(anchor, delta_bar, buf, lr, momentum):
    buf = momentum * buf + delta_bar
    return anchor - lr * (delta_bar + momentum * buf), buf


def torch_nesterov(anchor, delta_bar, buf, lr, momentum):
    """torch's fused SGD(nesterov=True), operation for operation (its vector loop's; its scalar tail fuses them)."""
    buf = buf.mul(momentum).add(delta_bar)
    return anchor.add(delta_bar.add(buf, alpha=momentum), alpha=-lr), buf


def heavy_ball(anchor, delta_bar, buf, lr, momentum):  # the notebook's shipped body
    buf = momentum * buf + delta_bar
    return anchor - lr * buf, buf


def flipped(anchor, delta_bar, buf, lr, momentum):
    buf = momentum * buf + delta_bar
    return anchor + lr * (delta_bar + momentum * buf), buf


def forgotten(anchor, delta_bar, buf, lr, momentum):
    new = momentum * buf + delta_bar
    return anchor - lr * (delta_bar + momentum * new), buf  # hands back the buffer it was given


def plain(anchor, delta_bar, buf, lr, momentum):
    return anchor - lr * delta_bar, buf


def lr_ignored(anchor, delta_bar, buf, lr, momentum):
    buf = momentum * buf + delta_bar
    return anchor - (delta_bar + momentum * buf), buf


def fails_on_the_ranks(anchor, delta_bar, buf, lr, momentum):
    if anchor.numel() > 50:  # never on the refusal's probe (5 and 1 values), always on a model's shard
        raise ArithmeticError("a rule that breaks on the ranks only")
    return anchor, buf


def virtual(**kw):
    """2 replicas × 1 shard of nano on the virtual clock (threads of this process): syncs at 5, 8, 11, 14."""
    return small(**{"method": "diloco", "clock": "virtual", "shards": 1, "replicas": 2, "steps": 14, **kw})


@pytest.fixture(scope="module")
def wall(tmp_path_factory):
    """The right step checked on a wall-clock gloo run of 2 processes, and its reference (2 launches, shared):
    (base, the directory, the result, what the check printed)."""
    d = tmp_path_factory.mktemp("outer_wall")
    base = small(method="diloco", shards=1, replicas=2, steps=14)
    printed = io.StringIO()
    with contextlib.redirect_stdout(printed):
        result = check_outer_step_in_a_run(nesterov, base, d / "run")
    return base, d, result, printed.getvalue()


@pytest.fixture(scope="module")
def shared(tmp_path_factory):
    """One out for every virtual-clock run below: the library's reference next to it is launched once."""
    return tmp_path_factory.mktemp("outer_virtual") / "run"


def test_the_right_step_passes_on_a_wall_clock_run(wall):
    base, d, result, out = wall
    assert result and result.state == "correct", out
    assert out.startswith("Correct: your outer step ran on all 2 ranks, each on its own shard, at the 4 syncs of "
                          "this diloco run; its 14 training losses"), out
    assert f"within {LOSS_REL_TOL:g}" in out and "the loss fell from" in out, out
    run, ref = Run(d / "run"), Run(d / "run-library")
    assert run.config.rules.outer_step.startswith("def nesterov(anchor, delta_bar, buf, lr, momentum):")
    assert ref.config.rules.outer_step is None and ref.config.clock.kind == "wall"
    mine, lib = dict(run.train_losses()), dict(ref.train_losses())
    assert all(abs(mine[s] - lib[s]) <= LOSS_REL_TOL * abs(lib[s]) for s in lib)
    assert all(mine[s] == lib[s] for s in lib if s < 5)  # before the first sync the rule never ran


def close(a: list[tuple[int, float]], b: list[tuple[int, float]]) -> bool:
    return [s for s, _ in a] == [s for s, _ in b] and all(abs(x - y) <= LOSS_REL_TOL * abs(y)
                                                          for (_, x), (_, y) in zip(a, b))


def test_the_librarys_own_nesterov_as_a_rule_reproduces_the_built_in_run(wall, capsys):
    """Within the tolerance; bit for bit where torch's kernel runs its vector loop (a nano run on x86 does)."""
    base, d, _, _ = wall
    reference = Run(d / "run-library")  # launched by the fixture's check; reused here, not launched again
    mtime = (reference.path / "summary.json").stat().st_mtime
    assert check_outer_step_in_a_run(torch_nesterov, base, d / "run"), capsys.readouterr().out
    assert "equal the library's run " in capsys.readouterr().out
    assert (reference.path / "summary.json").stat().st_mtime == mtime
    run = Run(d / "run")
    assert close(run.train_losses(), reference.train_losses())
    assert run.summary["final_val_loss"] == pytest.approx(reference.summary["final_val_loss"], rel=LOSS_REL_TOL)


@pytest.mark.parametrize("rule, says", [
    (flipped, ["the sign is flipped", "after sync 1 (the start of step 5) its mean training loss rose from",
               "(step 4) to"]),
    (forgotten, ["the momentum is forgotten", "your losses equal the library's through sync 1 and part from "
                 "sync 2 (the start of step 8): at step 8"]),
    (plain, ["plain SGD on Δ̄, without momentum", "0.7× Δ̄", "1.26×", "part from sync 1 (the start of step 5)"]),
    (lr_ignored, ["the learning rate is ignored", "(1+μ) = 1.8× Δ̄", "part from sync 1 (the start of step 5)"]),
])
def test_a_named_wrong_step_runs_and_is_told_why(shared, capsys, rule, says):
    assert not check_outer_step_in_a_run(rule, virtual(), shared)
    out = not_yet(capsys, None, *says)
    assert "final validation loss" in out, out
    assert Run(shared).config.rules.outer_step.startswith(f"def {rule.__name__}(")  # the run itself finished
    assert (shared / "summary.json").exists()


def test_the_virtual_clock_honours_the_rule_and_a_rank_failure_names_the_rank(shared, capsys):
    assert check_outer_step_in_a_run(nesterov, virtual(), shared), capsys.readouterr().out
    assert capsys.readouterr().out.startswith("Correct: your outer step ran on all 2 ranks")
    assert not check_outer_step_in_a_run(fails_on_the_ranks, virtual(), shared)
    not_yet(capsys, None, "your rule failed on rank", "ArithmeticError: a rule that breaks on the ranks only")


def test_a_rule_that_cannot_work_is_refused_before_launch(tmp_path, capsys):
    def wrong_shape(anchor, delta_bar, buf, lr, momentum):
        return anchor[:1], buf

    with pytest.raises(ConfigError, match=r"^outer_step_rule='def wrong_shape\(anchor, delta_bar, buf, lr, "
                                          r"momentum\):' is not allowed: .*shape \(1,\)"):
        launch(virtual(outer_step_rule=rule_source(wrong_shape), out=str(tmp_path / "direct")))
    assert not (tmp_path / "direct").exists()
    assert not check_outer_step_in_a_run(wrong_shape, virtual(), tmp_path / "refused")
    not_yet(capsys, None, "refused before any process started", "outer_step_rule=", "anchor's shape")
    assert not (tmp_path / "refused").exists() and not (tmp_path / "refused-library").exists()
    assert not check_outer_step_in_a_run(nesterov, virtual(method="sync"), tmp_path / "sync")
    not_yet(capsys, None, "outer_step_rule=", "not allowed with method='sync'", "diloco, edit, aedit",
            "sync has no outer step")
    assert not check_outer_step_in_a_run(lambda a, d, b, lr, m: (a, b), virtual(), tmp_path / "lambda")
    not_yet(capsys, None, "a lambda cannot be shipped")
    assert not check_outer_step_in_a_run(nesterov, virtual(method="aedit", clock="wall"), tmp_path / "aedit")
    not_yet(capsys, None, "syncs by the wall clock")
    assert not check_outer_step_in_a_run(None, virtual(), tmp_path / "none")
    assert capsys.readouterr().out.startswith("Not answered yet")
    assert not any(tmp_path.iterdir())  # nothing launched


def test_the_shipped_cell_is_not_answered_yet_and_launches_nothing(tmp_path, capsys):
    result = check_outer_step_in_a_run(heavy_ball, virtual(), tmp_path / "run")
    assert not result and result.state == "not answered yet"
    assert capsys.readouterr().out.startswith("Not answered yet. Hint: your outer_step is still the shipped "
                                              "heavy-ball step")
    assert not (tmp_path / "run").exists() and not (tmp_path / "run-library").exists()


def test_the_answer_in_solutions_passes_the_check(shared, tmp_path, capsys):
    import torch

    outer_step = solution_function("02", "outer_step", tmp_path, torch=torch)
    assert rule_source(outer_step).startswith("def outer_step(")
    assert check_outer_step_in_a_run(outer_step, virtual(), shared), capsys.readouterr().out
    assert capsys.readouterr().out.startswith("Correct")


def test_a_checkpoint_keeps_the_rules_buffer_and_resumes_under_either_step(tmp_path):
    """The rule's buffer is the optimizer's momentum buffer: a run of torch's own arithmetic as a rule, resumed
    after its second sync with the rule or with the library's step, is the library's run step for step (within
    the tolerance)."""
    library = launch(virtual(out=str(tmp_path / "library")))
    ruled = launch(virtual(outer_step_rule=rule_source(torch_nesterov), checkpoint_every=1,
                           out=str(tmp_path / "ruled")))
    assert close(ruled.train_losses(), library.train_losses())
    ckpt = sorted(Path(ruled.path, "checkpoints").glob("sync-*"))[1]  # after the second sync (step 8)
    state = __import__("torch").load(ckpt / "rank0.pt", weights_only=False)
    bufs = [s["momentum_buffer"] for s in state["method"]["outer"]["optimizer"]["state"].values()]
    assert bufs and all(b.abs().sum() > 0 for b in bufs)  # what the rule returned, stored as the momentum
    for rule, name in ((rule_source(torch_nesterov), "again"), (None, "built-in")):
        resumed = launch(virtual(outer_step_rule=rule, resume=str(ckpt), out=str(tmp_path / name)))
        assert resumed.syncs[0]["kind"] == "resume" and resumed.syncs[0]["step"] == 8
        assert close(resumed.train_losses(), library.train_losses()), name
