"""edit_lab/rules.py: a reader's function shipped to the ranks as source, refused before launch when it cannot run."""

from __future__ import annotations

import math
import re

import pytest

from edit_lab import RunConfig
from edit_lab.config import ConfigError
from edit_lab.rules import (RuleError, load_rule, rule_source, straggler, straggler_problem, weighting,
                            weighting_problem)


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


# ------------------------------------------------------------------------------- the straggler rule
def throttle(step, replica, compute_s):
    return compute_s if replica == 1 and step % 2 == 1 else 0


def test_the_straggler_rule_answers_floats_and_pauses_only_where_it_says():
    rule = straggler(rule_source(throttle))
    assert rule(3, 1, 0.25) == 0.25 and rule(2, 1, 0.25) == 0.0 and rule(3, 0, 0.25) == 0.0
    assert all(type(rule(s, r, 0.1)) is float for s in range(4) for r in range(2))  # an int 0 becomes 0.0
    assert straggler_problem(rule_source(throttle)) is None


@pytest.mark.parametrize("body, says", [
    ("return None", "returned None, not a number of seconds"),
    ("return True", "returned True, not a number of seconds"),
    ("return [compute_s]", "not a number of seconds"),
    ("return 'slow'", "not a number of seconds"),
    ("return -compute_s", "finite and >= 0"),
    ("return float('inf')", "finite and >= 0"),
    ("return float('nan')", "finite and >= 0"),
    ("return 1 / abs(step - 7)", "ZeroDivisionError"),  # the probe reaches step 7
    ("return compute_s / replica", "ZeroDivisionError"),  # and replica 0
])
def test_a_straggler_rule_that_cannot_run_is_found_before_launch(body, says):
    why = straggler_problem(f"def rule(step, replica, compute_s):\n    {body}\n")
    assert why is not None and why.startswith("fn(step, replica, compute_s) -> seconds of pause") and says in why, why


def test_run_config_refuses_a_bad_straggler_rule_naming_the_field():
    bad = "def rule(step, replica, compute_s):\n    return -1.0\n"
    with pytest.raises(ConfigError, match=r"^straggler_rule='def rule\(step, replica, compute_s\):' is not allowed: "
                                          r".*finite and >= 0"):
        RunConfig(straggler_rule=bad).validate()
    with pytest.raises(ConfigError, match=r"^straggler_rule=.*does not parse"):
        RunConfig(straggler_rule="def rule(step, replica, compute_s)\n    return 0\n").validate()
    ok = RunConfig(straggler_rule=rule_source(throttle)).validate()
    assert RunConfig.from_dict(ok.to_dict()).straggler_rule == rule_source(throttle)  # config.json keeps it


def test_the_straggler_model_adds_the_rule_to_the_other_kinds():
    from edit_lab.stragglers import StragglerModel

    source = rule_source(throttle)
    alone = StragglerModel(rule=source)
    assert alone.delay(3, 1, 0.02) == (0.02, "rule") and alone.delay(2, 1, 0.02) == (0.0, None)
    assert alone.needs_compute(0) and not StragglerModel().needs_compute(0)  # the rule is given the compute
    slow = StragglerModel(slow_replicas=(1,), factor=3.0, rule=source)
    d, why = slow.delay(3, 1, 0.02)
    assert d == pytest.approx(2 * 0.02 + 0.02) and why == "consistent+rule"
    assert slow.delay(2, 1, 0.02) == (pytest.approx(0.04), "consistent")
    both = StragglerModel(pause_prob=1.0, pause_s=0.05, rule=source)
    assert both.delay(3, 1, 0.02) == (pytest.approx(0.07), "random+rule")
    cfg = RunConfig(replicas=2, straggler_rule=source)
    assert StragglerModel.from_config(cfg).delay(5, 1, 0.01) == (0.01, "rule")
