"""Hidden, exposed, or in flight while blocked on something else: the one definition of overlap.

Every table, figure, panel, report, trace and benchmark of the lab that says "hidden" or "exposed"
takes the numbers from here. For one communication span of one rank (a collective, from issue to
completion, `t0`..`t1`):

- **hidden**   = the length of its intersection with the same rank's *work*: forward, backward,
  optimizer, outer step, evaluation and simulated straggler compute, minus any moment at which the
  rank stood blocked on a collective. Nothing else is hidden.
- **exposed**  = the time the rank spent waiting on *this* collective: all of it for a blocking
  collective, the `wait` spans on it for an asynchronous one (prefetch, reduce-scatter, ...).
- **other**    = the rest: in flight while the rank neither worked nor waited on it, i.e. while it
  waited on another collective (or did bookkeeping between spans).

So `hidden + exposed + other = duration` for every span. Two collectives in flight at once can both
be hidden by the same instant of compute; summing spans (a per-kind table) counts such an instant
once per collective, which is right for "how much of this kind was hidden" but not for a rank's
time. Per-rank totals (`rank_totals`) therefore take the *union* of the chosen spans and split it
the same way: every instant of a rank's wall-clock time is counted at most once, and a rank's hidden
total can never exceed its work.

The same split, restricted to some kinds of work (`Overlap.under_work`): how much of a rank's chosen
collectives travelled under, say, its backward compute; e.g. sync's gradient all-reduce, which starts
during the backward as DDP's does (tests/distributed/test_grad_overlap.py asserts it).

Why not `duration − own wait` (the lab's earlier definition): when a rank waits for several
asynchronous collectives one after the other, every one but the one being waited on would count as
hidden although the rank computes nothing.
"""

from __future__ import annotations

import bisect
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from typing import Any

from edit_lab.records.events import coords, is_comm, is_cross_replica

Interval = tuple[float, float]
Event = dict[str, Any]

#: Spans during which a rank does useful work (a straggler's pause simulates a slower device's compute).
WORK_KINDS = frozenset({"compute_fwd", "compute_bwd", "optimizer", "outer_step", "eval", "straggle"})

#: What the three parts are called in legends, hovers and notebooks.
LEGEND = {
    "hidden": "hidden: in flight while the rank computed",
    "exposed": "exposed: the rank waited on it",
    "other": "in flight while the rank waited on another collective",
}


# ------------------------------------------------------------------------------------ intervals
def merge(intervals: Iterable[Interval]) -> list[Interval]:
    """Sorted, disjoint union of intervals (empty ones dropped)."""
    out: list[list[float]] = []
    for a, b in sorted((a, b) for a, b in intervals if b > a):
        if out and a <= out[-1][1]:
            out[-1][1] = max(out[-1][1], b)
        else:
            out.append([a, b])
    return [(a, b) for a, b in out]


def subtract(base: Sequence[Interval], cut: Sequence[Interval]) -> list[Interval]:
    """`base` minus `cut`, both merged."""
    out: list[Interval] = []
    j = 0
    for a, b in base:
        while j < len(cut) and cut[j][1] <= a:
            j += 1
        k, cur = j, a
        while k < len(cut) and cut[k][0] < b:
            if cut[k][0] > cur:
                out.append((cur, cut[k][0]))
            cur = max(cur, cut[k][1])
            k += 1
        if cur < b:
            out.append((cur, b))
    return out


def intersect(a: Sequence[Interval], b: Sequence[Interval]) -> list[Interval]:
    """Intersection of two merged interval lists."""
    out: list[Interval] = []
    i = j = 0
    while i < len(a) and j < len(b):
        lo, hi = max(a[i][0], b[j][0]), min(a[i][1], b[j][1])
        if hi > lo:
            out.append((lo, hi))
        if a[i][1] < b[j][1]:
            i += 1
        else:
            j += 1
    return out


def clip(merged: Sequence[Interval], t0: float, t1: float, ends: Sequence[float] | None = None) -> list[Interval]:
    """The parts of a merged list inside [t0, t1]; `ends` (the intervals' ends) makes it a bisection."""
    i = bisect.bisect_right(ends, t0) if ends is not None else 0
    out: list[Interval] = []
    for a, b in merged[i:]:
        if a >= t1:
            break
        lo, hi = max(a, t0), min(b, t1)
        if hi > lo:
            out.append((lo, hi))
    return out


