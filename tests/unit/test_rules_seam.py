"""One seam for the reader's rules (`edit_lab.rules.Rules`): the core asks no rule whether it is there, and the
object built from a default `RunConfig` holds the library's own functions, each checked by calling it on a small
hand-built input and comparing with the built-in function's answer."""

from __future__ import annotations

import re
from pathlib import Path

import pytest
import torch

import edit_lab
from edit_lab import RunConfig
from edit_lab.core.penalty import softmax_weights
from edit_lab.protocol import fragment_landing
from edit_lab.rules import Rules, is_builtin, rule_source

LIBRARY = Path(edit_lab.__file__).parent
#: A branch on whether a reader gave a rule: what the seam removes from the core and the training loop.
BRANCH = re.compile(r"rules?\.\w+ is (not )?None|\w*rule\w* is (not )?None|cfg\.rules\.\w+ (is|if)")


def test_the_core_and_the_training_loop_never_ask_whether_a_rule_was_given():
    found = [f"{path.relative_to(LIBRARY)}:{i}: {line.strip()}"
             for folder in ("core", "train") for path in sorted((LIBRARY / folder).rglob("*.py"))
             for i, line in enumerate(path.read_text().splitlines(), 1) if BRANCH.search(line)]
    assert found == []


def test_the_branch_pattern_finds_the_old_branches():
    for old in ("if self.grad_rule is not None:", "self.rule = None if rule is None else x",
                "if cfg.rules.sync_group is None:", "if self.rules.weighting is None:"):
        assert BRANCH.search(old), old


def test_the_defaults_are_the_library_s_functions():
    r = Rules.from_config(RunConfig())
    assert Rules.from_config(RunConfig()) is r  # built once per process and config
    norms, anomalous = [1.0, 2.5, 0.5], [False, True, False]
    assert r.weighting(norms, 0.7, anomalous) == softmax_weights(norms, 0.7, anomalous)
    off = Rules.from_config(RunConfig(penalty_weighting=False))
    assert off.weighting(norms, 0.7, anomalous) == [0.5, 0.0, 0.5]  # the plain mean over the kept replicas
    assert r.straggler(3, 1, 0.02) == 0.0 and is_builtin(r.straggler)
    assert r.sync_groups(2, 3) == [[0, 2, 4], [1, 3, 5]] and is_builtin(r.sync_groups)  # the mesh's columns
    assert r.sync_plan(3) == [[("issue", 0), ("issue", 1), ("wait", 0)], [("issue", 2), ("wait", 1)], [("wait", 2)]]
    assert Rules.from_config(RunConfig(prefetch=False)).sync_plan(2) == [[("issue", 0), ("wait", 0)],
                                                                          [("issue", 1), ("wait", 1)]]
    assert [r.fragment_landing(s, 2, 6, 3) for s in range(3, 20)] == [fragment_landing(s, 2, 6, 3)
                                                                    for s in range(3, 20)]
    assert r.donor((0, 1, 2), (0,)) == 1  # the lowest member that did not join
    grad = torch.tensor([1.0, 2.0, 3.0, 4.0])
    halves = r.grad_all_reduce(grad, lambda t: t[:2] / 2, lambda t: torch.cat([t, t]))
    assert torch.equal(halves, torch.tensor([0.5, 1.0, 0.5, 1.0])) and is_builtin(r.grad_all_reduce)


@pytest.mark.parametrize("nesterov", [True, False])
def test_the_default_outer_step_is_torch_s_sgd(nesterov):
    """Two steps of the rule's default against torch's SGD on a parameter (the path `OuterState` runs)."""
    step = Rules.from_config(RunConfig(outer_nesterov=nesterov)).outer_step
    assert is_builtin(step)
    anchor, buf = torch.tensor([1.0, -2.0, 0.5]), torch.zeros(3)
    p = torch.nn.Parameter(anchor.clone())
    opt = torch.optim.SGD([p], lr=0.7, momentum=0.8, nesterov=nesterov)
    for delta in (torch.tensor([0.2, -0.1, 0.05]), torch.tensor([0.1, 0.3, -0.2])):
        anchor, buf = step(anchor, delta, buf, 0.7, 0.8)
        p.grad = delta.clone()
        opt.step()
        assert torch.equal(anchor, p.detach()) and torch.equal(buf, opt.state[p]["momentum_buffer"])


def test_a_given_rule_replaces_only_its_own_default():
    def halves(norms, temperature, anomalous):
        return [0.5 for _ in norms]

    r = Rules.from_config(RunConfig(method="edit", penalty_weighting_rule=rule_source(halves)))
    assert r.weighting([1.0, 2.0], 1.0, [False, False]) == [0.5, 0.5]
    assert is_builtin(r.grad_all_reduce) and is_builtin(r.straggler) and is_builtin(r.outer_step)
