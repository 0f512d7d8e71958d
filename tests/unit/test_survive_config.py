"""Surviving a death (issue 50): its settings are checked before launch, naming the field; views and the loss
are plain data (core/view.py, runtime/survive_records.py)."""

from __future__ import annotations

import pytest

from edit_lab import ConfigError, RunConfig
from edit_lab.core.view import View, group_prefix
from edit_lab.runtime.survive_records import lost_work


def _cfg(**kw) -> RunConfig:
    base = dict(method="edit", replicas=3, shards=1, steps=60, warmup_steps=10, sync_interval=5, survive=True,
                fault_replica=1, fault_replica_step=20, rejoin_step=40)
    base.update(kw)
    return RunConfig(**base)


def test_the_issue_s_episode_is_accepted():
    for method in ("sync", "diloco", "edit"):
        _cfg(method=method).validate()
    _cfg(method="sync", fault_replica_step=3, rejoin_step=5).validate()  # no warm-up to stay out of
    _cfg(fault_replica_kind="hang", survive_on_failure="discard", survive_min_replicas=2).validate()
    _cfg(clock="virtual").validate()  # the virtual clock models deaths and joins (clock/survive_virtual.py)


@pytest.mark.parametrize("changes, field", [
    (dict(replicas=1, fault_replica=-1), "replicas"),  # R = 1 with survival: nobody to survive it
    (dict(survive_min_replicas=4), "survive_min_replicas"),  # a minimum above R
    (dict(rejoin_step=60), "rejoin_step"),  # a join after the end
    (dict(rejoin_step=5), "rejoin_step"),  # a join in the warm-up
    (dict(fault_replica=3), "fault_replica"),
    (dict(fault_replica_step=60), "fault_replica_step"),
    (dict(fault_replica_step=5), "fault_replica_step"),  # a death in the warm-up cannot be rolled back
    (dict(survive=False), "rejoin_step"),  # a survival setting without survival
    (dict(survive=False, rejoin_step=-1, survive_on_failure="discard"), "survive_on_failure"),
    (dict(time_budget=5.0), "time_budget"),
    (dict(checkpoint_every=2), "checkpoint_every"),
    (dict(clock="virtual", shards=2), "shards"),  # the virtual clock models deaths with one rank per replica
    (dict(clock="virtual", virtual_compute="charged"), "virtual_compute"),
    (dict(wire_format="bf16"), "wire_format"),
    (dict(fault_rank=0, fault_kind="nan"), "fault_kind"),  # a raise is allowed: a bug, it ends the run (tests)
    (dict(fault_join_delay_s=-1.0), "fault_join_delay_s"),
    (dict(fault_join_delay_s=2.0, rejoin_step=-1), "fault_join_delay_s"),  # nobody joins
    (dict(fault_join_delay_s=2.0, clock="virtual"), "fault_join_delay_s"),  # a real process's slowness
    (dict(survive=False, rejoin_step=-1, fault_join_delay_s=2.0), "fault_join_delay_s"),
    (dict(method="sync", survive_on_failure="discard"), "survive_on_failure"),  # a step has no local work to drop
    (dict(model="nano", seq_len=32, fault_replica_unit=3), "fault_replica_unit"),  # nano: units 0, 1, 2
])
def test_refused_before_launch_naming_the_field(changes, field):
    with pytest.raises(ConfigError) as info:
        _cfg(**changes).validate()
    assert str(info.value).startswith(f"{field}="), str(info.value)


@pytest.mark.parametrize("method", ["backup", "post_local_sgd", "co2", "aedit", "streaming_diloco"])
def test_methods_that_cannot_survive_yet_are_refused_with_the_allowed_ones(method):
    with pytest.raises(ConfigError) as info:
        _cfg(method=method, fragments=1).validate()
    msg = str(info.value)
    assert msg.startswith(f"method={method!r}") and "sync, diloco, edit" in msg, msg


def test_a_view_names_its_members_donor_and_leader():
    from edit_lab.rules import Rules

    v = View(2, (0, 1, 2), joined=(1,), reason="replacement")
    assert View.from_json(v.to_json()) == v
    assert v.index(2) == 2 and v.leader == 0 and Rules.from_config(RunConfig()).donor(v.members, v.joined) == 0
    assert View(3, (1, 2), died=(0,)).leader == 1  # replica 0's duties move to the lowest live replica
    assert Rules.from_config(RunConfig()).donor((0, 1), (0,)) == 1  # the library's donor: the lowest not joined
    assert group_prefix(4, 1) == "view4/shard1"  # a fresh store prefix per view: an old view's rank cannot talk in


def test_lost_work_counts_from_the_last_sync_to_the_join():
    cfg = _cfg(method="diloco", shards=2, batch_size=4, seq_len=32)  # replica 1 dies at 20, back at 40
    launcher = [{"kind": "view", "view": 0, "joined": []}, {"kind": "death", "replica": 1},
                {"kind": "view", "view": 1, "died": [1], "joined": []},
                {"kind": "view", "view": 2, "died": [], "joined": [1], "asked_at_step": 40}]
    syncs = ([{"kind": "sync", "step": s, "members": [0, 1, 2]} for s in (15, 20)]  # DiLoCo's sync at 20: before it
             + [{"kind": "sync", "step": s, "members": [0, 2]} for s in (25, 30, 35)]
             + [{"kind": "sync", "step": 40, "members": [0, 1, 2]}])
    (lost,) = lost_work(cfg, launcher, syncs)
    assert lost == {"replica": 1, "last_sync_step": 20, "rejoined_at_step": 40, "replica_steps": 20,
                    "tokens": 20 * 2 * 4 * 32}
    edit = [dict(x, members=[0, 2]) if x["step"] == 20 else x for x in syncs]  # EDiT's sync at 20: inside step 20
    assert lost_work(_cfg(method="edit"), launcher, edit)[0]["last_sync_step"] == 15


