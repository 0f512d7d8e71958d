"""The event engine: replicas as generators, sync-group collectives matched in issue order.

Each replica is a Python generator (its program, `programs.py`) that yields requests and gets answers:

    Work(kind, seconds)          the replica computes (or spins): its clock moves on
    Local(kind, seconds)         a blocking shard-group exchange (inside the replica: a fixed cost; none
                                 with one shard, where `Comm` exchanges nothing)
    Issue(kind, nbytes, payload) a sync-group collective; the answer is a SimHandle
    Wait(handle)                 block until the collective is complete; the answer is every replica's payload
    Quorum(m, pause_s)           backup workers' rendezvous: among the first m ready? (no transfer, no wait)
    Now()                        the replica's clock
    Step(n), Row(fields)         bookkeeping: the step events belong to; a metrics row stamped with the clock

The n-th sync-group collective of every replica is the same collective, exactly as in a real process
group, so one that every replica has issued completes at

    done     = max(issue times, end of the previous collective of the group) + latency + bytes / bandwidth
    deadline = as `comm.LinkModel.deadline(done, bytes)` when the config simulates a link

A replica blocked in `Wait` resumes at the completion; the time in between is its *exposed* time on that
collective, recorded as a real run records it (`comm.Comm._complete`): the collective's span with
`data.overlapped`/`data.exposed`, plus a `wait` span for an asynchronous one. `overlap.py` then reads the
simulated events exactly as it reads a real run's. Replicas run one after the other until each blocks on
a collective some replica has not issued yet; nothing but collectives couples them, so the order in which
they are advanced does not change any time.
"""

from __future__ import annotations

from collections.abc import Generator
from dataclasses import dataclass, field
from typing import Any

from edit_lab.clock.costs import Costs
from edit_lab.core.wire import ring_bytes
from edit_lab.protocol import quorum_verdicts


# ------------------------------------------------------------------------------------ requests
@dataclass
class Work:
    kind: str
    seconds: float
    unit: int | None = None
    data: dict[str, Any] = field(default_factory=dict)


@dataclass
class Local:
    kind: str
    seconds: float
    unit: int | None = None


@dataclass
class Issue:
    kind: str
    nbytes: int
    unit: int | None = None
    payload: Any = None
    blocking: bool = False  # True: the caller waits at once (`comm` with async_op=False)
    parts: tuple[int, ...] = ()  # back-to-back collectives of these sizes, waited for together (same times)
    op: str = "all_reduce"  # nbytes is the whole tensor; charged and recorded by `wire.ring_bytes` for this op


@dataclass
class Quorum:
    """Backup workers' rendezvous (`Fabric.quorum`): the replica will be ready `pause_s` from now; the answer is
    whether it is among the first m, once every replica has asked; its clock moves to its verdict."""

    m: int
    pause_s: float
    data: dict[str, Any] = field(default_factory=dict)  # the pause's `straggle` event (reason, planned, compute)


@dataclass
class Wait:
    handle: "SimHandle"


@dataclass
class Now:
    pass


@dataclass
class Step:
    """From here on the replica's events belong to step `step`."""

    step: int


@dataclass
class Row:
    """A metrics row (metrics.jsonl's shape): `t` is filled in with the replica's clock."""

    fields: dict[str, Any]


@dataclass
class SimHandle:
    """One replica's view of one sync-group collective."""

    index: int
    kind: str
    unit: int | None
    nbytes: int
    t0: float
    step: int
    blocking: bool
    group: Any = 0  # the collective group it belongs to (survival: the view's number)


@dataclass
class _Collective:
    kind: str
    nbytes: int
    parts: tuple[int, ...] = ()
    members: tuple[int, ...] = ()
    issued: dict[int, float] = field(default_factory=dict)
    payloads: dict[int, Any] = field(default_factory=dict)
    end: float | None = None
    failed_for: dict[int, float] | None = None  # survival: a member died, each arrived member's failure time
    error: str = ""

    @property
    def settled(self) -> bool:
        """Completed, or failed for the members that arrived (they learn it at `failed_for`)."""
        return self.end is not None or self.failed_for is not None


