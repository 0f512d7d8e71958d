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
    (dict(fault_rank=0, fault_kind="raise"), "fault_kind"),
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
    cfg = _cfg(shards=2, batch_size=4, seq_len=32)
    launcher = [{"kind": "death", "replica": 1}]
    syncs = [{"kind": "sync", "step": s} for s in (15, 20, 25, 30, 35, 40)] + [
        {"kind": "view", "step": 25, "view": 1, "died": [1], "joined": []},
        {"kind": "view", "step": 40, "view": 2, "died": [], "joined": [1]}]
    (lost,) = lost_work(cfg, launcher, syncs)
    assert lost == {"replica": 1, "last_sync_step": 20, "rejoined_at_step": 40, "replica_steps": 20,
                    "tokens": 20 * 2 * 4 * 32}


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
