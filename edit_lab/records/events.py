"""Per-rank event log: the raw material of every timeline, table and trace.

Each record is one span of this rank's time (`t0`..`t1`, seconds from the run's common start) or one
decision. Keeping them as plain dicts keeps the worker free of any analysis library and makes the
run directory readable by anything that reads JSON lines.
"""

from __future__ import annotations

import json
import time
from contextlib import contextmanager
from pathlib import Path
from typing import Any, Iterable, Iterator


class Clock:
    """Seconds since the run's common start, float64 (D3): every rank starts it right after a barrier."""

    def __init__(self) -> None:
        self.origin = time.perf_counter()

    def reset(self) -> None:
        self.origin = time.perf_counter()

    def now(self) -> float:
        return time.perf_counter() - self.origin

    #: A wall clock reads this machine's time; `virtual.VirtualClock` advances by a cost model instead.
    virtual = False

    def charge(self, what: str, unit: int | None = None, part: str | None = None) -> None:
        """Where a span of work just ended (a unit's forward or backward, `EventLog.span`'s optimizer, outer
        step, validation): the virtual clock advances by what the work costs there; the wall clock did already."""


class EventLog:
    """Collects this rank's events in memory; the worker writes them out at the end (or on failure).

    Compute spans are taken with `mark()`: on the CPU a marker is the clock's time; on a GPU it is a
    CUDA event recorded on the current stream, because kernels run asynchronously and the host's
    clock would only time their launch. `resolve()` (once per step) turns pending CUDA markers into
    seconds on the same common clock, through a reference event recorded at the common start.
    """

    def __init__(self, rank: int, replica: int, shard: int, clock: Clock, cuda: bool = False) -> None:
        self.rank, self.replica, self.shard = rank, replica, shard
        self.clock = clock
        self.step = 0
        self.events: list[dict[str, Any]] = []
        self.records: list[dict[str, Any]] = []  # penalty decisions and other per-sync records
        self.cuda = cuda
        self._pending: list[tuple[Any, Any, dict[str, Any]]] = []
        self._ref: Any = None
        self._ref_t = 0.0

    # ---------------------------------------------------------------- device-aware compute spans
    def start_device_clock(self) -> None:
        """Call right after `clock.reset()`: the CUDA reference event for time 0."""
        if self.cuda:
            import torch

            self._ref = torch.cuda.Event(enable_timing=True)
            self._ref.record()
            self._ref_t = self.clock.now()

    def mark(self) -> Any:
        if not self.cuda:
            return self.clock.now()
        import torch

        ev = torch.cuda.Event(enable_timing=True)
        ev.record()
        return ev

    def add_span(self, kind: str, m0: Any, m1: Any, exposed_between: tuple[Any, Any] | None = None,
                 **kw: Any) -> None:
        """Like `add`, with markers from `mark()`; on a GPU the span is resolved later.

        `exposed_between=(ma, mb)` stores `data.exposed = mb − ma` (seconds), resolved the same way.
        """
        kw.setdefault("step", self.step)
        if not self.cuda:
            if exposed_between is not None:
                kw["exposed"] = exposed_between[1] - exposed_between[0]
            self.add(kind, m0, m1, **kw)
        else:
            self._pending.append((m0, m1, dict(kind=kind, exposed_between=exposed_between, **kw)))

    def seconds(self, marker: Any) -> float:
        if not self.cuda or isinstance(marker, float):
            return marker
        return self._ref_t + self._ref.elapsed_time(marker) / 1e3

    def resolve(self) -> None:
        if not self._pending:
            return
        import torch

        torch.cuda.synchronize()
        for m0, m1, kw in self._pending:
            kind, between = kw.pop("kind"), kw.pop("exposed_between")
            if between is not None:
                kw["exposed"] = max(0.0, self.seconds(between[1]) - self.seconds(between[0]))
            self.add(kind, self.seconds(m0), self.seconds(m1), **kw)
        self._pending.clear()

    def add(
        self,
        kind: str,
        t0: float,
        t1: float,
        unit: int | None = None,
        nbytes: int = 0,
        group: str | None = None,
        step: int | None = None,
        **data: Any,
    ) -> dict[str, Any]:
        ev = {
            "rank": self.rank,
            "replica": self.replica,
            "shard": self.shard,
            "step": self.step if step is None else step,
            "unit": unit,
            "kind": kind,
            "t0": t0,
            "t1": t1,
            "bytes": nbytes,  # what this rank sends on a ring (`wire.ring_bytes`, comm.py); 0 for non-collectives
            "group": group,
            "data": data,
        }
        self.events.append(ev)
        return ev

    @contextmanager
    def span(self, kind: str, unit: int | None = None, **data: Any) -> Iterator[dict[str, Any]]:
        """Record the time spent inside the block; the yielded dict's `data` may be filled in."""
        t0 = self.clock.now()
        extra: dict[str, Any] = {}
        try:
            yield extra
        finally:
            self.clock.charge(kind, unit)
            self.add(kind, t0, self.clock.now(), unit=unit, **data, **extra)

    def record(self, kind: str, **fields: Any) -> None:
        self.records.append({"kind": kind, "step": self.step, **fields})

    def write(self, path: Path) -> None:
        with open(path, "w") as f:
            for ev in self.events:
                f.write(json.dumps(ev) + "\n")


