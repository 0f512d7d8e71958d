"""Edges of the work a death loses (runtime/survive_records.py `lost_work`; issue 50's edge review): a replica that
dies more than once. Hand-built launcher and sync rows, as tests/unit/test_survive_config.py's; the arithmetic by
hand. 25 steps lost by one replica must not be counted once per death (the review found 75 counted)."""

from __future__ import annotations

from edit_lab import RunConfig
from edit_lab.runtime.survive_records import lost_work

CFG = dict(method="diloco", replicas=3, shards=1, steps=40, warmup_steps=10, sync_interval=5, survive=True,
           fault_replica=1, fault_replica_step=18, rejoin_step=25, batch_size=4, seq_len=32)


def _syncs(with_1: set[int]) -> list[dict]:
    return [{"kind": "sync", "step": s, "members": [0, 1, 2] if s in with_1 else [0, 2]}
            for s in (10, 15, 20, 25, 30, 35, 40)]


def test_replacements_that_never_join_do_not_count_the_loss_again():
    """Killed at 18, then two replacements fenced as hung in the views that admitted them (never joined): the
    launcher's rows hold three deaths of replica 1, the schedule one; the loss is 15 → 40, once."""
    launcher = [{"kind": "death", "replica": 1}, {"kind": "view", "view": 1, "died": [1], "joined": []},
                {"kind": "view", "view": 2, "died": [], "joined": [1], "asked_at_step": 25},
                {"kind": "death", "replica": 1}, {"kind": "view", "view": 3, "died": [1], "joined": []},
                {"kind": "view", "view": 4, "died": [], "joined": [1], "asked_at_step": 30},
                {"kind": "death", "replica": 1}, {"kind": "view", "view": 5, "died": [1], "joined": []}]
    lost = lost_work(RunConfig(**CFG), launcher, _syncs({10, 15}))
    # the first death until the first replacement's join (asked at 25); that replacement, fenced in its join (a
    # death no schedule names), from 25 to the second's (30); the second from 30 to the end
    assert [(x["last_sync_step"], x["replica_steps"]) for x in lost] == [(15, 10), (25, 5), (30, 10)]
    assert sum(x["replica_steps"] for x in lost) == 40 - 15  # once


def test_a_replacement_that_dies_again_loses_its_own_steps():
    launcher = [{"kind": "death", "replica": 1}, {"kind": "view", "view": 1, "died": [1], "joined": []},
                {"kind": "view", "view": 2, "died": [], "joined": [1], "asked_at_step": 30},
                {"kind": "death", "replica": 1}, {"kind": "view", "view": 3, "died": [1], "joined": []}]
    cfg = RunConfig(**CFG, fault_replica_more="1@33")  # its replacement (life 1) killed at 33
    lost = lost_work(cfg, launcher, _syncs({10, 15, 30}))
    assert [(x["last_sync_step"], x["rejoined_at_step"], x["replica_steps"]) for x in lost] == [
        (15, 30, 15), (30, None, 10)]
