"""Notebook 05's check cells: softmax weights, the first armed sync, the clip factor."""

from __future__ import annotations

import copy
import json
import math

from edit_course.exercises.nb05 import (
    check_clip_factor,
    check_first_armed_step,
    check_softmax_function,
    first_armed_step,
)
from edit_lab.core.methods.local_sgd import is_sync_step
from edit_lab.core.penalty import AnomalyDetector
from tests.course.exercise_asserts import not_yet as _not_yet


def test_first_armed_step_matches_the_schedule_and_the_detector():
    W, tau, E = 4, 2, 3
    assert first_armed_step(W, tau, E) == 12
    det = AnomalyDetector(alpha=0.02, arming=E, threshold=3.0)
    armed_at, healthy = None, iter([1.0, 1.1, 0.9, 1.05, 0.95] * 4)
    for step in range(40):
        if not is_sync_step(step, W, tau):
            continue
        if copy.deepcopy(det).observe(1e9)[0]:  # would a huge norm be called an outlier at this sync?
            armed_at = step
            break
        det.observe(next(healthy))
    assert armed_at == first_armed_step(W, tau, E)


def _shifted(norms, t, anomalous):
    keep = [g for g, a in zip(norms, anomalous) if not a]
    if not keep:
        return [0.0] * len(norms)
    e = [0.0 if a else math.exp(-(g - min(keep)) / t) for g, a in zip(norms, anomalous)]
    return [v / sum(e) for v in e]


def _naive(norms, t, anomalous):  # right but for the underflow: exp(-1000) is 0
    e = [0.0 if a else math.exp(-g / t) for g, a in zip(norms, anomalous)]
    return [v / sum(e) if sum(e) else 0.0 for v in e]


def test_check_softmax_function(capsys):
    shipped = check_softmax_function(lambda n, t, a: None)  # the body the notebook ships
    assert not shipped and shipped.state == "not answered yet"
    assert capsys.readouterr().out.startswith("Not answered yet. Hint: your function still returns None")
    assert check_softmax_function(_shifted)
    capsys.readouterr()
    _not_yet(capsys, check_softmax_function(_naive), "1000 and 1001", "underflows")  # exp(-1000) underflows: 0/0
    _not_yet(capsys, check_softmax_function(lambda n, t, a: _shifted([-g for g in n], t, a)),
             "two healthy replicas")  # +G/T
    _not_yet(capsys, check_softmax_function(lambda n, t, a: _shifted(n, t, [False] * len(n))),
             "flagged")  # outliers ignored
    _not_yet(capsys, check_softmax_function(lambda n, t, a: [1 / (g - g) for g in n]), "divides by zero")
    _not_yet(capsys, check_softmax_function(lambda n, t, a: [0.5]), "1 weights for 2 replicas")
    _not_yet(capsys, check_softmax_function(lambda n, t, a: "abc"), "not a list of numbers")
    _not_yet(capsys, check_softmax_function(lambda n, t, a: {}[0]), "raised KeyError")
    _not_yet(capsys, check_softmax_function(lambda n, t, a: [float("nan")] * len(n)), "your weights [nan, nan]")


def test_check_first_armed_step(capsys):
    # the notebook's exercise: W = 4, τ = 2 and the lab's default E = 4 (PenaltyConfig, RunConfig)
    assert not check_first_armed_step(None)
    assert check_first_armed_step(14)
    assert check_first_armed_step(12, arming=3)
    assert check_first_armed_step(10 + 11 * 10, warmup=10, interval=10, arming=10)
    capsys.readouterr()
    # the named wrong answers say what was miscounted, and no wrong answer lists the syncs up to 14
    out = _not_yet(capsys, check_first_armed_step(12), "E-th value", "judges the next one")  # the filling sync
    out += _not_yet(capsys, check_first_armed_step(10), "counts step W as a sync")
    out += _not_yet(capsys, check_first_armed_step(8), "counts steps")
    out += _not_yet(capsys, check_first_armed_step(6), "too low", "only creates the anchors")
    out += _not_yet(capsys, check_first_armed_step(20), "too high")
    assert "14" not in out and "6, 8" not in out


def test_exercise_defaults_are_the_notebooks_and_the_labs():
    from edit_course.tools.notebooks import NOTEBOOKS
    from edit_lab import RunConfig
    from edit_lab.core.penalty import PenaltyConfig

    params = json.loads((NOTEBOOKS / "05_pseudo_gradient_penalty.ipynb").read_text())
    cell = next(c for c in params["cells"] if "parameters" in c["metadata"].get("tags", []))
    values: dict = {}
    exec("".join(cell["source"]), {}, values)
    assert values["ARMING"] == RunConfig().penalty.arming == PenaltyConfig().arming == 4
    assert check_first_armed_step(first_armed_step(values["WARMUP"], values["TAU"], values["ARMING"]))


def test_check_clip_factor(capsys):
    assert not check_clip_factor(None)
    assert check_clip_factor(0.5)
    assert check_clip_factor(10 / (20 + 1e-6))
    assert check_clip_factor(1.0, norm=5.0)  # below φ: not clipped
    capsys.readouterr()
    _not_yet(capsys, check_clip_factor(2.0), "too high", "multiplied by 10/20")  # φ/n upside down


def test_the_playgrounds_answers_are_the_rules(capsys):
    """Part 0's predictions, answered by the library: a lasting rise stays flagged whatever α (the detector and the
    memory learn nothing while flagged), a shared rise flags nobody, and with two replicas a falling peer flags
    nobody with the memory and the healthy replica to the end without it."""
    from edit_course.exercises.nb05 import playground_answers
    from edit_lab.core.penalty import PenaltyConfig

    assert playground_answers() == [] and playground_answers("") == []  # locked: nothing revealed
    locked = capsys.readouterr().out
    assert locked.startswith("Not answered yet.") and "syncs 12" not in locked and "nobody" not in locked
    rise, both, fall, paper = playground_answers("flagged; no; nobody; no")
    # the paper's per-unit detector takes the shared rise for an anomaly of both replicas (stage one's failure)
    assert paper.startswith("the paper's detector (each unit on its own G, E 4) on the same shared rise: flagged: "
                            "replica 0 at syncs 12") and "; replica 1 at syncs 12" in paper
    assert rise.startswith("lasting rise ×1.6 on replica 1 at sync 12: replica 1 at syncs 12–29 (at sync 17: flagged)")
    assert rise.count("replica 1 at syncs 12–29") == 3
    assert both.endswith("flagged: nobody")
    assert fall.endswith("flagged: nobody with the memory (δ_m 1.5); without it (δ_m 0): replica 0 at syncs 12–29")
    assert "Computed by the library's rule" in capsys.readouterr().out
    d10 = playground_answers(["mine"], PenaltyConfig(peers=False))[1]  # the per-unit rule: a shared rise flags both at first
    assert "replica 0 at syncs 12" in d10 and "replica 1 at syncs 12" in d10
