"""Backup workers' rendezvous: which replicas are the first m ready for this step's backward.

Synchronous SGD with backup workers (Chen et al. 2016, "Revisiting Distributed Synchronous SGD") averages,
each step, the gradients of the first m of its n replicas and drops the rest. A parameter server simply
stops listening; an all-reduce cannot: every member of a gloo (or NCCL) group must take part in every
collective. So the late replicas must *join* the step's all-reduces, with zeros, and must do so without
making the fast ones wait for them. They learn that they are late here, from a rendezvous outside the
process group, while they are still busy:

- a replica is *ready* once its forward is done and its straggler pause (its device's slowness this
  step, `stragglers.py`) is spent: the backward's own compute is the same on every replica, so the first
  m ready are the first m to finish their backward;
- readiness is counted in the rendezvous store (the `TCPStore` the launcher or torchrun hosts) with one
  atomic `add` per replica: the first m answers 1..m are the quorum, and the m-th also marks the step's
  quorum as met;
- a replica still spinning through its pause asks the store every `POLL_S` whether the quorum is met; once
  it is, it stops there (it *abandons the step*: its forward is thrown away, it runs no backward) and joins
  the step's gradient all-reduces at once with zeros. The fast replicas wait for it at most one poll and a
  store round trip (measured in `tests/distributed/test_backup.py`), not for its pause;
- the ranks of a replica move together: its shard-0 rank (the leader) spins, counts and decides; the other
  ranks read the replica's verdict from the store.

Exactly m replicas contribute every step, so every replica divides the sum by m. With m = R nobody is
ever late and the numbers are synchronous training's to the bit.

The virtual clock decides the same thing from virtual times (`clock/virtual.py`, `Fabric`'s quorum); the
preview simulator too (`clock/sim/engine.py`, `Quorum`).
"""

from __future__ import annotations

import time
from dataclasses import dataclass
from datetime import timedelta

import torch.distributed as dist

#: How often a replica spinning through its pause asks whether the quorum is met (seconds).
POLL_S = 0.0005


@dataclass(frozen=True)
class Pause:
    """A straggler's pause as planned (`StragglerModel.plan`): its seconds, its reason and the own compute it was
    computed from; backup workers spend it in the rendezvous, asking whether they are still needed."""

    seconds: float
    reason: str | None
    compute: float


@dataclass(frozen=True)
class Verdict:
    """A replica's answer for one step: is its gradient among the m averaged, and how long it spun."""

    member: bool
    spun_s: float  # of its planned pause, what passed before the verdict (all of it for a member)


def quorum_key(step: int) -> str:
    return f"edit_lab/quorum/{step}"


def default_store() -> dist.Store:
    """The store the process group was initialised with (ours or torchrun's): both serve any number of clients."""
    return dist.distributed_c10d._get_default_store()


def store_rendezvous(store: dist.Store, step: int, replica: int, leader: bool, m: int, pause_s: float,
                     timeout_s: float) -> Verdict:
    """This rank's verdict at `step`; the leader spins `pause_s` seconds (asking every `POLL_S`) first."""
    key = quorum_key(step)
    fate = f"{key}/replica{replica}"
    t0 = time.perf_counter()
    if not leader:
        store.wait([fate], timedelta(seconds=timeout_s))
        return Verdict(store.get(fate) == b"1", time.perf_counter() - t0)
    end = t0 + pause_s
    member = False
    while True:
        now = time.perf_counter()
        if now >= end:
            order = store.add(f"{key}/ready", 1)
            member = order <= m
            if order == m:
                store.set(f"{key}/met", b"1")
            break
        if store.check([f"{key}/met"]):
            break
        poll_until = min(end, now + POLL_S)
        while time.perf_counter() < poll_until:  # spin, as a straggler does (stragglers.py says why)
            pass
    store.set(fate, b"1" if member else b"0")
    return Verdict(member, time.perf_counter() - t0)
