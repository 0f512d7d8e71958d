"""The reader's donor rule (`donor_rule`, edit_lab/rules/donor_rule.py): accepted, or refused before launch."""

from __future__ import annotations

import pytest

from edit_lab import ConfigError, RunConfig
from edit_lab.rules import donor, donor_of, donor_problem

HIGHEST = "def fn(members, joined):\n    return max(m for m in members if m not in joined)\n"


def _cfg(**kw):
    base = dict(method="diloco", shards=1, replicas=3, model="nano", steps=60, warmup_steps=10, sync_interval=5,
                survive=True, fault_replica=1, fault_replica_step=27, rejoin_step=40)
    base.update(kw)
    return RunConfig(**base)


def test_the_library_and_a_rule():
    assert donor_of(None)((0, 1, 2), (0,)) == 1  # the lowest member that did not join
    assert donor(HIGHEST)((0, 1, 2), (2,)) == 1
    assert donor_problem(HIGHEST, 3) is None
    _cfg(donor_rule=HIGHEST).validate()


@pytest.mark.parametrize("source, said", [
    ("def fn(members, joined):\n    return joined[0]\n", "not a live member that did not join"),
    ("def fn(members, joined):\n    return 'a'\n", "not a replica id"),
    ("def fn(members, joined):\n    return True\n", "not a replica id"),
    ("def fn(members, joined):\n    raise ValueError('no')\n", "ValueError"),
])
def test_refused_before_launch(source, said):
    with pytest.raises(ConfigError, match="donor_rule") as e:
        _cfg(donor_rule=source).validate()
    assert said in str(e.value)


def test_refused_without_survival():
    with pytest.raises(ConfigError, match="without survive=True"):
        RunConfig(method="diloco", shards=1, replicas=3, donor_rule=HIGHEST).validate()
