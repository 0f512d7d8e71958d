"""edit_lab/rules/: a reader's function shipped to the ranks as source, refused before launch when it cannot run."""

from __future__ import annotations

import math
import re

import pytest

from edit_lab import RunConfig
from edit_lab.config import ConfigError
from edit_lab.rules import RuleError, load_rule, rule_source, straggler, straggler_problem, weighting, weighting_problem


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
    assert RunConfig.from_dict(ok.to_dict()).rules.weighting == rule_source(halves)  # config.json keeps it


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
    assert RunConfig.from_dict(ok.to_dict()).rules.straggler == rule_source(throttle)  # config.json keeps it


def test_the_straggler_model_adds_the_rule_to_the_other_kinds():
    from edit_lab.train.stragglers import StragglerModel

    source = rule_source(throttle)
    alone = StragglerModel(rule=straggler(source))
    assert alone.delay(3, 1, 0.02) == (0.02, "rule") and alone.delay(2, 1, 0.02) == (0.0, None)
    assert alone.needs_compute(0) and not StragglerModel().needs_compute(0)  # the rule is given the compute
    slow = StragglerModel(slow_replicas=(1,), factor=3.0, rule=straggler(source))
    d, why = slow.delay(3, 1, 0.02)
    assert d == pytest.approx(2 * 0.02 + 0.02) and why == "consistent+rule"
    assert slow.delay(2, 1, 0.02) == (pytest.approx(0.04), "consistent")
    both = StragglerModel(pause_prob=1.0, pause_s=0.05, rule=straggler(source))
    assert both.delay(3, 1, 0.02) == (pytest.approx(0.07), "random+rule")
    cfg = RunConfig(replicas=2, straggler_rule=source)
    assert StragglerModel.from_config(cfg).delay(5, 1, 0.01) == (0.01, "rule")


# ------------------------------------------------------------------------------- the gradient all-reduce rule
def ring_all_reduce(grad, reduce_scatter, all_gather):
    return all_gather(reduce_scatter(grad))


def test_the_gradient_all_reduce_rule_gives_every_stand_in_replica_the_mean():
    import torch

    from edit_lab.rules import grad_all_reduce, grad_all_reduce_problem, on_stand_ins

    rule = grad_all_reduce(rule_source(ring_all_reduce))
    grads = [torch.arange(6.0) * (r + 1) for r in range(3)]  # 3 replicas, 6 values: slices of 2
    answers = on_stand_ins(rule, grads)
    assert all(torch.allclose(a, torch.arange(6.0) * 2) for a in answers)  # the mean of 1×, 2×, 3×
    assert grad_all_reduce_problem(rule_source(ring_all_reduce), 2) is None
    assert grad_all_reduce_problem(rule_source(ring_all_reduce), 4) is None

    def own(grad, reduce_scatter, all_gather):
        return grad

    assert grad_all_reduce_problem(rule_source(own), 2) is None  # wrong numbers run: the run's check judges them


@pytest.mark.parametrize("body, says", [
    ("return reduce_scatter(grad)", "it returned shape (4,) for a gradient of shape (8,) (2× too few values"),
    ("return None", "it returned None, not a tensor"),
    ("return all_gather(reduce_scatter(grad)).tolist()", "not a tensor"),
    ("return all_gather(reduce_scatter(grad)).long()", "not of floating point numbers"),
    ("return all_gather(reduce_scatter(grad[:-1]))", "reduce_scatter was handed 7 values, which 2 replicas cannot "
                                                      "split evenly"),
    ("return all_gather(reduce_scatter(grad.tolist()))", "reduce_scatter was handed [")]
    + [("return 1 / 0", "on replica 0 of 2: ZeroDivisionError: division by zero")])
def test_a_gradient_all_reduce_rule_that_cannot_run_is_found_before_launch(body, says):
    from edit_lab.rules import grad_all_reduce_problem

    why = grad_all_reduce_problem(f"def rule(grad, reduce_scatter, all_gather):\n    {body}\n", 2)
    assert why is not None and why.startswith("fn(grad, reduce_scatter, all_gather) -> the gradient after the "
                                              "all-reduce; it fails:") and says in why, why


