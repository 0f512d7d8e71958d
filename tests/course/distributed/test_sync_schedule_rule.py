"""A reader's layer-wise sync order run by every rank of a real EDiT run (`sync_schedule_rule`, edit_lab/rules/),
and notebook 04's check that judges one by the run (`check_schedule_in_a_run`).

The engine's own prefetch order as a rule gives the prefetch=True and the prefetch=False run bit for bit; the
notebook's answer passes on a wall-clock gloo run; a gather before the wait runs and is told how many tensors
and which loss differ; a schedule whose early issue the engine runs only after the compute is told that nothing
was in flight during compute; a schedule that cannot run is refused before launch; the shipped cell (without
prefetch) launches nothing.
"""

from __future__ import annotations

import pytest
import torch

from edit_course.exercises.nb04 import check_schedule_in_a_run, prefetch_schedule
from edit_lab import ConfigError, launch
from edit_lab.rules import rule_source
from tests.course.exercise_asserts import not_yet
from tests.course.helpers import solution_function
from tests.helpers import small


def engine_order(n_units):
    ops = [("issue", 0)]
    for unit in range(n_units):
        if unit + 1 < n_units:
            ops.append(("issue", unit + 1))
        ops += [("wait", unit), ("all_gather", unit), ("compute", unit)]
    return ops


def issued_after_the_gather(n_units):
    """Listed before unit l computes, but after its all-gather: the engine runs it in unit l+1's pre-forward."""
    ops = [("issue", 0), ("wait", 0)]
    for unit in range(n_units):
        ops.append(("all_gather", unit))
        if unit + 1 < n_units:
            ops.append(("issue", unit + 1))
        ops.append(("compute", unit))
        if unit + 1 < n_units:
            ops.append(("wait", unit + 1))
    return ops


def gather_before_wait(n_units):
    ops = [("issue", 0)]
    for unit in range(n_units):
        if unit + 1 < n_units:
            ops.append(("issue", unit + 1))
        first = [("all_gather", unit), ("wait", unit)] if unit == 1 else [("wait", unit), ("all_gather", unit)]
        ops += first + [("compute", unit)]
    return ops


def last_gathered_early(n_units):
    ops = [("issue", 0)]
    for unit in range(n_units):
        if unit + 1 < n_units:
            ops.append(("issue", unit + 1))
        last = unit == n_units - 1
        ops += [("all_gather", unit), ("wait", unit)] if last else [("wait", unit), ("all_gather", unit)]
        ops.append(("compute", unit))
    return ops


def shipped_cell(n_units):
    return None


def no_prefetch(n_units):
    return [op for unit in range(n_units)
            for op in (("issue", unit), ("wait", unit), ("all_gather", unit), ("compute", unit))]


def virtual(**kw):
    """2 shards × 2 replicas of nano on the virtual clock (threads of this process), a slow link, 2 training syncs."""
    return small(**{"method": "edit", "clock": "virtual", "shards": 2, "replicas": 2, "steps": 9,
                    "link_latency_ms": 1.0, "link_bandwidth_mb_s": 5.0, **kw})


@pytest.fixture(scope="module")
def orders(tmp_path_factory):
    """The engine's prefetch order as a rule, and prefetch on and off without one (virtual clock)."""
    d = tmp_path_factory.mktemp("orders")
    base = virtual()
    runs = {name: launch(base.replace(out=str(d / name), **kw), overwrite=True) for name, kw in (
        ("rule", {"sync_schedule_rule": rule_source(engine_order)}), ("on", {"prefetch": True}),
        ("off", {"prefetch": False}))}
    return runs


def test_the_engines_order_as_a_rule_is_bit_identical_to_prefetch_on_and_off(orders):
    rule = orders["rule"].state_dict()
    for other in ("on", "off"):
        theirs = orders[other].state_dict()
        assert rule.keys() == theirs.keys()
        assert all(torch.equal(rule[k], theirs[k]) for k in rule), other
        losses = [[m["loss"] for m in r.metrics if m.get("kind") == "train"] for r in (orders["rule"], orders[other])]
        assert losses[0] == losses[1], other
    assert orders["rule"].config.rules.sync_schedule.startswith("def engine_order(n_units):")