def test_lost_work_per_death_when_a_survivor_met_two_views_at_once():
    """Replicas 1 and 2 die at 26 and 28, between two syncs: the first rank records only the newest view, so the
    deaths and the join are read from the launcher's rows; each replica lost 25 → 40."""
    cfg = _cfg(method="diloco", replicas=4, fault_replica_step=26, rejoin_step=36, fault_replica_more="2@28")
    launcher = [{"kind": "view", "view": 0, "joined": []}, {"kind": "death", "replica": 1},
                {"kind": "view", "view": 1, "died": [1], "joined": []}, {"kind": "death", "replica": 2},
                {"kind": "view", "view": 2, "died": [2], "joined": []},
                {"kind": "view", "view": 3, "died": [], "joined": [1, 2], "asked_at_step": 40}]
    syncs = ([{"kind": "sync", "step": s, "members": [0, 1, 2, 3]} for s in (15, 20, 25)]
             + [{"kind": "sync", "step": s, "members": [0, 3]} for s in (30, 35)]
             + [{"kind": "view", "step": 30, "view": 2, "died": [2], "joined": []}])
    lost = lost_work(cfg, launcher, syncs)
    assert [(x["replica"], x["last_sync_step"], x["rejoined_at_step"], x["replica_steps"]) for x in lost] == [
        (1, 25, 40, 15), (2, 25, 40, 15)]


def test_a_lost_peer_is_told_from_a_bug():
    """Only a collective's lost or late peer starts an episode; any other exception ends the run as before."""
    from edit_lab.core.survival import is_peer_loss

    closed = RuntimeError("[gloo/transport/tcp/pair.cc:553] Connection closed by peer [127.0.0.1]:1932. This is "
                          "typically caused by a remote worker crashing.")
    late = RuntimeError("[gloo/transport/tcp/unbound_buffer.cc:78] Timed out waiting 3000ms for recv operation")
    assert is_peer_loss(closed) and is_peer_loss(late)
    assert not is_peer_loss(RuntimeError("shape mismatch: value tensor of shape [4] cannot be broadcast"))
    assert not is_peer_loss(ValueError("Connection closed by peer"))  # not a collective's error type
    assert not is_peer_loss(FloatingPointError("rank 1: the loss is nan at step 20"))


def test_the_simulator_refuses_before_it_runs_what_its_deaths_leave_out():
    """The simulator models a death and a join (sim/survive.py; checked against the virtual clock in
    tests/distributed/test_sim_survive_matches_virtual.py); what it does not model is refused naming the field,
    before the costs are even looked at."""
    from edit_lab.clock.sim.predict import simulate

    for changes, field in ((dict(shards=2), "shards=2"), (dict(survive_min_replicas=3), "survive_min_replicas=3")):
        with pytest.raises(ConfigError) as info:
            simulate(_cfg(**changes), costs=None)
        assert str(info.value).startswith(field) and "is not allowed" in str(info.value)


def test_more_deaths_are_scheduled_with_their_lives_and_due_steps():
    from edit_lab.config import deaths

    cfg = _cfg(method="diloco", fault_replica_step=15, rejoin_step=25, fault_replica_more=" 2@35, 1@40")
    cfg.validate()
    assert deaths.schedule(cfg) == [(1, 15), (2, 35), (1, 40)]
    assert [deaths.life_dying_at(cfg, r, s) for r, s in ((1, 15), (2, 35), (1, 40), (0, 15), (1, 35))] == \
        [0, 0, 1, None, None]  # replica 1's second death strikes its replacement (life 1)
    assert deaths.due_step(cfg, 1, 20) == 25 and deaths.due_step(cfg, 1, 44) == 50 and deaths.due_step(cfg, 2, 35) == 45
    assert deaths.due_step(cfg, 2, 30) is None  # not dead yet
    assert deaths.due_now(cfg, [1, 2], 45) == [2] and deaths.due_now(cfg, [1, 2], 50) == [1, 2]
    assert deaths.schedule(_cfg(fault_replica=-1, rejoin_step=-1)) == []
    assert deaths.due_step(_cfg(rejoin_step=-1), 1, 50) is None  # no replacements at all


@pytest.mark.parametrize("more, changes, why", [
    ("2-35", {}, "replica@step"),  # not the syntax
    ("3@35", {}, "replica in 0..2"),
    ("2@60", {}, "step in 11..59"),
    ("2@8", {}, "step in 11..59"),  # in the warm-up
    ("2@20", {}, "one death per step"),  # the first death's step
    ("1@40", dict(rejoin_step=-1), "rejoin_step=-1 brings none back"),  # a replica that never came back dies again
    ("1@44", {}, "after step 45"),  # its replacement is due at 40, joins by 45
    ("2@30", dict(survive_min_replicas=2), "survive_min_replicas=2"),  # replica 1 not back before 45: one left
    ("2@35", dict(fault_replica=-1, rejoin_step=-1), "without a first death"),
    ("2@35", dict(survive=False, rejoin_step=-1), "with survive=False"),
    ("2@24", dict(clock="virtual"), "more than sync_interval=5 steps apart on the virtual clock"),  # one round
])
def test_more_deaths_are_refused_naming_the_field(more, changes, why):
    with pytest.raises(ConfigError) as info:
        _cfg(method="diloco", fault_replica_more=more, **changes).validate()
    msg = str(info.value)
    assert msg.startswith("fault_replica_more=") and why in msg, msg
