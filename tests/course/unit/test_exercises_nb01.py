"""Notebook 01's check cells: sync-group bytes per step and the straggler's cost."""

from __future__ import annotations

import torch

from edit_course.exercises.nb01 import (
    check_all_reduce_mean,
    check_slowdown_prediction,
    check_throughput_fraction,
    model_parameters,
    reference_all_reduce_mean,
    sharded_values,
)
from tests.course.exercise_asserts import not_yet as _not_yet


def test_sizes():
    assert model_parameters("tiny") == 230_976
    assert sharded_values("tiny", 2) == 115_488
    assert sharded_values("nano", 2) == 41_632 // 2


def test_check_throughput_fraction(capsys):
    assert not check_throughput_fraction(None)
    assert check_throughput_fraction(1 / 3)
    assert check_throughput_fraction(0.333)
    capsys.readouterr()
    out = _not_yet(capsys, check_throughput_fraction(7 / 8 + 1 / 24), "too high", "slowest")  # the average pace
    assert "0.333" not in out  # the right number is not given away
    _not_yet(capsys, check_throughput_fraction(3), "slowdown factor")
    _not_yet(capsys, check_throughput_fraction(33.3), "percentage")


def test_sharded_values_match_the_engine_layout():
    from edit_lab.core.sharding import UnitLayout
    from edit_lab.core.model import build_model

    for model in ("nano", "tiny"):
        units = build_model(model, 0).units()
        assert model_parameters(model) == sum(p.numel() for u in units for p in u.parameters())
        for S in (1, 2, 3, 4):
            assert sharded_values(model, S) == sum(UnitLayout.of(u, S).shard_size for u in units)


def _reduce_scatter_mean(tensors):
    return list(torch.stack(tensors).mean(0).chunk(len(tensors)))


def _all_gather(pieces):
    return [torch.cat(pieces) for _ in pieces]


def test_check_all_reduce_mean_passes_the_composition_and_explains_wrong_ones(capsys):
    assert check_all_reduce_mean(lambda g: _all_gather(_reduce_scatter_mean(g)))
    assert "Correct" in capsys.readouterr().out
    wrong = {
        "sum over": lambda g: [torch.stack(g).sum(0) for _ in g],
        "all-gather is missing": _reduce_scatter_mean,
        "disagree": lambda g: [torch.stack(g).mean(0) + i for i in range(len(g))],
        "raised ZeroDivisionError": lambda g: 1 / 0,
        "return a list": lambda g: torch.stack(g).mean(0),
        "not a list of tensors": lambda g: ["a"] * len(g),
    }
    for why, fn in wrong.items():
        assert not check_all_reduce_mean(fn), why
        out = capsys.readouterr().out
        assert out.startswith("Not yet") and why in out, (why, out)
    # what the notebook ships: no exchange at all, the TODO's state, said as not answered yet with the way on
    shipped = check_all_reduce_mean(lambda g: [x.clone() for x in g])
    out = capsys.readouterr().out
    assert not shipped and shipped.state == "not answered yet"
    assert out.startswith("Not answered yet. Hint: every rank still holds its own gradient (the shipped TODO)"), out


def test_reference_all_reduce_is_what_the_lab_averages():
    grads = [torch.tensor([1.0, 3.0]), torch.tensor([3.0, 5.0])]
    assert all(torch.equal(t, torch.tensor([2.0, 4.0], dtype=torch.float64)) for t in reference_all_reduce_mean(grads))


def test_check_slowdown_prediction(capsys):
    assert check_slowdown_prediction(0.55, 0.56, 2.0)
    assert not check_slowdown_prediction(0.9, 0.56, 2.0)  # as if the straggler cost nothing
    assert "1/2 = 0.50" in capsys.readouterr().out
    assert not check_slowdown_prediction(None, 0.56, 2.0)


def test_check_slowdown_prediction_says_the_cost_models_fraction(capsys):
    assert check_slowdown_prediction(0.75, 0.79, 2.0, expected=0.70)  # judged against the measured 0.79
    out = capsys.readouterr().out
    assert "s / (s + p) = 0.70" in out and "only if compute were all of a step" in out
    assert not check_slowdown_prediction(0.5, 0.79, 2.0, expected=0.70)  # 1/k: compute taken for all of a step
