"""Backup workers (`backup`, issue 48 item 3): the config's refusals, and the rendezvous on hand-built times."""

from __future__ import annotations

import pytest

from edit_lab.clock.costs import Costs
from edit_lab.clock.sim.engine import Engine, Now, Quorum, Work
from edit_lab.config import ConfigError, RunConfig


def refusal(**kw) -> str:
    with pytest.raises(ConfigError) as e:
        RunConfig(**kw).validate()
    return str(e.value)


def test_m_defaults_to_one_replica_fewer():
    assert RunConfig(method="backup", replicas=4).validate().quorum_m == 3
    assert RunConfig(method="backup", replicas=4, backup_m=4).validate().quorum_m == 4


def test_wrong_backup_settings_are_refused_naming_the_field():
    assert refusal(method="backup", replicas=1).startswith("replicas=1 is not allowed: at least 2 with method='backup'")
    assert refusal(method="backup", replicas=2, backup_m=3).startswith(
        "backup_m=3 is not allowed: 0 (replicas - 1) or 1..2 (replicas=2)")
    assert refusal(method="sync", replicas=2, backup_m=1).startswith(
        "backup_m=1 is not allowed: 0 with method='sync': only backup drops late replicas")
    assert refusal(method="backup", replicas=2, backup_m=-1).startswith("backup_m=-1")
    assert refusal(method="backup", replicas=2, sync_group_rule="def groups(rank, shards, replicas):\n"
                   "    return [list(range(shards * replicas))]\n").startswith("sync_group_rule=")


def _program(m: int, arrive: float, pause: float, seen: list):
    yield from ()
    yield Work("compute_fwd", arrive)
    member = yield Quorum(m, pause)
    seen.append((member, (yield Now())))


@pytest.mark.parametrize("m", [1, 2, 3])
def test_the_first_m_ready_are_the_members_and_the_late_stop_when_the_mth_is_ready(m):
    """Replicas arrive at 1, 1, 2 and will be ready after pauses 5, 0, 0 (at 6, 1, 2): ranked 1, 2, 0."""
    arrive, pause = [1.0, 1.0, 2.0], [5.0, 0.0, 0.0]
    seen: list[list] = [[] for _ in range(3)]
    engine = Engine(Costs.__new__(Costs), replicas=3, shards=1, keep_events=False)
    engine.run([_program(m, a, p, s) for a, p, s in zip(arrive, pause, seen)])
    ranked, ready = [1, 2, 0], [6.0, 1.0, 2.0]
    t_met = ready[ranked[m - 1]]
    for r in range(3):
        member = r in ranked[:m]
        assert seen[r] == [(member, ready[r] if member else max(arrive[r], t_met))], r