def test_replicas_that_call_the_collectives_differently_are_told_not_left_hanging():
    import torch

    from edit_lab.rules import grad_all_reduce, on_stand_ins

    def uneven(grad, reduce_scatter, all_gather):
        out = all_gather(reduce_scatter(grad))
        if float(grad[0]) > 0:  # on some replicas only: a run would hang in this all-gather
            all_gather(grad)
        return out

    def crossed(grad, reduce_scatter, all_gather):
        if float(grad[0]) > 0:
            reduce_scatter(grad)
        return all_gather(reduce_scatter(grad))

    grads = [torch.tensor([1.0, 2.0]), torch.tensor([-1.0, 2.0])]
    with pytest.raises(RuleError, match="called the collectives a different number of times"):
        on_stand_ins(grad_all_reduce(rule_source(uneven)), grads, timeout_s=0.5)
    with pytest.raises(RuleError, match=r"on replica 0 of 2: the replicas called different collectives at once "
                                        r"\(reduce_scatter, all_gather, in replica order"):
        on_stand_ins(grad_all_reduce(rule_source(crossed)), grads, timeout_s=0.5)


def test_run_config_refuses_a_gradient_all_reduce_rule_naming_the_field_where_it_cannot_apply():
    bad = "def rule(grad, reduce_scatter, all_gather):\n    return reduce_scatter(grad)\n"
    with pytest.raises(ConfigError, match=r"^grad_all_reduce_rule='def rule\(grad, reduce_scatter, all_gather\):' is "
                                          r"not allowed: .*2× too few values"):
        RunConfig(method="sync", grad_all_reduce_rule=bad).validate()
    ok = rule_source(ring_all_reduce)
    with pytest.raises(ConfigError, match=r"^grad_all_reduce_rule=.* is not allowed: None with method='diloco' and "
                                          r"warmup_steps=0: .*sync all-reduces the gradients every step, "
                                          r"post_local_sgd, diloco, co2, edit, aedit, streaming_diloco only in their warmup_steps"):
        RunConfig(method="diloco", warmup_steps=0, grad_all_reduce_rule=ok).validate()
    with pytest.raises(ConfigError, match=r"^grad_all_reduce_rule=.* is not allowed: None with replicas=1"):
        RunConfig(method="sync", replicas=1, grad_all_reduce_rule=ok).validate()
    for cfg in (RunConfig(method="sync", grad_all_reduce_rule=ok), RunConfig(method="edit", grad_all_reduce_rule=ok),
                RunConfig(method="sync", clock="virtual", grad_all_reduce_rule=ok)):  # the fabric has both collectives
        assert RunConfig.from_dict(cfg.validate().to_dict()).rules.grad_all_reduce == ok  # config.json keeps it


def test_the_preview_refuses_a_gradient_all_reduce_rule_instead_of_timing_the_built_in_one():
    from edit_lab.clock.sim import Costs, simulate

    costs = Costs(fwd_s=(1e-3,), bwd_s=(2e-3,), other_s=1e-3, unit_bytes=(1000,), sync_latency_s=5e-4)
    cfg = RunConfig(method="sync", grad_all_reduce_rule=rule_source(ring_all_reduce))
    with pytest.raises(ConfigError, match=r"^grad_all_reduce_rule=.* is not allowed in a preview"):
        simulate(cfg, costs)
    assert simulate(cfg.replace(grad_all_reduce_rule=None), costs).summary["tokens_per_s"] > 0


# ------------------------------------------------------------------------------- the outer step rule
def nesterov_step(anchor, delta_bar, buf, lr, momentum):
    buf = momentum * buf + delta_bar
    return anchor - lr * (delta_bar + momentum * buf), buf


def torch_nesterov_step(anchor, delta_bar, buf, lr, momentum):
    buf = buf.mul(momentum).add(delta_bar)
    return anchor.add(delta_bar.add(buf, alpha=momentum), alpha=-lr), buf


