"""The time-budget stop protocol (edit-method.md §12) between two replicas, without processes.

Each replica runs in a thread with a `PairedComm`: every sync-group collective meets the other replica's
next one, and the test fails if the two issue different collectives (kind or size) or if one waits for
a collective the other never issues, which is what a real run would do as a gloo size mismatch or a hang.
"""

from __future__ import annotations

import threading
from types import SimpleNamespace

import torch

from edit_lab.config import RunConfig
from edit_lab.core.methods.local_sgd import LocalSGDMethod

TIMEOUT_S = 5.0


class PairedComm:
    """All-gathers over a sync group of two replicas in two threads; records (kind, numel) per replica."""

    def __init__(self, shared: dict, replica: int) -> None:
        self.shared, self.replica = shared, replica
        self.mesh = SimpleNamespace(replicas=2, shards=1, replica=replica)
        self.device = torch.device("cpu")  # where collective tensors live (`Comm.device`)
        self.wire = "none"  # issue 48/49: a Comm is built with its wire format, which the method checks
        self.calls: list[tuple[str, int]] = []

    def all_gather(self, out: torch.Tensor, inp: torch.Tensor, group: str, kind: str = "all_gather", **_) -> None:
        i = len(self.calls)
        self.calls.append((kind, inp.numel()))
        box = self.shared.setdefault(i, {"barrier": threading.Barrier(2, timeout=TIMEOUT_S), "parts": {}})
        box["parts"][self.replica] = (kind, inp.clone())
        box["barrier"].wait()  # BrokenBarrierError: the other replica never issued a collective #i
        kinds = {k for k, _ in box["parts"].values()}
        assert len(kinds) == 1, f"collective #{i}: {kinds} issued together"
        out.copy_(torch.cat([box["parts"][r][1] for r in (0, 1)]))


class Recorder:
    def __init__(self) -> None:
        self.records: list[dict] = []
        self.step = 0

    def record(self, kind: str, **fields) -> None:
        self.records.append({"kind": kind, **fields})


def replica(shared: dict, r: int, last_sync_step: int) -> LocalSGDMethod:
    comm = PairedComm(shared, r)
    engine = SimpleNamespace(comm=comm, log=Recorder(), device=torch.device("cpu"), shards=[])
    m = LocalSGDMethod(RunConfig(time_budget=10.0, replicas=2, shards=1), engine)
    m.outer = object()  # past warm-up: only `is None` is looked at by the protocol
    m.last_sync_step = last_sync_step
    return m


def run_both(a, b) -> list:
    results: list = [None, None]
    errors: list = []

    def go(i, fn):
        try:
            results[i] = fn()
        except BaseException as e:  # noqa: BLE001 (reported below with the replica's index)
            errors.append((i, e))

    threads = [threading.Thread(target=go, args=(0, a)), threading.Thread(target=go, args=(1, b))]
    for t in threads:
        t.start()
    for t in threads:
        t.join(timeout=3 * TIMEOUT_S)
    assert not errors, errors
    return results


def test_fast_replica_done_at_its_sync_point_while_the_slow_one_finalizes():
    """Replica 0 reaches sync point 20 with its budget spent; replica 1 stops mid-round at step 14: the
    sync-point meeting is already the last one (everyone done) and both take one final sync."""
    shared: dict = {}
    fast, slow = replica(shared, 0, last_sync_step=10), replica(shared, 1, last_sync_step=10)

    def fast_side():
        stop = not fast.go_on(20, spent=True)
        return stop, fast.final_sync_needed(20)

    def slow_side():
        return slow.final_sync_needed(14)

    (stopped, fast_syncs), slow_syncs = run_both(fast_side, slow_side)
    assert stopped and fast_syncs and slow_syncs
    assert fast.comm.calls == slow.comm.calls == [("stop_check", 2)]  # one meeting each, the same one
    assert fast.last_meeting == slow.last_meeting == ([True, True], 10 + 4)


def test_fast_replica_not_yet_done_meets_again_in_finalize():
    """Replica 0's clock is just short of the budget at its sync point: it learns there that replica 1 is
    done, stops, and meets once more (done) with replica 1, which is still looping in `finalize`."""
    shared: dict = {}
    fast, slow = replica(shared, 0, last_sync_step=10), replica(shared, 1, last_sync_step=10)

    def fast_side():
        stop = not fast.go_on(20, spent=False)
        return stop, fast.final_sync_needed(20)

    (stopped, fast_syncs), slow_syncs = run_both(fast_side, lambda: slow.final_sync_needed(14))
    assert stopped and fast_syncs and slow_syncs
    assert fast.comm.calls == slow.comm.calls == [("stop_check", 2)] * 2
    assert [r["done"] for r in fast.log.records] == [[False, True], [True, True]]


def test_nothing_trained_since_the_last_sync_means_no_final_sync():
    shared: dict = {}
    a, b = replica(shared, 0, last_sync_step=20), replica(shared, 1, last_sync_step=20)
    assert run_both(lambda: a.final_sync_needed(20), lambda: b.final_sync_needed(20)) == [False, False]
