"""Notebook 02's check cells: Nesterov's first outer step, the sync schedule, the bytes saved."""

from __future__ import annotations

import pytest
import torch

from edit_lab.exercises.nb02 import (bytes_per_step, check_bytes_per_step, check_first_sync_step,
                                     check_nesterov_factor, first_model_sync, nesterov_first_step)
from edit_lab.methods.local_sgd import is_anchor_step, is_sync_step
from edit_lab.outer import OuterState


def test_nesterov_factor_is_what_the_outer_optimizer_does():
    for lr, mu in ((0.7, 0.8), (0.7, 0.9), (1.0, 0.0)):
        theta = torch.zeros(3)
        outer = OuterState([theta], lr, mu, nesterov=True)
        delta = torch.tensor([1.0, -2.0, 0.5])
        outer.step(0, delta)
        assert torch.allclose(outer.anchors[0].detach(), -nesterov_first_step(lr, mu) * delta, atol=1e-6)
    assert nesterov_first_step(0.7, 0.8) == pytest.approx(1.26)


def test_check_nesterov_factor(capsys):
    assert check_nesterov_factor(None) is False
    assert "Hint" in capsys.readouterr().out
    assert check_nesterov_factor(1.33) is True
    assert check_nesterov_factor(1.26, momentum=0.8) is True
    with pytest.raises(AssertionError, match="lr·\\(1\\+μ\\)"):
        check_nesterov_factor(0.7)  # plain SGD, momentum forgotten


def test_first_sync_matches_the_schedule():
    W, tau = 3, 2
    syncs = [s for s in range(12) if is_sync_step(s, W, tau)]
    assert is_anchor_step(3, W) and syncs[0] == first_model_sync(W, tau) == 5


def test_check_first_sync_step():
    assert check_first_sync_step(None) is False
    assert check_first_sync_step(5) is True
    assert check_first_sync_step(30, warmup=10, interval=20) is True
    with pytest.raises(AssertionError, match="only copies"):
        check_first_sync_step(3)  # the anchor creation


def test_check_bytes_per_step():
    assert bytes_per_step("tiny", 2, 10) == pytest.approx(46_195.2)
    assert check_bytes_per_step(None) is False
    assert check_bytes_per_step(46_195) is True
    assert check_bytes_per_step(4 * 41_632 / 2 / 4, model="nano", shards=2, interval=4) is True
    with pytest.raises(AssertionError, match="once every"):
        check_bytes_per_step(461_952)  # what sync sends per step