def test_the_outer_step_rule_answers_tensors_of_the_anchors_shape_and_is_given_copies():
    import torch

    from edit_lab.rules import outer_step, outer_step_problem

    def in_place(anchor, delta_bar, buf, lr, momentum):
        anchor.sub_(delta_bar, alpha=lr)  # on a copy: only what it returns counts
        return anchor.tolist(), [0] * len(buf)  # lists are read as tensors

    a, d = torch.tensor([1.0, 2.0]), torch.tensor([0.5, -0.5])
    new_a, new_b = outer_step(rule_source(in_place))(a, d, torch.zeros(2), 1.0, 0.0)
    assert a.tolist() == [1.0, 2.0] and new_a.tolist() == [0.5, 2.5] and new_b.dtype == torch.float32
    assert outer_step_problem(rule_source(nesterov_step)) is None
    # the annotations of the notebook's cell name torch: every rank provides it, as it provides math
    typed = ("def f(anchor: torch.Tensor, delta_bar: torch.Tensor, buf, lr: float, momentum: float):\n"
             "    return anchor, buf\n")
    assert outer_step_problem(typed) is None


@pytest.mark.parametrize("body, says", [
    ("return anchor", "not the pair (new_anchor, new_buf)"),
    ("return anchor, buf, lr", "not the pair (new_anchor, new_buf)"),
    ("return None", "returned None, not the pair"),
    ("return anchor[:1], buf", "a new anchor of shape (1,) for an anchor shard of shape (5,)"),
    ("return anchor, buf.sum()", "a new buffer of shape () for an anchor shard of shape (5,)"),
    ("return None, buf", "a new anchor of type NoneType, not a tensor"),
    ("return anchor / 0, buf", "non-finite values for finite inputs"),
    ("return anchor - delta_bar / momentum, buf", "non-finite values"),  # probed with the run's momentum, 0 here
    ("raise ValueError('no')", "ValueError: no"),
])
def test_an_outer_step_rule_that_cannot_run_is_found_before_launch(body, says):
    from edit_lab.rules import outer_step_problem

    why = outer_step_problem(f"def rule(anchor, delta_bar, buf, lr, momentum):\n    {body}\n", lr=0.7, momentum=0.0)
    assert why is not None and why.startswith("fn(anchor, delta_bar, buf, lr, momentum) -> (new_anchor, new_buf)")
    assert says in why, why


def test_run_config_refuses_an_outer_step_rule_naming_the_field_and_the_methods():
    assert RunConfig().rules.outer_step is None
    bad = "def rule(anchor, delta_bar, buf, lr, momentum):\n    return anchor\n"
    with pytest.raises(ConfigError, match=r"^outer_step_rule='def rule\(anchor, delta_bar, buf, lr, momentum\):' is "
                                          r"not allowed: .*not the pair"):
        RunConfig(method="diloco", outer_step_rule=bad).validate()
    good = rule_source(nesterov_step)
    for method, says in (("sync", "sync has no outer step"), ("post_local_sgd", "averages the parameters"),
                         ("co2", "co2's outer step is its own")):
        with pytest.raises(ConfigError, match=rf"^outer_step_rule='def nesterov_step.*' is not allowed with "
                                              rf"method='{method}': the rule replaces the outer optimizer of diloco, "
                                              rf"edit, aedit, streaming_diloco only; .*{says}"):
            RunConfig(method=method, outer_step_rule=good).validate()
    with pytest.raises(ConfigError, match=r"^outer_step_rule=3 is not allowed"):
        RunConfig(method="diloco", outer_step_rule=3).validate()
    for method in ("diloco", "edit", "aedit"):
        ok = RunConfig(method=method, outer_step_rule=good).validate()
        assert RunConfig.from_dict(ok.to_dict()).rules.outer_step == good  # config.json keeps it