def length(intervals: Iterable[Interval]) -> float:
    return sum(b - a for a, b in intervals)


# ------------------------------------------------------------------------------------ per span
@dataclass(frozen=True)
class Split:
    """One communication span cut into its three parts (seconds), with where each part lies."""

    duration: float
    hidden: float
    exposed: float
    other: float
    exposed_at: tuple[Interval, ...] = ()
    other_at: tuple[Interval, ...] = ()


NOT_COMM = Split(0.0, 0.0, 0.0, 0.0)


@dataclass
class _Rank:
    work: list[Interval]  # work minus the moments blocked on a collective, merged
    own: dict[int, list[Interval]]  # id(comm event) -> its exposed intervals
    blocked: list[Interval]  # every moment the rank stood blocked on a collective, merged

    def __post_init__(self) -> None:
        self.work_ends = [b for _, b in self.work]


def _own_blocked(ev: Event, waits: dict[tuple, list[Interval]]) -> list[Interval]:
    """When this rank waited on `ev`: its `wait` spans if it was asynchronous, else the blocking span.

    An asynchronous collective that had completed before the rank waited on it (its `wait` lies after
    the span) cost the rank nothing: no part of it is exposed. Only a run that recorded no `wait` on
    this collective at all falls back on `data.exposed`, taken as the end of the span (older runs
    recorded only that number; without it a collective counts as blocking).
    """
    t0, t1 = ev["t0"], ev["t1"]
    data = ev.get("data") or {}
    recorded = waits.get((ev["kind"], ev.get("unit"), ev.get("group")))
    if data.get("overlapped") and recorded:
        return merge((max(a, t0), min(b, t1)) for a, b in recorded if a < t1 and b > t0)
    raw = data.get("exposed")
    exposed = (t1 - t0) if raw is None else min(max(float(raw), 0.0), t1 - t0)
    return [(t1 - exposed, t1)] if exposed > 0 else []


