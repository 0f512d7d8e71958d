"""Deaths and joins in the preview simulator (`survive=True`; docs/edit-method.md §13, §16): the launcher's side.

`SurvivingEngine` is the engine (`engine.py`) with what `clock/survive_virtual.py` plays on the virtual clock, on the
same constants and rules (`clock/survive_costs.py`), so that the two give the same timeline:

- *a death* (`Die`, yielded by the dying replica's program at its step's start, or before a unit of its forward):
  its life ends and its metrics rows are lost with it, its events too when a replacement's take their place (as a
  dead rank's records are); every collective of an older view with it fails for the members that
  arrived, each at `Death.failed_at(arrival)`, and so does every later arrival there (`PeerLoss` is thrown into the
  program, which rolls back: `surviving.py`);
- *the launcher*: the view without it is published `published_after_s` after the death, and a replacement's program
  (a new life) starts then (`rejoin_step` ≥ 0); the view with it is published when a member asks (`AskJoin`);
- *the store*: a view or the donor's state is seen by a replica whose clock is at or after the time it was written;
  `Gate` (`Survival.latest`) answers only once no replica can still act earlier, so nothing is read too early;
- *costs*: a view change (`Adopt`, every view but the first) `VIEW_CHANGE_S`, and the donor's state read by the
  replacement (`FetchState`) as a sync-group transfer of `Costs.state_bytes` across the config's link.

Each view is a collective group of its own (the engine's groups are keyed by the view's number), with its own backend
queue and link, as each view is a new gloo group on real processes.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from edit_lab.clock.costs import Costs
from edit_lab.clock.sim.engine import Engine, Program, ReplicaState, _Collective
from edit_lab.clock.survive_costs import VIEW_CHANGE_S, Death, published_after_s


# ------------------------------------------------------------------------------------ views and requests
@dataclass(frozen=True)
class SimView:
    """`core.view.View` in time only: its number, live replicas, who joined or died with it, when it was published."""

    number: int
    members: tuple[int, ...]
    joined: tuple[int, ...] = ()
    died: tuple[int, ...] = ()
    t: float = 0.0


@dataclass
class Die:
    """The replica dies here (`faults.inject`: kill or hang); its program ends."""

    kind: str


@dataclass
class Gate:
    """`Survival.latest`: the views published at or before the replica's clock, the newest last (answered once
    nothing can still act earlier)."""


@dataclass
class AwaitView:
    """`Survival.wait_newer`: block until a view newer than `than` is published; the clock moves to it; the answer
    is `Gate`'s at the new clock."""

    than: int


@dataclass
class AskJoin:
    """A member asks for the replacements at the sync of `step` (`Survival.enter`'s store key)."""

    view: int
    step: int


@dataclass
class PutState:
    """The donor writes its state for the replacement of view `view` (free: its serialisation is not charged)."""

    view: int
    step: int


@dataclass
class FetchState:
    """The replacement waits for the donor's state, then reads it across the link; the answer is the state's step."""

    view: int


@dataclass
class Adopt:
    """The replica's sync group is now `view`'s (a view change costs `VIEW_CHANGE_S`; the first view, built before
    the common start, and a view of one replica, which has no group, nothing)."""

    view: SimView


@dataclass
class Drain:
    """`abandon_sync`'s wait on a transfer of a failed sync: it ends, or fails on the dead peer; nothing recorded."""

    handle: Any


@dataclass
class Episode:
    """What the launcher did: the views in order, the deaths, and the donors' states (view: (written at, step))."""

    views: list[SimView] = field(default_factory=list)
    deaths: list[dict[str, Any]] = field(default_factory=list)
    states: dict[int, tuple[float, int]] = field(default_factory=dict)
    joining: list[int] = field(default_factory=list)

    def seen(self, t: float) -> tuple[SimView, ...]:
        """The views published at or before `t`, by number (the newest last)."""
        return tuple(sorted((v for v in self.views if v.t <= t), key=lambda v: v.number))

    def stamp(self, number: int) -> float | None:
        return next((v.t for v in self.views if v.number == number), None)

    def summary(self) -> dict[str, Any]:
        """summary.json's `survival` views and deaths (seconds from the start)."""
        return {"views": [{"view": v.number, "members": list(v.members), "joined": list(v.joined),
                           "died": list(v.died), "t": v.t} for v in self.views], "deaths": self.deaths}