def test_outer_state_steps_with_the_rule_and_keeps_its_buffer_as_the_momentum_buffer():
    import torch

    from edit_lab.core.outer import OuterState
    from edit_lab.rules import outer_step

    shards = [torch.tensor([1.0, 2.0, 0.5]), torch.tensor([-1.0])]
    deltas = [[torch.tensor([0.2, -0.1, 0.05]), torch.tensor([0.3])],
              [torch.tensor([0.1, 0.1, -0.2]), torch.tensor([-0.1])]]
    built_in = OuterState(shards, lr=0.7, momentum=0.8, nesterov=True)
    ruled = OuterState(shards, lr=0.7, momentum=0.8, nesterov=True, outer_step=outer_step(rule_source(torch_nesterov_step)))
    assert ruled.numel() == built_in.numel() == 4  # no buffer before the first step, as torch's
    for ds in deltas:
        for unit, d in enumerate(ds):
            built_in.step(unit, d.clone())
            ruled.step(unit, d.clone())
    for unit in range(2):
        assert torch.allclose(ruled.anchors[unit], built_in.anchors[unit], atol=1e-6)  # torch's arithmetic
        b = ruled.optimizer.state[ruled.anchors[unit]]["momentum_buffer"]
        assert torch.allclose(b, built_in.optimizer.state[built_in.anchors[unit]]["momentum_buffer"], atol=1e-6)
    assert ruled.numel() == built_in.numel() == 8
    # a checkpoint of the rule's state resumes under the library's step, and back
    resumed = OuterState(shards, lr=0.7, momentum=0.8, nesterov=True)
    resumed.load_state_dict(ruled.state_dict())
    back = OuterState(shards, lr=0.7, momentum=0.8, nesterov=True, outer_step=outer_step(rule_source(nesterov_step)))
    back.load_state_dict(built_in.state_dict())
    d = torch.tensor([0.3, 0.0, 0.1])
    for o in (built_in, resumed, back):
        o.step(0, d.clone())
    assert torch.allclose(resumed.anchors[0], built_in.anchors[0], atol=1e-6)
    assert torch.allclose(back.anchors[0], built_in.anchors[0], atol=1e-6)


# ------------------------------------------------------------------------------- the sync-group rule
def sync_columns(rank, shards, replicas):
    return [r * shards + rank % shards for r in range(replicas)]