class Overlap:
    """The split of every communication span of a set of events (all ranks), computed once.

    Build it from *all* of a run's events (a span near the edge of a step window is hidden by compute
    of the neighbouring step), then ask about any subset.
    """

    def __init__(self, events: Iterable[Event]) -> None:
        by_rank: dict[int, list[Event]] = {}
        for e in events:
            by_rank.setdefault(e["rank"], []).append(e)
        self._events = by_rank  # keeps the events alive: their id()s key the splits below
        self._ranks: dict[int, _Rank] = {}
        self._splits: dict[int, Split] = {}
        for rank, evs in by_rank.items():
            waits: dict[tuple, list[Interval]] = {}
            for e in evs:
                if e["kind"] == "wait":
                    d = e.get("data") or {}
                    waits.setdefault((d.get("on"), e.get("unit"), e.get("group")), []).append((e["t0"], e["t1"]))
            comm = [e for e in evs if is_comm(e["kind"], e.get("group"))]
            own = {id(e): _own_blocked(e, waits) for e in comm}
            blocked = merge([iv for ivs in own.values() for iv in ivs]
                            + [(e["t0"], e["t1"]) for e in evs if e["kind"] == "wait"])
            work = subtract(merge((e["t0"], e["t1"]) for e in evs if e["kind"] in WORK_KINDS), blocked)
            state = _Rank(work, own, blocked)
            self._ranks[rank] = state
            for e in comm:
                self._splits[id(e)] = self._cut(e, state)

    @staticmethod
    def _cut(ev: Event, st: _Rank) -> Split:
        t0, t1 = ev["t0"], max(ev["t1"], ev["t0"])
        dur = t1 - t0
        exposed_at = st.own[id(ev)]
        hidden_at = clip(st.work, t0, t1, st.work_ends)
        hidden = length(hidden_at)
        exposed = length(exposed_at)
        other_at = subtract(subtract([(t0, t1)] if dur > 0 else [], hidden_at), exposed_at)
        other = max(dur - hidden - exposed, 0.0)
        return Split(dur, hidden, exposed, other, tuple(exposed_at), tuple(other_at))

    def split(self, ev: Event) -> Split:
        """The split of one event of the set (NOT_COMM for anything that is not a collective)."""
        return self._splits.get(id(ev), NOT_COMM)

    def rank_totals(self, events: Iterable[Event]) -> dict[int, dict[str, float]]:
        """Per rank, over the collectives among `events`, each instant counted once:

        comm_s (time with at least one of them in flight), hidden_s, exposed_s, other_s
        (comm_s = hidden_s + exposed_s + other_s).
        """
        spans: dict[int, list[Interval]] = {}
        own: dict[int, list[Interval]] = {}
        for e in events:
            if id(e) in self._splits:
                spans.setdefault(e["rank"], []).append((e["t0"], e["t1"]))
                own.setdefault(e["rank"], []).extend(self._ranks[e["rank"]].own[id(e)])
        out: dict[int, dict[str, float]] = {}
        for rank, ivs in spans.items():
            st = self._ranks[rank]
            u = merge(ivs)
            comm_s = length(u)
            hidden = length(intersect(u, st.work))
            exposed = length(merge(own[rank]))
            out[rank] = {"comm_s": comm_s, "hidden_s": hidden, "exposed_s": exposed,
                         "other_s": max(comm_s - hidden - exposed, 0.0)}
        return out

    def under_work(self, events: Iterable[Event], kinds: Iterable[str]) -> dict[int, dict[str, float]]:
        """Per rank, how much of the collectives among `events` travelled under its work of `kinds` (some of
        `WORK_KINDS`: "compute_bwd" for "under the backward"), each instant counted once:

        comm_s (time with at least one of them in flight, as `rank_totals`), work_s (the rank's work of those
        kinds, minus every moment it stood blocked on a collective, as for `hidden`) and under_s (their
        intersection). under_s <= min(comm_s, work_s); with every work kind it is `rank_totals`' hidden_s.
        A rank with none of these collectives is left out.
        """
        kinds = frozenset(kinds)
        if not kinds <= WORK_KINDS:
            raise ValueError(f"not work (overlap.WORK_KINDS): {sorted(kinds - WORK_KINDS)}")
        spans: dict[int, list[Interval]] = {}
        for e in events:
            if id(e) in self._splits:
                spans.setdefault(e["rank"], []).append((e["t0"], e["t1"]))
        out: dict[int, dict[str, float]] = {}
        for rank, ivs in spans.items():
            comm = merge(ivs)
            work = subtract(merge((e["t0"], e["t1"]) for e in self._events[rank] if e["kind"] in kinds),
                            self._ranks[rank].blocked)
            out[rank] = {"comm_s": length(comm), "work_s": length(work), "under_s": length(intersect(comm, work))}
        return out

    def totals(self, events: Iterable[Event]) -> dict[str, float]:
        """`rank_totals` summed over the ranks (rank-seconds): total_s (with communication in flight),
        hidden_s, exposed_s, other_s. No instant of any rank is counted twice: the communication totals
        of every table and figure."""
        per_rank = list(self.rank_totals(events).values())
        return {"total_s": float(sum(v["comm_s"] for v in per_rank)),
                **{k: float(sum(v[k] for v in per_rank)) for k in ("hidden_s", "exposed_s", "other_s")}}

    def replica_blocked_s(self, events: Iterable[Event], shards: int) -> dict[int, float]:
        """Per replica: the seconds it stood blocked on the sync group, the one definition of that time.

        The exposed part (see the module docstring) of the cross-replica collectives among `events`
        (groups sync and world, `events.CROSS_REPLICA_GROUPS`), each instant of a rank counted once,
        averaged over the replica's `shards` ranks (a rank without any such collective counts 0).
        Choose `events` to choose the window (a run's training steps, the steps after warm-up, ...).
        """
        out: dict[int, float] = {}
        cross = [e for e in events if is_cross_replica(e)]
        for rank, tot in self.rank_totals(cross).items():
            replica = coords(rank, shards)[0]
            out[replica] = out.get(replica, 0.0) + tot["exposed_s"] / shards
        return out

    def work_s(self, rank: int) -> float:
        """All of a rank's work (seconds), blocked moments excluded."""
        st = self._ranks.get(rank)
        return length(st.work) if st else 0.0