# ------------------------------------------------------------------------------ what an event is
#: Groups whose collectives cross replicas: waiting on one is a replica waiting on the others.
def coords(rank: int, shards: int) -> tuple[int, int]:
    """(replica, shard) of `rank` in a mesh of `shards` ranks per replica: rank = replica · S + shard. Here, with
    the records, so that what reads them needs no mesh (`core.mesh.Mesh.coords` is this)."""
    return divmod(int(rank), int(shards))


CROSS_REPLICA_GROUPS = frozenset({"sync", "world"})


#: The events of a step that are the replica's own compute: what a consistent straggler stretches.
OWN_COMPUTE_KINDS = frozenset({"compute_fwd", "compute_bwd", "optimizer"})


def own_compute_s(events: Iterable[dict[str, Any]]) -> float:
    """Seconds of own compute among `events` (one step's): forward, backward and optimizer spans, no
    collective and no wait (stragglers.py)."""
    return sum(e["t1"] - e["t0"] for e in events if e["kind"] in OWN_COMPUTE_KINDS)


def is_comm(kind: str, group: str | None) -> bool:
    """True for a collective (it has a group); a `wait` is the rank blocked on one, not a collective.

    The one test of "is this event communication" for every table, figure, trace and summary.
    """
    return group is not None and kind != "wait"


def is_cross_replica(ev: dict[str, Any]) -> bool:
    """A collective over the sync group (or the whole world): the traffic that crosses the slow network."""
    return ev.get("group") in CROSS_REPLICA_GROUPS and is_comm(ev["kind"], ev.get("group"))


def sync_group_bytes(events: Iterable[dict[str, Any]], rank: int = 0) -> int:
    """Bytes `rank` sent through sync-group collectives: what crossed the slow network. An event's `bytes` is what
    its rank sends on a ring (`wire.ring_bytes`: 2(R − 1)/R·S for an all-reduce, (R − 1)·p for an all-gather);
    runs recorded before issue 48 hold the tensor's size instead (an all-gather's R·p)."""
    return sum(int(e.get("bytes") or 0) for e in events
               if e["rank"] == rank and e.get("group") == "sync" and is_comm(e["kind"], e.get("group")))


def write_jsonl(path: Path, rows: list[dict[str, Any]]) -> None:
    with open(path, "w") as f:
        for row in rows:
            f.write(json.dumps(row) + "\n")


def read_jsonl(path: Path) -> list[dict[str, Any]]:
    """Rows of a JSON-lines file, or of its gzipped twin `path.gz` (the shipped example runs); [] if neither."""
    path = Path(path)
    if path.exists():
        with open(path) as f:
            return [json.loads(line) for line in f if line.strip()]
    gz = path.with_name(path.name + ".gz")
    if gz.exists():
        import gzip

        with gzip.open(gz, "rt") as f:
            return [json.loads(line) for line in f if line.strip()]
    return []