def sync_rows(rank, shards, replicas):
    return [rank // shards * shards + s for s in range(shards)]


def sync_crossed(rank, shards, replicas):
    shard, replica = rank % shards, rank // shards
    return [r * shards + (shard + r - replica) % shards for r in range(replicas)]


def test_the_sync_groups_of_a_rule_are_every_group_once_in_one_order():
    from edit_lab.core.mesh import Mesh
    from edit_lab.rules import sync_groups

    assert sync_groups(rule_source(sync_columns), 4, 3) == [[0, 4, 8], [1, 5, 9], [2, 6, 10], [3, 7, 11]]
    assert sync_groups(rule_source(sync_columns), 4, 3) == [Mesh(s, 12, 4, 3, None, None).sync_group_ranks()
                                                            for s in range(4)]  # the mesh's, in Mesh.build's order
    assert sync_groups(rule_source(sync_rows), 2, 2) == [[0, 1], [2, 3]]  # valid, and wrong: the shard groups
    assert sync_groups(rule_source(sync_crossed), 2, 2) == [[0, 3], [1, 2]]  # sorted, by smallest rank
    floats = "def f(rank, shards, replicas):\n    return [float(r * shards + rank % shards) for r in range(replicas)]\n"
    assert sync_groups(floats, 2, 2) == [[0, 2], [1, 3]]  # whole numbers are ranks
    m = Mesh(3, 4, 2, 2, None, None, [1, 2])
    assert m.sync_group_ranks() == [1, 2] and m.shard_group_ranks() == [2, 3]  # the rule's group, the same rows


@pytest.mark.parametrize("body, says", [
    ("return [rank]", "has 1 ranks: a sync group holds one rank per replica, 2 on this mesh"),
    ("return [rank, rank]", "names a rank twice"),
    ("return [rank, rank + 4]", "names a rank outside the mesh's 0..3"),
    ("return [(rank + 1) % 4, (rank + 2) % 4]", "does not contain rank 0 itself"),
    ("return [rank, (rank + 1) % 4]", "every member of a group must give the same group"),
    ("return None", "returned None for rank 0, not a list of ranks"),
    ("return 3", "returned 3 for rank 0, not a list of ranks"),
    ("return [rank, 0.5]", "0.5 is not a rank"),
    ("return [rank, True]", "True is not a rank"),
    ("return {rank: 1}", "not a list of ranks"),
    ("raise IndexError('no such rank')", "raised IndexError: no such rank"),
])
def test_sync_groups_that_cannot_run_are_found_before_launch(body, says):
    from edit_lab.rules import sync_groups_problem

    why = sync_groups_problem(f"def rule(rank, shards, replicas):\n    {body}\n", 2, 2)
    assert why is not None and says in why and why.startswith("fn(rank, shards, replicas) -> list of ranks"), why
    assert sync_groups_problem(rule_source(sync_columns), 2, 2) is None
    assert sync_groups_problem(rule_source(sync_rows), 2, 2) is None  # a partition: it runs (and does damage)


def test_run_config_refuses_bad_sync_groups_naming_the_field_and_keeps_good_ones():
    with pytest.raises(ConfigError, match=r"^sync_group_rule='def sync_rows\(rank, shards, replicas\):' is not "
                                          r"allowed: .*fn\(0, 3, 2\) = \[0, 1, 2\] has 3 ranks"):
        RunConfig(shards=3, replicas=2, sync_group_rule=rule_source(sync_rows)).validate()
    with pytest.raises(ConfigError, match="sync_group_rule=.*does not parse"):
        RunConfig(sync_group_rule="def rule(rank, shards, replicas)\n    return [rank]\n").validate()
    for method in ("edit", "diloco", "sync"):
        RunConfig(method=method, sync_group_rule=rule_source(sync_rows)).validate()  # wrong, but it runs
    ok = RunConfig(method="edit", sync_group_rule=rule_source(sync_columns)).validate()
    assert RunConfig.from_dict(ok.to_dict()).rules.sync_group == rule_source(sync_columns)  # config.json keeps it
    assert RunConfig().rules.sync_group is None


def test_timed_runs_refuse_groups_that_do_not_hold_one_rank_of_every_replica():
    """A-EDiT and time budgets agree over the sync group on when to sync or stop: groups that leave a replica
    out could decide unlike the others and hang; groups pairing other shard indices decide alike, and run."""
    for kw in ({"method": "aedit"}, {"method": "edit", "time_budget": 2.0}):
        with pytest.raises(ConfigError, match=r"^sync_group_rule=.*its group \[0, 1\] holds two ranks of one replica"):
            RunConfig(**kw, sync_group_rule=rule_source(sync_rows)).validate()
        RunConfig(**kw, sync_group_rule=rule_source(sync_crossed)).validate()


def test_the_preview_simulator_refuses_groups_it_does_not_model():
    from edit_lab.clock.sim import Costs, simulate

    costs = Costs(fwd_s=(1e-3, 1e-3), bwd_s=(2e-3, 2e-3), other_s=1e-3, unit_bytes=(1000, 1000),
                  sync_latency_s=5e-4, model="nano", shards=2, seq_len=32, batch_size=4)
    cfg = RunConfig(method="edit", shards=2, replicas=2, steps=6, model="nano", seq_len=32, batch_size=4,
                    eval_every=0, warmup_steps=2, sync_interval=2)
    plain = simulate(cfg, costs).summary
    assert simulate(cfg.replace(sync_group_rule=rule_source(sync_columns)), costs).summary == plain  # the mesh's own
    with pytest.raises(ConfigError, match="sync_group_rule=.* not allowed in the preview simulator"):
        simulate(cfg.replace(sync_group_rule=rule_source(sync_crossed)), costs)


# ------------------------------------------------------------------------------- the layer-wise sync order
SCHEDULE = '''\
def schedule(n):
    ops = [("issue", 0)]
    for unit in range(n):
        if unit + 1 < n:
            ops.append(("issue", unit + 1))
        ops += [("wait", unit), ("all_gather", unit), ("compute", unit)]
    return {}
'''


def test_the_engines_prefetch_order_is_planned_per_pre_forward():
    from edit_lab.rules import sync_schedule_plan

    assert sync_schedule_plan(SCHEDULE.format("ops"), 3) == [[("issue", 0), ("issue", 1), ("wait", 0)],
                                                             [("issue", 2), ("wait", 1)], [("wait", 2)]]


def test_a_gather_before_its_wait_is_accepted_its_wait_moved_to_a_later_pre_forward():
    from edit_lab.rules import sync_schedule_plan

    src = SCHEDULE.format("ops[:6] + [('all_gather', 1), ('wait', 1)] + ops[8:]")
    assert sync_schedule_plan(src, 3) == [[("issue", 0), ("issue", 1), ("wait", 0)], [("issue", 2)],
                                          [("wait", 1), ("wait", 2)]]


@pytest.mark.parametrize("answer, says", [
    ("[op for op in ops if op != ('wait', 2)]", "unit 2 is never waited for"),
    ("[op for op in ops if op != ('issue', 2)]", "unit 2 is waited for before it is issued"),
    ("ops + [('wait', 0)]", "after the last all-gather"),
    ("ops[:1] + ops", "unit 0 is issued twice"),
    ("[op for op in ops if op[0] != 'all_gather']", "all-gathers 0 of the 3 units"),
    ("ops + [('sync', 1)]", "unknown kind 'sync'"),
    ("ops + [('issue', 9)]", "outside 0..2"),
    ("'issue 0'", "not a list"),
    ("ops + ['wait 0']", "is not a pair"),
    ("1 / 0", "raised ZeroDivisionError"),
])
def test_a_schedule_that_cannot_run_is_refused_naming_the_field(answer, says):
    from edit_lab import ConfigError, RunConfig

    with pytest.raises(ConfigError, match=r"^sync_schedule_rule='def schedule\(n\):' is not allowed: ") as e:
        RunConfig(method="edit", model="nano", sync_schedule_rule=SCHEDULE.format(answer)).validate()
    assert says in str(e.value), str(e.value)


def test_the_sync_schedule_rule_is_for_edit_and_aedit_only_and_the_preview_models_it():
    from edit_lab import ConfigError, RunConfig

    src = SCHEDULE.format("ops")
    RunConfig(method="aedit", model="nano", sync_schedule_rule=src).validate()
    with pytest.raises(ConfigError, match="sync_schedule_rule=.* with method='sync'.*edit, aedit only"):
        RunConfig(method="sync", model="nano", sync_schedule_rule=src).validate()
    from edit_lab.clock.sim import Costs, simulate

    costs = Costs(fwd_s=(1e-3, 1e-3), bwd_s=(2e-3, 2e-3), other_s=1e-3, unit_bytes=(1000, 1000),
                  sync_latency_s=5e-4, model="nano", shards=2, seq_len=32, batch_size=4)
    cfg = RunConfig(method="edit", shards=2, replicas=2, steps=6, model="nano", seq_len=32, batch_size=4,
                    eval_every=0, warmup_steps=2, sync_interval=2, link_latency_ms=1.0, link_bandwidth_mb_s=1.0)
    without = SCHEDULE.format("[op for u in range(n) for op in (('issue', u), ('wait', u), ('all_gather', u))]")
    assert simulate(cfg.replace(sync_schedule_rule=src), costs).summary == simulate(cfg, costs).summary
    assert (simulate(cfg.replace(sync_schedule_rule=without), costs).summary
            == simulate(cfg.replace(prefetch=False), costs).summary != simulate(cfg, costs).summary)


def test_rules_are_parsed_and_compiled_one_at_a_time(monkeypatch):
    """The virtual clock's ranks are threads of one process, each loading its rule at once. CPython 3.11 shares
    the AST constructor's recursion depth between threads, so parses side by side can fail with "AST constructor
    recursion depth mismatch" (python/cpython#106905, seen in a `make test` run): `load_rule` parses and
    compiles under one lock. Here each parse and compile waits a moment, so without the lock they would overlap."""
    import ast
    import builtins
    import threading
    import time

    from edit_lab import rules as hooks

    inside, most = [0], [0]  # threads inside a parse or compile now, and the most at once
    guard, mine = threading.Lock(), threading.local()  # ast.parse itself calls compile: count a thread once

    def slowly(real):
        def run(*args, **kwargs):
            outer = not getattr(mine, "depth", 0)
            mine.depth = getattr(mine, "depth", 0) + 1
            if outer:
                with guard:
                    inside[0] += 1
                    most[0] = max(most[0], inside[0])
            time.sleep(0.01)
            try:
                return real(*args, **kwargs)
            finally:
                mine.depth -= 1
                if outer:
                    with guard:
                        inside[0] -= 1
        return run

    monkeypatch.setattr(ast, "parse", slowly(ast.parse))  # the module every rule is parsed with
    monkeypatch.setattr(builtins, "compile", slowly(builtins.compile))
    source = "def rule(step, replica, compute_s):\n    return 0.0\n"
    got: list = []
    threads = [threading.Thread(target=lambda: got.append(hooks.load_rule(source, "straggler rule")(1, 0, 0.1)))
               for _ in range(6)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert got == [0.0] * 6
    assert most[0] == 1, f"{most[0]} parses or compiles ran at once"
