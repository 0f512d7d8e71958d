"""Edges of the work a death loses (runtime/survive_records.py `lost_work`; issue 50's edge review): a replica that
dies more than once. Hand-built launcher and sync rows, as tests/unit/test_survive_config.py's; the arithmetic by
hand. 25 steps lost by one replica must not be counted once per death."""

from __future__ import annotations

import pytest

from edit_lab import RunConfig
from edit_lab.runtime.survive_records import lost_work

CFG = RunConfig(method="diloco", replicas=3, shards=1, steps=40, warmup_steps=10, sync_interval=5, survive=True,
                fault_replica=1, fault_replica_step=18, rejoin_step=25, batch_size=4, seq_len=32)
SYNCS = [{"kind": "sync", "step": s} for s in (10, 15, 20, 25, 30, 35, 40)]


@pytest.mark.xfail(strict=True, reason="lost_work takes, for every death of a replica, the first view that replica "
                   "died in (`gone = next(v for v in views if r in v['died'])`), so each later death of the same "
                   "replica repeats the first one's interval: a replacement that never joined, fenced twice, "
                   "triples the replica-steps (seen: lost_replica_steps 75 for 25 steps lost)")
def test_replacements_that_never_join_do_not_count_the_loss_again():
    launcher = [{"kind": "death", "replica": 1}] * 3  # killed, then two replacements fenced as hung
    # as the survivors record it (tests/distributed/test_survive_edges.py's run): the views that admitted a
    # replacement were never adopted (their gather timed out), the ones that fenced it were
    views = [{"kind": "view", "step": 20, "view": 1, "died": [1], "joined": []},
             {"kind": "view", "step": 25, "view": 3, "died": [1], "joined": []},
             {"kind": "view", "step": 25, "view": 5, "died": [1], "joined": []}]
    lost = lost_work(CFG, launcher, SYNCS + views)
    assert sum(x["replica_steps"] for x in lost) == 40 - 15  # from its last sync to the end, once


@pytest.mark.xfail(strict=True, reason="the same: the second death of replica 1 (its replacement killed at 33) is "
                   "given the first death's interval 15..30 instead of its own 30..40")
def test_a_replacement_that_dies_again_loses_its_own_steps():
    launcher = [{"kind": "death", "replica": 1}, {"kind": "death", "replica": 1}]
    views = [{"kind": "view", "step": 20, "view": 1, "died": [1], "joined": []},
             {"kind": "view", "step": 30, "view": 2, "died": [], "joined": [1]},
             {"kind": "view", "step": 35, "view": 3, "died": [1], "joined": []}]
    lost = lost_work(CFG, launcher, SYNCS + views)
    assert [(x["last_sync_step"], x["rejoined_at_step"], x["replica_steps"]) for x in lost] == [
        (15, 30, 15), (30, None, 10)]