# ------------------------------------------------------------------------------------ the engine
class SurvivingEngine(Engine):
    """The engine with deaths, views, the launcher's side and replacements (module docstring)."""

    def __init__(self, costs: Costs, replicas: int, shards: int, link_latency_s: float = 0.0,
                 link_Bps: float = 0.0, keep_events: bool = True, *, timeout_s: float, rejoin: bool,
                 min_replicas: int, state_bytes: int, spawn: Callable[[int, int], Program],
                 due_now: Callable[[list[int], int], list[int]] = lambda missing, step: list(missing)) -> None:
        super().__init__(costs, replicas, shards, link_latency_s, link_Bps, keep_events)
        self.timeout_s, self.rejoin, self.min_replicas, self.spawn = timeout_s, rejoin, min_replicas, spawn
        self.due_now = due_now  # which missing replicas' replacements a sync of a step admits (config.deaths)
        self.state_bytes = state_bytes
        self.episode = Episode([SimView(0, tuple(range(replicas)))])
        self.dead: dict[int, Death] = {}  # replica -> its death (one rank per replica)
        self.lives = {r: 0 for r in range(replicas)}

    # ------------------------------------------------------------------------------ collectives
    def _arrived(self, g: Any, c: _Collective) -> None:
        death = self._breaking(g, c)
        if death is None:
            return super()._arrived(g, c)
        self._fail(g, c, death)

    def _breaking(self, g: Any, c: _Collective) -> Death | None:
        """The death that makes a collective of view `g` fail: a member dead that never issued it, the view older than
        its death's (one it issued before it died completes: `Fabric._failed`)."""
        return next((self.dead[m] for m in c.members if m in self.dead and m not in c.issued
                     and g < self.dead[m].view), None)

    def _fail(self, g: Any, c: _Collective, death: Death) -> None:
        """Every member that arrived learns of the failure at its own `failed_at` (`Fabric._failed`)."""
        if c.end is not None:
            return
        c.error = death.error(c.kind, "sync")
        c.failed_for = {m: death.failed_at(t) for m, t in c.issued.items()}
        self._complete_ready(g)

    # ------------------------------------------------------------------------------ requests
    def _request(self, st: ReplicaState, req: Any) -> bool:
        if isinstance(req, Die):
            self._die(st, req.kind)
            return True
        if isinstance(req, Adopt):
            if req.view.number > 0 and len(req.view.members) > 1:  # a new group (none for one member; the first
                st.t += VIEW_CHANGE_S                                  # view's is built before the common start)
            st.group, st.members = req.view.number, req.view.members
            return False
        if isinstance(req, AskJoin):
            self._ask_join(st, req)
            return False
        if isinstance(req, PutState):
            self.episode.states.setdefault(req.view, (st.t, req.step))
            return False
        if isinstance(req, Drain):
            c = self.collective(req.handle)
            if not c.settled:
                st.parked = req
                return True
            self._drained(st, c)
            return False
        if isinstance(req, (Gate, AwaitView, FetchState)):
            st.parked = req
            return True
        return super()._request(st, req)

    def _drained(self, st: ReplicaState, c: _Collective) -> None:
        if c.failed_for is not None:
            st.t = max(st.t, c.failed_for[st.replica])

    def _die(self, st: ReplicaState, kind: str) -> None:
        """`Episode.death`: the life ends, its records are lost, the launcher publishes and replaces."""
        r, t, ep = st.replica, st.t, self.episode
        st.finished = st.lost = True  # its metrics rows die with it
        if self.rejoin:  # its events file is written as it dies, and replaced by its replacement's
            self.events = [e for e in self.events if e["replica"] != r]
        view = ep.views[-1]
        t_pub = t + published_after_s(kind, self.timeout_s)
        self.dead[r] = Death(r, t, kind, view.number + 1, self.timeout_s)
        ep.deaths.append({"replica": r, "view": view.number, "kind": kind, "died_at": t, "t": t_pub})
        members = tuple(m for m in view.members if m != r)
        if len(members) < self.min_replicas:  # `simulate` refuses such a run before it starts
            raise RuntimeError(f"replica {r} died: {len(members)} live replica(s) left, fewer than "
                               f"survive_min_replicas={self.min_replicas}")
        for g, group in self.collectives.items():
            for c in group:
                if r in c.members and r not in c.issued and not c.settled and g < view.number + 1:
                    self._fail(g, c, self.dead[r])
        ep.views.append(SimView(view.number + 1, members, died=(r,), t=t_pub))
        if self.rejoin:
            self.lives[r] += 1
            ep.joining.append(r)
            self.states.append(ReplicaState(r, self.spawn(r, self.lives[r]), t=t_pub))

    def _ask_join(self, st: ReplicaState, req: AskJoin) -> None:
        """`Episode.on_set`: the view with the replacements, at once (they are ready by then)."""
        ep = self.episode
        view = ep.views[-1]
        due = self.due_now(ep.joining, req.step) if ep.joining and req.view == view.number else []
        if due:
            ep.views.append(SimView(view.number + 1, tuple(sorted(view.members + tuple(due))),
                                    joined=tuple(sorted(due)), t=st.t))
            ep.joining = [r for r in ep.joining if r not in due]

    # ------------------------------------------------------------------------------ the store, in time order
    def _ready_at(self, st: ReplicaState) -> float | None:
        """When a parked request can go on (None: not yet)."""
        req = st.parked
        if isinstance(req, Gate):
            return st.t
        if isinstance(req, AwaitView):
            stamp = self.episode.stamp(req.than + 1)
            return None if stamp is None else max(st.t, stamp)
        if isinstance(req, FetchState):
            got = self.episode.states.get(req.view)
            return None if got is None else max(st.t, got[0])
        if isinstance(req, Drain):
            return st.t if self.collective(req.handle).settled else None
        return None

    def _unpark(self) -> bool:
        """Nothing else can run: the parked request that can go on earliest does (ties: the lowest replica), as the
        virtual clock's scheduler lets the rank of smallest time run; a replacement waiting for a view nobody will
        publish any more ends (the launcher fences it), as `Fabric._cancel_idle_waits` does."""
        parked = [(t, st.replica, i) for i, st in enumerate(self.states)
                  if not st.finished and st.parked is not None and (t := self._ready_at(st)) is not None]
        if not parked:
            idle = [st for st in self.states if not st.finished and st.parked is not None]
            if not idle or any(st.blocked is not None or st.asked is not None for st in self.states
                               if not st.finished):
                return False
            for st in idle:  # it has recorded nothing yet
                st.finished = st.lost = True
            return True
        t, _, i = min(parked)
        st = self.states[i]
        req, st.parked = st.parked, None
        st.t = t
        if isinstance(req, (Gate, AwaitView)):
            st.pending = self.episode.seen(st.t)
        elif isinstance(req, FetchState):
            st.pending = self._fetch(st, req)
        elif isinstance(req, Drain):
            self._drained(st, self.collective(req.handle))
        self._advance(st)
        return True

    def _fetch(self, st: ReplicaState, req: FetchState) -> int:
        """`VirtualSurvival.fetch`: the state's bytes as one sync-group transfer, then across the link (`LinkModel`
        of the config, a fresh one); the answer is the step the donor's state is at."""
        nbytes = self.state_bytes
        done = st.t + self.costs.collective_s(nbytes)
        if self.link_active:
            done = done + self.link_latency_s + (nbytes / self.link_Bps if self.link_Bps > 0 else 0.0)
        st.t = max(st.t, done)
        return self.episode.states[req.view][1]

