"""The schedule of a run's replica deaths (`fault_replica` at `fault_replica_step`, then `fault_replica_more`), and
when each dead replica's replacement is due. Torch-free, so that the checks, the fault injection, the launcher, the
survivors, the virtual clock and the simulator all read one definition.

A replica may die more than once: its k-th death strikes its k-th life (the run's start is life 0, each replacement
one more). Each replacement is due `rejoin_step − fault_replica_step` steps after its death (for the first death,
`rejoin_step` itself) and joins at the first sync at or after that step, as the first death's does.
"""

from __future__ import annotations

import re
from typing import Any

#: `fault_replica_more`'s syntax: "replica@step" entries separated by commas, e.g. "2@35,0@50".
ENTRY = re.compile(r"^\s*(\d+)\s*@\s*(\d+)\s*$")


def parse_more(text: str) -> list[tuple[int, int]]:
    """The (replica, step) pairs of `fault_replica_more`; ValueError naming the entry that is not `replica@step`."""
    out = []
    for entry in filter(None, (e.strip() for e in (text or "").split(","))):
        m = ENTRY.match(entry)
        if m is None:
            raise ValueError(f"{entry!r} is not replica@step")
        out.append((int(m.group(1)), int(m.group(2))))
    return out


def schedule(cfg: Any) -> list[tuple[int, int]]:
    """Every death of the run as (replica, step), by step: the first (`fault_replica`), then the others."""
    t = cfg.trouble
    if t.fault_replica < 0:
        return []
    return sorted([(t.fault_replica, t.fault_replica_step)] + parse_more(t.fault_replica_more), key=lambda d: d[1])


def life_dying_at(cfg: Any, replica: int, step: int) -> int | None:
    """Which life of `replica` dies at the start of `step` (None: none): its k-th death strikes life k."""
    mine = [s for r, s in schedule(cfg) if r == replica]
    return mine.index(step) if step in mine else None


def rejoin_delay(cfg: Any) -> int | None:
    """Steps from a death to its replacement being due (None: no replacements)."""
    if cfg.runtime.rejoin_step < 0:
        return None
    return cfg.runtime.rejoin_step - cfg.trouble.fault_replica_step


def due_step(cfg: Any, replica: int, step: int) -> int | None:
    """When the replacement of `replica`, dead at `step` (its latest death at or before it), is due; None when no
    replacement comes or the replica has not died by then."""
    delay = rejoin_delay(cfg)
    died = [s for r, s in schedule(cfg) if r == replica and s <= step]
    return None if delay is None or not died else max(died) + delay


def due_now(cfg: Any, missing: list[int] | tuple[int, ...], step: int) -> list[int]:
    """The missing replicas whose replacement is due at a sync of `step` (`due_step` ≤ step)."""
    return [r for r in missing if (d := due_step(cfg, r, step)) is not None and d <= step]