Program = Generator[Any, Any, None]


class DeadlockError(RuntimeError):
    """Every unfinished replica waits on a collective some replica never issues (a schedule bug)."""


class PeerLoss(RuntimeError):
    """Thrown into a replica's program whose sync-group collective failed: a member died (survival, `survive.py`),
    as gloo's wait raises on a real rank."""


@dataclass
class ReplicaState:
    replica: int
    program: Program
    t: float = 0.0
    step: int = 0
    blocked: SimHandle | None = None
    asked: int | None = None  # the quorum it waits on (`Quorum`), by index
    blocked_at: float = 0.0
    finished: bool = False
    pending: Any = None  # the answer to send on the next resume
    throw: BaseException | None = None  # raised in the program on the next resume instead (a failed collective)
    group: Any = 0  # its sync group's key (survival: the view's number) and members
    members: tuple[int, ...] = ()
    parked: Any = None  # survival: a request that waits on the launcher's side or the store (`survive.py`)
    lost: bool = False  # a dead life: its rows and events are lost with it, as a dead rank's are
    exposed: list[tuple[float, float]] = field(default_factory=list)  # sync-group exposed intervals
    rows: list[dict[str, Any]] = field(default_factory=list)  # metrics rows


class Engine:
    """Runs the replicas' programs against one sync group (and its simulated link)."""

    def __init__(self, costs: Costs, replicas: int, shards: int, link_latency_s: float = 0.0,
                 link_Bps: float = 0.0, keep_events: bool = True) -> None:
        self.costs, self.R, self.S = costs, replicas, shards
        self.link_latency_s, self.link_Bps = link_latency_s, link_Bps
        self.link_free_at: dict[Any, float] = {}  # per group: each group has its link and its backend queue
        self.backend_free_at: dict[Any, float] = {}
        self.keep_events = keep_events
        self.events: list[dict[str, Any]] = []
        self.collectives: dict[Any, list[_Collective]] = {}  # per group, in issue order
        self.issued_count: dict[tuple[int, Any], int] = {}  # (replica, group): collectives issued
        self._next_to_complete: dict[Any, int] = {}  # per group: collectives before this index are settled
        self.quorums: list[dict[int, tuple[float, float]]] = []  # per rendezvous: replica -> (arrived, ready)
        self.verdicts: list[dict[int, tuple[bool, float]]] = []  # per rendezvous, once all asked: (member, when)
        self._asked: dict[tuple[int, int], Quorum] = {}
        self.states: list[ReplicaState] = []

    @property
    def link_active(self) -> bool:
        return self.link_latency_s > 0 or self.link_Bps > 0

    # ------------------------------------------------------------------------------ events
    def add(self, st: ReplicaState, kind: str, t0: float, t1: float, unit: int | None = None, nbytes: int = 0,
            group: str | None = None, step: int | None = None, **data: Any) -> None:
        """One span, in events.py's shape, on the replica's shard-0 rank (`events_all_shards` copies it)."""
        if not self.keep_events:
            return
        self.events.append({"rank": st.replica * self.S, "replica": st.replica, "shard": 0,
                            "step": st.step if step is None else step, "unit": unit, "kind": kind, "t0": t0,
                            "t1": t1, "bytes": nbytes, "group": group, "data": data})

    # ------------------------------------------------------------------------------ collectives
    def _issue(self, st: ReplicaState, req: Issue) -> SimHandle:
        g, n_members = st.group, len(st.members)
        n = self.issued_count.get((st.replica, g), 0)
        self.issued_count[(st.replica, g)] = n + 1
        group = self.collectives.setdefault(g, [])
        if n == len(group):
            ring = [ring_bytes(req.op, b, n_members) for b in (req.parts or (req.nbytes,))]
            group.append(_Collective(req.kind, ring_bytes(req.op, req.nbytes, n_members), tuple(ring), st.members))
        c = group[n]
        if c.kind != req.kind:  # a real process group would pair two different collectives: a schedule bug
            raise DeadlockError(f"sync-group collective #{n}: replica {st.replica} issued {req.kind!r}, "
                                f"another replica {c.kind!r}")
        c.issued[st.replica] = st.t
        c.payloads[st.replica] = req.payload
        self._arrived(g, c)
        return SimHandle(n, req.kind, req.unit, c.nbytes, st.t, st.step, req.blocking, g)

    def _arrived(self, g: Any, c: _Collective) -> None:
        """A member issued `c`: complete what can be (`survive.py` fails it instead when a member is dead)."""
        if len(c.issued) == len(c.members):
            self._complete_ready(g)

    def _complete_ready(self, g: Any) -> None:
        """Give completion times, in issue order, to every collective of group `g` all its members have issued."""
        group = self.collectives[g]
        while self._next_to_complete.get(g, 0) < len(group):
            c = group[self._next_to_complete.get(g, 0)]
            if c.failed_for is None and len(c.issued) < len(c.members):
                return
            self._next_to_complete[g] = self._next_to_complete.get(g, 0) + 1
            if c.failed_for is not None:  # a failed collective takes no time of the group's backend or link
                continue
            issued = max(c.issued.values())
            for nbytes in c.parts:  # a request of several parts: each its own collective, in order
                done = max(issued, self.backend_free_at.get(g, 0.0)) + self.costs.collective_s(nbytes)
                self.backend_free_at[g] = done
                if self.link_active:
                    start = max(done, self.link_free_at.get(g, 0.0))
                    done = start + self.link_latency_s + (nbytes / self.link_Bps if self.link_Bps > 0 else 0.0)
                    self.link_free_at[g] = done
            c.end = done

    def _verdict(self, st: ReplicaState, n: int) -> bool:
        """The replica's verdict; its clock moves to it, the pause it spun recorded as a real run records it."""
        member, when = self.verdicts[n][st.replica]
        req, t0 = self._asked.pop((n, st.replica)), st.t
        st.t = max(st.t, when)
        if req.pause_s > 0:
            self.add(st, "straggle", t0, st.t, **req.data, abandoned=not member)
        return member

    def collective(self, h: SimHandle) -> _Collective:
        return self.collectives[h.group][h.index]

    def _finish_wait(self, st: ReplicaState, h: SimHandle, w0: float) -> Any:
        c = self.collective(h)
        if c.failed_for is not None:  # gloo's wait raises once the failure's time has come; nothing is recorded
            st.t = max(w0, c.failed_for[st.replica])
            st.throw = PeerLoss(c.error)
            return None
        assert c.end is not None
        end = max(c.end, w0)
        st.t = end
        if h.blocking:
            if end > h.t0:
                st.exposed.append((h.t0, end))
            self.add(st, h.kind, h.t0, end, unit=h.unit, nbytes=h.nbytes, group="sync", step=h.step,
                     overlapped=False, exposed=end - h.t0)
        else:
            if end > w0:
                st.exposed.append((w0, end))
            self.add(st, h.kind, h.t0, c.end, unit=h.unit, nbytes=h.nbytes, group="sync", step=h.step,
                     overlapped=True, exposed=end - w0)
            self.add(st, "wait", w0, end, unit=h.unit, group="sync", on=h.kind)
        return [c.payloads[r] for r in sorted(c.payloads)]

    def _ask(self, st: ReplicaState, req: Quorum) -> int:
        """Record the replica's question; once every replica asked, the verdicts (`protocol.quorum_verdicts`)."""
        n = sum(1 for q in self.quorums if st.replica in q)
        if n == len(self.quorums):
            self.quorums.append({})
            self.verdicts.append({})
        q = self.quorums[n]
        q[st.replica] = (st.t, st.t + req.pause_s)
        self._asked[(n, st.replica)] = req
        if len(q) == self.R:
            self.verdicts[n] = quorum_verdicts(q, req.m)
        return n

    # ------------------------------------------------------------------------------ scheduling
    def run(self, programs: list[Program]) -> None:
        members = tuple(range(self.R))
        self.states = [ReplicaState(r, p, members=members) for r, p in enumerate(programs)]
        while True:
            progressed = False
            for st in list(self.states):
                if st.finished:
                    continue
                if st.asked is not None:
                    if not self.verdicts[st.asked]:
                        continue
                    st.pending, st.asked = self._verdict(st, st.asked), None
                elif st.blocked is not None:
                    if not self.collective(st.blocked).settled:
                        continue
                    h, st.blocked = st.blocked, None
                    st.pending = self._finish_wait(st, h, st.blocked_at)
                elif st.parked is not None:
                    continue
                progressed = True
                self._advance(st)
            if all(st.finished for st in self.states):
                return
            if not progressed and not self._unpark():
                waiting = {st.replica: st.blocked.kind for st in self.states if st.blocked is not None}
                raise DeadlockError(f"every replica waits on a collective another never issues: {waiting}")

    def _unpark(self) -> bool:
        """Nothing can run: let a parked request go on (`survive.py`); False when none can."""
        return False

    def _request(self, st: ReplicaState, req: Any) -> bool:
        """A request the base engine does not know (`survive.py`'s); True when the replica must stop here."""
        raise TypeError(f"unknown request {req!r}")

    def _advance(self, st: ReplicaState) -> None:
        """Run one replica until it blocks on an incomplete collective or ends."""
        while True:
            try:
                if st.throw is not None:
                    exc, st.throw = st.throw, None
                    req = st.program.throw(exc)
                else:
                    req = st.program.send(st.pending)
            except StopIteration:
                st.finished = True
                return
            st.pending = None
            if isinstance(req, Work):
                t0 = st.t
                st.t += max(req.seconds, 0.0)
                if req.seconds > 0:
                    self.add(st, req.kind, t0, st.t, unit=req.unit, **req.data)
            elif isinstance(req, Local):
                if self.S == 1:  # a group of one exchanges nothing: `Comm` returns at once, unrecorded
                    continue
                t0 = st.t
                st.t += max(req.seconds, 0.0)
                self.add(st, req.kind, t0, st.t, unit=req.unit, group="shard", overlapped=False,
                         exposed=st.t - t0)
            elif isinstance(req, Now):
                st.pending = st.t
            elif isinstance(req, Step):
                st.step = req.step
            elif isinstance(req, Row):
                st.rows.append({**req.fields, "replica": st.replica, "t": st.t})
            elif isinstance(req, Issue):
                h = self._issue(st, req)
                if not req.blocking:
                    st.pending = h
                    continue
                if not self.collective(h).settled:
                    st.blocked, st.blocked_at = h, st.t
                    return
                st.pending = self._finish_wait(st, h, st.t)
            elif isinstance(req, Quorum):
                n = self._ask(st, req)
                if not self.verdicts[n]:
                    st.asked = n
                    return
                st.pending = self._verdict(st, n)
            elif isinstance(req, Wait):
                h = req.handle
                if not self.collective(h).settled:
                    st.blocked, st.blocked_at = h, st.t
                    return
                st.pending = self._finish_wait(st, h, st.t)
            elif self._request(st, req):
                return


def events_all_shards(events: list[dict[str, Any]], shards: int) -> list[dict[str, Any]]:
    """Every shard-0 event copied to the replica's other ranks: a replica's ranks move together."""
    out: list[dict[str, Any]] = []
    for s in range(shards):
        for e in events:
            out.append(e if s == 0 else {**e, "rank": e["rank"] + s, "shard": s, "data": dict(e["data"])})
    return out
