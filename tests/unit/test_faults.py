"""The fault injectors and the non-finite-loss guard, in-process (the launcher side is in distributed/)."""

from __future__ import annotations

import math

import pytest
import torch

from edit_lab import RunConfig
from edit_lab.train.faults import InjectedFault, check_finite, inject, maybe_poison_loss


def test_inject_is_a_no_op_off_target():
    cfg = RunConfig(fault_rank=1, fault_step=3, fault_kind="raise")
    for rank, step in [(0, 3), (1, 2), (1, 4), (3, 3)]:
        inject(cfg, rank, step)  # nothing happens
    inject(RunConfig(), 0, 0)  # the default config injects nothing


def test_inject_raise(capfd):
    cfg = RunConfig(fault_rank=1, fault_step=3, fault_kind="raise")
    with pytest.raises(InjectedFault, match="rank 1 at step 3"):
        inject(cfg, 1, 3)
    assert "rank 1 will raise at the start of step 3" in capfd.readouterr().err  # announced in the rank's log


def test_nan_poisons_only_its_rank_and_step_and_keeps_the_graph():
    cfg = RunConfig(fault_rank=2, fault_step=5, fault_kind="nan")
    w = torch.tensor(2.0, requires_grad=True)
    loss = w * 3.0
    assert maybe_poison_loss(cfg, 2, 4, loss) is loss
    assert maybe_poison_loss(cfg, 1, 5, loss) is loss
    bad = maybe_poison_loss(cfg, 2, 5, loss)
    assert math.isnan(float(bad.detach()))
    bad.backward()
    assert math.isnan(float(w.grad))  # the backward sees the blow-up too
    inject(cfg, 2, 5)  # "nan" does not act at the start of the step
    assert maybe_poison_loss(RunConfig(fault_rank=2, fault_step=5, fault_kind="raise"), 2, 5, loss) is loss


@pytest.mark.parametrize("value", [float("nan"), float("inf"), float("-inf")])
def test_check_finite_stops_methods_without_penalty(value):
    loss = torch.tensor(value)
    for cfg in (RunConfig(method="sync"), RunConfig(method="diloco"), RunConfig(method="edit", penalty_anomaly=False)):
        with pytest.raises(FloatingPointError, match=r"rank 3: the loss is .* at step 7"):
            check_finite(cfg, 3, 7, loss)


def test_check_finite_lets_the_penalty_handle_it():
    for method in ("edit", "aedit"):
        check_finite(RunConfig(method=method), 0, 0, torch.tensor(float("nan")))  # the penalty excludes it


def test_check_finite_passes_finite_losses():
    check_finite(RunConfig(method="sync"), 0, 0, torch.tensor(5.5))
