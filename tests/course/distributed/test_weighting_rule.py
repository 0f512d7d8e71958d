"""A reader's weighting rule run by every rank of a real EDiT run (`penalty_weighting_rule`, edit_lab/rules/),
and notebook 05's check that judges one by the run's own records (`check_weighting_in_a_run`).

The softmax written by hand must give the library's run bit for bit (it is the same arithmetic); named wrong
rules must train and be told what they got wrong, at which step and unit; a rule that fails on a rank ends the
run with that rank named, and one that cannot work is refused before any process starts.
"""

from __future__ import annotations

import math

import pytest
import torch

from edit_course.exercises.nb05 import check_weighting_in_a_run
from edit_lab import launch
from edit_lab.rules import rule_source
from tests.course.exercise_asserts import not_yet
from tests.helpers import small


def softmax_by_hand(norms, temperature, anomalous):
    import math

    keep = [g for g, a in zip(norms, anomalous) if not a and math.isfinite(g)]
    if not keep:
        return [0.0] * len(norms)
    low = min(keep)
    e = [0.0 if a or not math.isfinite(g) else math.exp(-(g - low) / temperature) for g, a in zip(norms, anomalous)]
    total = math.fsum(e)
    return [v / total for v in e]


def larger_norm_counts_more(norms, temperature, anomalous):
    e = [0.0 if a else math.exp(g / temperature) for g, a in zip(norms, anomalous)]
    return [v / sum(e) for v in e]


def equal_weights(norms, temperature, anomalous):
    return [1.0 / len(norms)] * len(norms)


def fails_on_a_small_norm(norms, temperature, anomalous):
    if min(norms) < 0.99:  # never on the refusal's probe ([1, 2]), always on a real run's norms
        raise ZeroDivisionError("a rule that breaks on the ranks only")
    return [1.0 / len(norms)] * len(norms)


def base(**kw):
    return small(**{"method": "edit", "shards": 2, "replicas": 2, "steps": 10, "warmup_steps": 2,
                    "sync_interval": 2, **kw})


def test_the_softmax_by_hand_gives_the_librarys_run_bit_for_bit(tmp_path, capsys):
    library = launch(base(out=str(tmp_path / "library")))
    assert check_weighting_in_a_run(softmax_by_hand, base(), tmp_path / "rule")
    out = capsys.readouterr().out
    assert "Correct: your rule ran on all 4 ranks" in out and "(4 syncs × 3 units)" in out, out
    mine = torch.load(tmp_path / "rule" / "model.pt", weights_only=True)
    theirs = library.state_dict()
    assert mine.keys() == theirs.keys() and all(torch.equal(mine[k], theirs[k]) for k in mine)


@pytest.mark.parametrize("rule, says", [(larger_norm_counts_more, "The larger norm got the larger weight"),
                                        (equal_weights, "Every replica got the same weight")])
def test_a_wrong_rule_trains_and_is_told_where_and_why(tmp_path, capsys, rule, says):
    assert not check_weighting_in_a_run(rule, base(), tmp_path / "run")
    out = not_yet(capsys, None, "at step 4, unit 0", "the ranks applied your weights", "the softmax gives", says)
    assert (tmp_path / "run" / "summary.json").exists(), out  # the run itself finished: the records judged it


def test_a_rule_that_fails_on_a_rank_or_cannot_run_is_said_not_raised(tmp_path, capsys):
    assert not check_weighting_in_a_run(fails_on_a_small_norm, base(), tmp_path / "crash")
    not_yet(capsys, None, "your rule failed on rank", "ZeroDivisionError: a rule that breaks on the ranks only")

    def too_few(norms, temperature, anomalous):
        return [1.0]

    assert not check_weighting_in_a_run(too_few, base(), tmp_path / "refused")
    not_yet(capsys, None, "refused before any process started", "penalty_weighting_rule", "1 weights for 2 replicas")
    assert not (tmp_path / "refused").exists()
    assert not check_weighting_in_a_run(lambda n, t, a: n, base(), tmp_path / "lambda")
    not_yet(capsys, None, "a lambda cannot be shipped")
    assert not check_weighting_in_a_run(None, base(), tmp_path / "none")
    capsys.readouterr()


def test_the_rule_is_recorded_with_the_run(tmp_path):
    run = launch(base(steps=6, penalty_weighting_rule=rule_source(equal_weights), out=str(tmp_path / "run")))
    assert run.config.rules.weighting.startswith("def equal_weights(norms, temperature, anomalous):")
    weights = {round(p["weight"], 12) for p in run.penalty if p.get("kind", "penalty") == "penalty"}
    assert weights == {0.5}


def test_the_shipped_exercise_is_not_answered_yet_and_launches_nothing(tmp_path, capsys):
    def my_softmax_weights(norms, temperature, anomalous):
        return None  # your code

    result = check_weighting_in_a_run(my_softmax_weights, base(), tmp_path / "run")
    assert not result and result.state == "not answered yet"
    assert capsys.readouterr().out.startswith("Not answered yet. Hint: write the function of exercise 1 first")
    assert not (tmp_path / "run").exists()
