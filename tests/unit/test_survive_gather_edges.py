"""Edges of the members' gather before a view's group (core/survival.py `Survival.gather`, 933ca62; issue 50's edge
review). The gather's timeouts are documented as a lost peer (edit-method.md §16, *A view's group*: "fails the
attempt as a lost peer: the survivors report that view as failed and move on to the next one"): `attempt` re-raises
whatever `is_peer_loss` does not call one, and the launcher then ends the run as a bug. Here `gather` runs on a real
store (torch's HashStore) with a member that never arrives, and with a newer view published meanwhile."""

from __future__ import annotations

from types import SimpleNamespace

import pytest
import torch.distributed as dist

from edit_lab.core import view as views
from edit_lab.core.survival import Survival, is_peer_loss
from edit_lab.core.view import View


def _rank_of(replica: int, store, wait_s: float) -> Survival:
    """`Survival.gather`'s state, on a store: this rank's replica and shard, and the bound (no trainer, no group)."""
    s = Survival.__new__(Survival)
    s.store, s.wait_s, s.mesh = store, wait_s, SimpleNamespace(replica=replica, shard=0)
    return s


def test_every_member_arrived_the_gather_returns():
    store = dist.HashStore()
    view = views.publish(store, View(2, (0, 1, 2), joined=(1,)))
    store.set(views.arrived_key(2, 0, 1), "1")
    store.set(views.arrived_key(2, 0, 2), "1")
    _rank_of(0, store, wait_s=5.0).gather(view)  # returns at once: all three there
    assert store.check([views.arrived_key(2, 0, 0)])


def _gather_error(superseded: bool) -> BaseException:
    store = dist.HashStore()
    view = views.publish(store, View(2, (0, 1, 2), joined=(1,)))
    store.set(views.arrived_key(2, 0, 2), "1")  # replica 1, the replacement, never comes
    if superseded:
        views.publish(store, View(3, (0, 2), died=(1,)))
    with pytest.raises(Exception) as info:
        _rank_of(0, store, wait_s=0.05).gather(view)
    return info.value


@pytest.mark.parametrize("superseded, words", [
    (False, "view 2 timed out: replica(s) [1] did not reach its group within 0.05 s"),
    (True, "view 2 timed out: superseded by view 3 before every member reached its group"),
])
def test_the_gather_s_timeout_names_the_view_and_the_missing_member(superseded, words):
    assert str(_gather_error(superseded)) == words


@pytest.mark.parametrize("superseded", [False, True])
def test_the_gather_s_timeout_is_a_peer_loss(superseded):
    """It was the builtin TimeoutError (an OSError), which `is_peer_loss` does not call one: a replacement later
    than max(3·timeout_s, 60 s), or a view superseded during the gather, ended the run as a bug ('rank 0 raised
    (not a death ...)') instead of being retried in the next view."""
    assert is_peer_loss(_gather_error(superseded))
