"""Edges of survival's configuration checks (issue 50's edge review): R = 1 and R = 2, the minimum at and above R,
a join at, before or after the death and after the end, a death at the last step, NaN, negative and non-integer
values from the constructor and the command line: each refused before any process starts, naming the field and
the allowed values; the edges that are allowed are said so by a test too."""

from __future__ import annotations

import subprocess
import sys

import pytest

from edit_lab import ConfigError, RunConfig


def _cfg(**kw) -> RunConfig:
    base = dict(method="edit", replicas=3, shards=1, steps=60, warmup_steps=10, sync_interval=5, survive=True,
                fault_replica=1, fault_replica_step=20, rejoin_step=40)
    base.update(kw)
    return RunConfig(**base)


@pytest.mark.parametrize("changes, message", [
    (dict(replicas=1, fault_replica=-1), "replicas=1 is not allowed: at least 2 with survive=True"),
    (dict(survive_min_replicas=4), "survive_min_replicas=4 is not allowed: at most replicas=3"),
    (dict(survive_min_replicas=0), "survive_min_replicas=0 is not allowed: an integer >= 1"),
    (dict(survive_min_replicas=float("nan")), "survive_min_replicas=nan is not allowed: an integer >= 1"),
    (dict(survive_min_replicas=2.5), "survive_min_replicas=2.5 is not allowed: an integer >= 1"),
    (dict(rejoin_step=-2), "rejoin_step=-2 is not allowed: an integer >= -1"),
    (dict(rejoin_step=float("nan")), "rejoin_step=nan is not allowed: an integer >= -1"),
    (dict(rejoin_step=40.0), "rejoin_step=40.0 is not allowed: an integer >= -1"),
    (dict(rejoin_step=60), "rejoin_step=60 is not allowed: -1 (none) or a step in 10..59"),
    (dict(fault_replica_step=-1), "fault_replica_step=-1 is not allowed: an integer >= 0"),
    (dict(fault_replica_step=float("nan")), "fault_replica_step=nan is not allowed: an integer >= 0"),
    (dict(fault_replica_step=60), "fault_replica_step=60 is not allowed: a step in 0..59 (steps=60)"),
    (dict(fault_replica_step=10), "fault_replica_step=10 is not allowed: a step after warmup_steps=10"),
    (dict(warmup_steps=0, fault_replica_step=0, rejoin_step=-1),
     "fault_replica_step=0 is not allowed: a step after warmup_steps=0"),
    (dict(fault_replica=-2), "fault_replica=-2 is not allowed: an integer >= -1"),
    (dict(fault_replica=1.5), "fault_replica=1.5 is not allowed: an integer >= -1"),
    (dict(fault_replica=3), "fault_replica=3 is not allowed: -1 (none) or a replica index in 0..2"),
    (dict(fault_replica_kind="raise"), "fault_replica_kind='raise' is not allowed: one of kill, hang"),
    (dict(survive_on_failure="skip"), "survive_on_failure='skip' is not allowed: one of retry, discard"),
    (dict(survive=1), "survive=1 is not allowed: true or false"),
    (dict(fault_join_delay_s=float("nan")), "fault_join_delay_s=nan is not allowed: a finite number >= 0"),
    (dict(fault_join_delay_s=float("inf")), "fault_join_delay_s=inf is not allowed: a finite number >= 0"),
    (dict(fault_join_delay_s=-0.5), "fault_join_delay_s=-0.5 is not allowed: a finite number >= 0"),
    (dict(steps=8, warmup_steps=10, fault_replica=-1, rejoin_step=3),
     "rejoin_step=3 is not allowed: -1 (none): steps=8 leaves no step after warmup_steps=10"),
])
def test_refused_from_the_constructor_naming_the_field_and_the_allowed_values(changes, message):
    with pytest.raises(ConfigError) as info:
        _cfg(**changes).validate()
    assert str(info.value).startswith(message), str(info.value)


@pytest.mark.parametrize("changes", [
    dict(survive_min_replicas=3),  # min = R: the death ends the run, with the reason (below the minimum)
    dict(replicas=2, survive_min_replicas=2),
    dict(fault_replica=0), dict(fault_replica=2),  # the first and the last replica
    dict(fault_replica_step=59, rejoin_step=-1),  # a death at the last step: met at the closing sync
    dict(fault_replica_step=11),  # the first step after the warm-up
    dict(rejoin_step=20), dict(rejoin_step=15),  # a join asked for at or before the death: at the first sync after it
    dict(rejoin_step=59),  # at the last step: admitted at the closing sync
    dict(method="sync", replicas=2, fault_replica_step=0, rejoin_step=0),  # sync has no warm-up
    dict(replicas=8, clock="virtual"),
    dict(fault_join_delay_s=2.0, shards=2),  # a slow replacement of two ranks (real processes)
])
def test_the_edges_that_are_allowed(changes):
    _cfg(**changes).validate()


BASE_FLAGS = ["--method", "edit", "--replicas", "3", "--steps", "60", "--warmup-steps", "10", "--sync-interval", "5",
              "--survive", "--fault-replica", "1", "--fault-replica-step", "20", "--rejoin-step", "40"]


@pytest.mark.parametrize("flags, message", [
    (["--rejoin-step", "nan"], "rejoin_step='nan' is not allowed: an integer >= -1"),
    (["--survive-min-replicas", "2.5"], "survive_min_replicas='2.5' is not allowed: an integer >= 1"),
    (["--fault-replica-step", "1e3"], "fault_replica_step='1e3' is not allowed: an integer >= 0"),
    (["--fault-join-delay-s", "nan"], "fault_join_delay_s=nan is not allowed: a finite number >= 0"),
    (["--fault-join-delay-s", "-1"], "fault_join_delay_s=-1.0 is not allowed: a finite number >= 0"),
    (["--survive-min-replicas", "9"], "survive_min_replicas=9 is not allowed: at most replicas=3"),
    (["--fault-replica", "-3"], "fault_replica=-3 is not allowed: an integer >= -1"),
    (["--survive-on-failure", "skip"], "survive_on_failure='skip' is not allowed: one of retry, discard"),
])
def test_refused_from_the_command_line_before_any_process_starts(tmp_path, flags, message):
    out = tmp_path / "run"
    proc = subprocess.run([sys.executable, "-m", "edit_lab", "run", *BASE_FLAGS, "--out", str(out), *flags],
                          capture_output=True, text=True, timeout=120)
    assert proc.returncode == 2, proc.stderr
    assert message in proc.stderr, proc.stderr
    assert not out.exists()  # nothing launched, nothing written
