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
from typing import Any, Iterator


class Clock:
    """Seconds since the run's common start, float64 (D3): every rank starts it right after a barrier."""

    def __init__(self) -> None:
        self.origin = time.perf_counter()

    def reset(self) -> None:
        self.origin = time.perf_counter()

    def now(self) -> float:
        return time.perf_counter() - self.origin


class EventLog:
    """Collects this rank's events in memory; the worker writes them out at the end (or on failure)."""

    def __init__(self, rank: int, replica: int, shard: int, clock: Clock) -> None:
        self.rank, self.replica, self.shard = rank, replica, shard
        self.clock = clock
        self.step = 0
        self.events: list[dict[str, Any]] = []
        self.records: list[dict[str, Any]] = []  # penalty decisions and other per-sync records

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
            "bytes": nbytes,
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
            self.add(kind, t0, self.clock.now(), unit=unit, **data, **extra)

    def record(self, kind: str, **fields: Any) -> None:
        self.records.append({"kind": kind, "step": self.step, **fields})

    def write(self, path: Path) -> None:
        with open(path, "w") as f:
            for ev in self.events:
                f.write(json.dumps(ev) + "\n")


def write_jsonl(path: Path, rows: list[dict[str, Any]]) -> None:
    with open(path, "w") as f:
        for row in rows:
            f.write(json.dumps(row) + "\n")


def read_jsonl(path: Path) -> list[dict[str, Any]]:
    if not Path(path).exists():
        return []
    with open(path) as f:
        return [json.loads(line) for line in f if line.strip()]
