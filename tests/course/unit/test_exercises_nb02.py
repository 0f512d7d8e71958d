"""Notebook 02's check cells: Nesterov's first outer step, the sync schedule, the bytes saved."""

from __future__ import annotations

import pytest
import torch

from edit_course.exercises.nb02 import (
    check_bytes_ratio_prediction,
    check_first_sync_step,
    check_outer_step,
    first_model_sync,
    nesterov_first_step,
)
from edit_lab.core.methods.local_sgd import is_anchor_step, is_sync_step
from edit_lab.core.outer import OuterState
from tests.course.exercise_asserts import not_yet as _not_yet


def test_nesterov_factor_is_what_the_outer_optimizer_does():
    for lr, mu in ((0.7, 0.8), (0.7, 0.9), (1.0, 0.0)):
        theta = torch.zeros(3)
        outer = OuterState([theta], lr, mu, nesterov=True)
        delta = torch.tensor([1.0, -2.0, 0.5])
        outer.step(0, delta)
        assert torch.allclose(outer.anchors[0].detach(), -nesterov_first_step(lr, mu) * delta, atol=1e-6)
    assert nesterov_first_step(0.7, 0.8) == pytest.approx(1.26)


def test_first_sync_matches_the_schedule():
    W, tau = 3, 2
    syncs = [s for s in range(12) if is_sync_step(s, W, tau)]
    assert is_anchor_step(3, W) and syncs[0] == first_model_sync(W, tau) == 5


def test_check_first_sync_step(capsys):
    assert not check_first_sync_step(None)
    assert check_first_sync_step(5)
    assert check_first_sync_step(30, warmup=10, interval=20)
    capsys.readouterr()
    _not_yet(capsys, check_first_sync_step(3), "too low", "only copies")  # the anchor creation
    _not_yet(capsys, check_first_sync_step("five"), "not a number", "a step number")


def _nesterov(anchor, delta_bar, buf, lr, momentum):
    buf = momentum * buf + delta_bar
    return anchor - lr * (delta_bar + momentum * buf), buf


def _heavy_ball(anchor, delta_bar, buf, lr, momentum):  # what the notebook ships (heavy-ball fed Δ̄)
    buf = momentum * buf + delta_bar
    return anchor - lr * buf, buf


def test_check_outer_step_against_outer_state(capsys):
    assert check_outer_step(_nesterov)
    assert check_outer_step(_nesterov, lr=1.0, momentum=0.9)
    assert "Correct" in capsys.readouterr().out
    shipped = check_outer_step(_heavy_ball)  # the notebook's shipped step: not answered yet, with the way on
    assert not shipped and shipped.state == "not answered yet"
    assert capsys.readouterr().out.startswith("Not answered yet. Hint: this is still heavy-ball")
    assert not check_outer_step(lambda a, d, b, lr, mu: (a - lr * d, b))
    assert "plain SGD" in capsys.readouterr().out
    assert not check_outer_step(lambda a, d, b, lr, mu: (a + lr * d, b))  # the wrong sign
    assert "Not yet: after step 1" in capsys.readouterr().out
    _not_yet(capsys, check_outer_step(lambda a, d, b, lr, mu: a), "return the pair")  # not a pair: explained
    _not_yet(capsys, check_outer_step(lambda a, d, b, lr, mu: 1 / 0), "raised ZeroDivisionError")
    _not_yet(capsys, check_outer_step(lambda a, d, b, lr, mu: (a[:2], b)), "shape")


def test_check_bytes_ratio_prediction(capsys):
    assert check_bytes_ratio_prediction(10, 10.0, 10)
    assert not check_bytes_ratio_prediction(1, 10.0, 10)
    assert "Not quite" in capsys.readouterr().out
    assert not check_bytes_ratio_prediction(None, 10.0, 10)