def test_the_answer_passes_on_a_wall_clock_gloo_run(tmp_path, capsys):
    answer = solution_function("04", "my_schedule", tmp_path)  # its cell's own replay check prints a line
    assert answer(3) == prefetch_schedule(3)
    capsys.readouterr()
    base = small(method="edit", shards=1, replicas=2, steps=6, link_latency_ms=1.0, link_bandwidth_mb_s=5.0)
    result = check_schedule_in_a_run(answer, base, tmp_path / "wall")
    out = capsys.readouterr().out
    assert result and result.state == "correct", out
    assert out.startswith("Correct: your schedule ran on all 2 ranks (sync step 5: issue 0, issue 1, wait 0,"), out
    assert "bit-for-bit the prefetch-off run's" in out and "were hidden under compute" in out, out
    assert (tmp_path / "wall-prefetch-off" / "summary.json").exists()  # the reference, next to the run


@pytest.fixture(scope="module")
def judged(tmp_path_factory):
    """The named wrong answers judged on one virtual-clock out (the reference is launched once, then reused)."""
    out = tmp_path_factory.mktemp("judged") / "schedule"
    said = {}
    for fn in (issued_after_the_gather, gather_before_wait):
        import contextlib
        import io

        buf = io.StringIO()
        with contextlib.redirect_stdout(buf):
            result = check_schedule_in_a_run(fn, virtual(), out)
        said[fn.__name__] = (result, buf.getvalue())
    return said


def test_an_issue_the_engine_runs_after_the_compute_is_told_nothing_was_in_flight(judged):
    result, out = judged["issued_after_the_gather"]
    assert not result and out.startswith("Not yet: bit-identical to the prefetch-off run, but no sync transfer was "
                                         "in flight during compute"), out
    assert "issue unit l+1 before unit l computes" in out and "before its all-gather" in out, out


def test_a_gather_before_the_wait_runs_and_is_told_what_differs(judged):
    result, out = judged["gather_before_wait"]
    assert not result, out
    assert out.startswith("Not yet: unit 1 is all-gathered before its sync is done"), out
    assert "tensors differ from the prefetch-off run; the first loss that differs is step 5" in out, out


ENGINE = """\
def schedule(n):
    ops = [("issue", 0)]
    for unit in range(n):
        if unit + 1 < n:
            ops.append(("issue", unit + 1))
        ops += [("wait", unit), ("all_gather", unit), ("compute", unit)]
    return {}
"""


@pytest.mark.parametrize("answer, says", [
    ("[('issue', u) for u in range(n)] + [('all_gather', u) for u in range(n)]", "unit 0 is never waited for"),
    ("[('wait', 0)] + ops", "unit 0 is waited for before it is issued"),
    ("ops + [('issue', 0)]", "after the last all-gather"),
    ("[op for op in ops if op != ('all_gather', 1)]", "all-gathers unit 2 where unit 1 comes next"),
    ("ops + [('prefetch', 0)]", "the unknown kind 'prefetch'"),
    ("ops + [('issue', 1)]", "after the last all-gather"),
    ("ops[:1] + ops", "unit 0 is issued twice"),
    ("7", "returned 7, not a list"),
    ("ops[10 * n]", "raised IndexError"),
])
def test_a_schedule_that_cannot_run_is_refused_before_launch(answer, says):
    virtual(sync_schedule_rule=ENGINE.format("ops")).validate()  # the engine's order itself is fine
    with pytest.raises(ConfigError, match=r"^sync_schedule_rule='def schedule\(n\):' is not allowed: fn\(n_units\)") as e:
        virtual(sync_schedule_rule=ENGINE.format(answer)).validate()
    assert says in str(e.value), str(e.value)


def test_other_methods_are_refused_naming_the_field_and_the_methods():
    with pytest.raises(ConfigError, match=r"sync_schedule_rule=.*not allowed with method='diloco'.*edit, aedit"):
        small(method="diloco", sync_schedule_rule=rule_source(engine_order)).validate()


def test_the_shipped_cell_and_a_broken_schedule_launch_nothing(tmp_path, capsys):
    base = virtual()
    shipped = check_schedule_in_a_run(shipped_cell, base, tmp_path / "none")
    out = capsys.readouterr().out
    assert not shipped and shipped.state == "not answered yet", out
    assert out.startswith("Not answered yet. Hint: the schedule returns None") and "nothing was launched" in out, out
    assert not_yet(capsys, check_schedule_in_a_run(no_prefetch, base, tmp_path / "none"),
                   "as without prefetch", "Nothing was launched")
    # the last unit gathered before its wait: told by the replay, and refused for running (no pre-forward after it)
    assert not_yet(capsys, check_schedule_in_a_run(last_gathered_early, base, tmp_path / "late"),
                   "unit 2 is all-gathered before its sync is done", "Nothing was launched",
                   "after the last all-gather")
    assert not (tmp_path / "none").exists() and not (tmp_path / "late").exists()
