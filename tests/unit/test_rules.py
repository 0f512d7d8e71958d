"""edit_lab/rules.py: a reader's function shipped to the ranks as source, refused before launch when it cannot run."""

from __future__ import annotations

import math
import re

import pytest

from edit_lab import RunConfig
from edit_lab.config import ConfigError
from edit_lab.rules import RuleError, load_rule, rule_source, weighting, weighting_problem


def halves(norms, temperature, anomalous):
    return [0.5 for _ in norms]


def test_the_source_of_a_def_travels_and_compiles_back_to_the_same_rule():
    source = rule_source(halves)
    assert source.startswith("def halves(norms, temperature, anomalous):")
    assert load_rule(source)([1.0, 2.0], 1.0, [False, False]) == [0.5, 0.5]
    assert weighting(source)((1.0, 2.0), 1.0, (False, False)) == [0.5, 0.5]  # lists of floats, whatever came in


def test_what_cannot_reach_the_ranks_is_refused_with_the_reason():
    with pytest.raises(RuleError, match="a lambda cannot be shipped"):
        rule_source(lambda n, t, a: n)
    with pytest.raises(RuleError, match="expected a function"):
        rule_source(math.exp)
    scale = 2.0

    def closure(norms, temperature, anomalous):
        return [scale] * len(norms)

    with pytest.raises(RuleError, match="reads scale of an enclosing function"):
        rule_source(closure)


@pytest.mark.parametrize("source, says", [
    ("def f(n, t, a)\n    return n", "does not parse"),
    ("def f(n, t, a):\n    return n\n\ndef g(n, t, a):\n    return n", "found 2 function(s)"),
    ("x = 1\ndef f(n, t, a):\n    return n", "1 other statement(s)"),
    (3, "must be Python source text"),
])
def test_load_rule_refuses_anything_but_one_function(source, says):
    with pytest.raises(RuleError, match=re.escape(says)):
        load_rule(source)


@pytest.mark.parametrize("body, says", [
    ("return [1.0]", "1 weights for 2 replicas"),
    ("return 0.5", "not a list of numbers"),
    ("return [-1.0, 2.0]", "finite and >= 0"),
    ("return [float('nan'), 1.0]", "finite and >= 0"),
    ("return 1 / 0", "ZeroDivisionError: division by zero"),
])
def test_a_rule_that_answers_in_the_wrong_shape_is_found_before_launch(body, says):
    source = f"def rule(norms, temperature, anomalous):\n    {body}\n"
    why = weighting_problem(source)
    assert why is not None and says in why and why.startswith("fn(norms, temperature, anomalous)"), why
    assert weighting_problem(rule_source(halves)) is None


def test_run_config_refuses_a_bad_rule_naming_the_field():
    bad = "def rule(norms, temperature, anomalous):\n    return [1.0]\n"
    with pytest.raises(ConfigError, match=r"^penalty_weighting_rule='def rule\(norms, temperature, anomalous\):.*' "
                                          r"is not allowed: .*1 weights for 2 replicas"):
        RunConfig(method="edit", penalty_weighting_rule=bad).validate()
    with pytest.raises(ConfigError, match="penalty_weighting_rule=.*None while weighting is off"):
        RunConfig(method="edit", penalty_weighting=False, penalty_weighting_rule=rule_source(halves)).validate()
    ok = RunConfig(method="edit", penalty_weighting_rule=rule_source(halves)).validate()
    assert RunConfig.from_dict(ok.to_dict()).penalty_weighting_rule == rule_source(halves)  # config.json keeps it
