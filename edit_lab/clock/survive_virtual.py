"""Deaths and joins on the virtual clock (`survive=True`, `clock='virtual'`; docs/edit-method.md §16).

Why here and not in a model of its own: the virtual clock runs the real `Trainer` and methods in threads, so a
death is made to look to the survivors exactly as it looks on real processes, and the same `core.survival.Survival`
code reacts to it (detection, rollback, view change, retry or discard, a replacement's join from a live peer):

- *a death*: `fault_replica` at `fault_replica_step` raises `faults.ReplicaDeath` in the replica's threads instead of
  a SIGKILL (`kill`) or a sleep (`hang`); the fabric ends the thread (`Fabric.rank_main`) and calls `Episode.death`.
- *detection*: every collective of an old view with the dead rank fails for the members that arrived, with gloo's
  words ("Connection closed by peer", or a timeout), at `max(arrival, death) + DETECT_KILL_S` (kill) or
  `arrival + timeout_s` (hang): `Death.failed_at`.
- *the launcher's side* (`Episode`, what `runtime/survive_launch.py` does with processes): view N+1 without the
  replica is published on an in-process store, stamped `CONFIRM_KILL_S` after the death (the launcher sees the exit)
  or `timeout_s` + the settle after it (a hang); a replacement starts at that time and waits; the view with it is
  published at the virtual time a member asks for it (a sync at or after `rejoin_step`).
- *the store* is read as of the reader's clock (`RankStore`): a value written at virtual time t is seen by a rank
  whose clock is at t or later, and a rank that looks at the views first waits until nothing can still act at an
  earlier virtual time (`Fabric.gate`), so what it sees is the same at any number of lanes and under any load.
- *costs*: the view change (a new group) `VIEW_CHANGE_S`, and the donor's state charged on the link as a transfer
  of its bytes (`Costs.collective_s` and the config's `LinkModel`) when the replacement reads it.
The constants and the failure rule (`Death`) are `survive_costs.py`'s, which the preview simulator charges too.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Callable

from edit_lab.clock import survive_costs as sc
from edit_lab.clock.survive_costs import CONFIRM_KILL_S, DETECT_KILL_S, VIEW_CHANGE_S, Death  # noqa: F401 (one place)
from edit_lab.config import RunConfig, deaths
from edit_lab.core import view as views
from edit_lab.core.survival import Survival
from edit_lab.core.view import View



def settle_s(cfg: RunConfig) -> float:
    """The launcher's wait before it calls a silent replica hung (`survive_launch.watch`)."""
    return sc.settle_s(cfg.runtime.timeout_s)


@dataclass
class VirtualStore:
    """The launcher's store in process: every value stamped with the virtual time it was written at."""

    fabric: Any
    entries: dict[str, list[tuple[float, Any]]] = field(default_factory=dict)

    def put(self, key: str, value: Any, t: float) -> None:
        with self.fabric.cond:
            self.entries.setdefault(key, []).append((t, value))
            self.fabric.notify()

    def at(self, key: str, t: float) -> Any:
        """The newest value of `key` written at or before `t` (None: none yet)."""
        seen = [(s, i, v) for i, (s, v) in enumerate(self.entries.get(key, ())) if s <= t]
        return max(seen, key=lambda x: (x[0], x[1]))[2] if seen else None

    def stamp(self, key: str) -> float | None:
        """When `key` was first written (None: not yet)."""
        got = self.entries.get(key)
        return min(s for s, _ in got) if got else None


class RankStore:
    """`core.view.Store` for one rank: it reads the store as of its own clock, and its writes are stamped by it."""

    def __init__(self, store: VirtualStore, rank: int, episode: "Episode") -> None:
        self.store, self.rank, self.episode = store, rank, episode

    def now(self) -> float:
        return self.store.fabric.clocks[self.rank].t

    def set(self, key: str, value: str | bytes) -> None:
        if key.startswith("alive/"):  # heartbeats: the virtual launcher knows a hang without them
            return
        with self.store.fabric.cond:
            self.store.put(key, value, self.now())
            self.episode.on_set(key, self.now())

    def get(self, key: str) -> bytes:
        v = self.store.at(key, self.now())
        if v is None:
            raise KeyError(key)
        return v if isinstance(v, bytes) else str(v).encode()

    def check(self, keys: list[str]) -> bool:
        return all(self.store.at(k, self.now()) is not None for k in keys)

    def add(self, key: str, amount: int) -> int:
        raise NotImplementedError("the virtual clock has no counters on its store")


class VirtualSurvival(Survival):
    """`Survival` on the fabric: the view's group is a fabric group, the store is read on the virtual timeline."""

    def __init__(self, cfg: RunConfig, store: RankStore, mesh: Any, log: Any, life: int, fabric: Any,
                 costs: Any) -> None:
        super().__init__(cfg, store, mesh, log, life)
        self.fabric, self.costs = fabric, costs

    def backend(self, comm: Any) -> Any:
        return comm.backend  # the fabric's: its sync group follows `mesh.view` (`RankBackend._group`)

    def make_group(self, view: View) -> Any:
        if view.number > 0:  # the first view's groups are built before the common start, as on real processes
            self.log.clock.advance(VIEW_CHANGE_S)
        return ("view", view.number)

    def agree(self, n: int) -> int:
        return n  # one rank per replica (checks.py refuses shards > 1 here)

    def latest(self) -> int:
        self.fabric.gate(self.mesh.rank)
        return views.latest_number(self.store)

    def wait_newer(self, than: int, timeout_s: float) -> View:
        data = self.store.store

        def ready() -> float | None:
            return data.stamp(views.view_key(than + 1))

        if self.fabric.wait_until(self.mesh.rank, ready) is None:
            from edit_lab.clock.fabric import PeerLost

            raise PeerLost(f"rank {self.mesh.rank}: fenced, the run ended before it joined")
        return views.read(self.store, views.latest_number(self.store))

    def fetch(self, key: str) -> bytes:
        """The donor's state once written, charged as a transfer of its bytes on the link."""
        from edit_lab.core.comm import LinkModel

        self.fabric.wait_until(self.mesh.rank, lambda: self.store.store.stamp(key))
        raw = self.store.get(key)
        clock = self.log.clock
        done = clock.now() + self.costs.collective_s(len(raw))
        link = LinkModel.of(self.cfg.link.latency_ms, self.cfg.link.bandwidth_mb_s)
        clock.advance_to(link.deadline(done, len(raw)) if link.active else done)
        return raw


class Episode:
    """The launcher's side on the virtual clock: deaths confirmed, views published, replacements started.

    Its rows are `survival.jsonl`'s (seconds of virtual time); `spawn(rank, life, t)` starts a replacement's
    thread at virtual time t."""

    def __init__(self, cfg: RunConfig, fabric: Any, spawn: Callable[[int, int, float], None]) -> None:
        self.cfg, self.fabric, self.spawn = cfg, fabric, spawn
        self.store = VirtualStore(fabric)
        self.rows: list[dict[str, Any]] = []
        self.life = {r: 0 for r in range(cfg.replicas)}
        self.joining: list[int] = []
        self.lives: dict[int, int] = {}  # rank -> the life whose record the run keeps
        self.view = self.publish(View(0, tuple(range(cfg.replicas)), reason="start"), 0.0)
        fabric.on_death = self.death

    def rank_store(self, rank: int) -> RankStore:
        return RankStore(self.store, rank, self)

    def begin(self, trainer: Any, life: int, costs: Any) -> None:
        """A rank's start as `runtime/survive_worker.run_surviving_rank`'s: view 0, or a replacement's join."""
        rank = trainer.mesh.rank
        survival = VirtualSurvival(self.cfg, self.rank_store(rank), trainer.mesh, trainer.log, life, self.fabric, costs)
        trainer.attach(survival, life)
        if life == 0:
            survival.adopt(views.read(survival.store, 0), step=0)
            return
        view, state = survival.join()
        trainer.take_state(state)
        survival.adopt(view, state["step"], after="join")
        trainer.log.step = state["step"]
        trainer.method.join_first_sync(state["step"])

    def publish(self, view: View, t: float, **extra: Any) -> View:
        view = View(view.number, view.members, view.joined, view.died, view.reason, t)
        self.store.put(views.view_key(view.number), view.to_json(), t)
        self.store.put(views.LATEST, str(view.number), t)
        self.note("view", t, **views.describe(view), **extra)
        return view

    def note(self, kind: str, t: float, **fields: Any) -> None:
        self.rows.append({"kind": kind, "t": t, **fields})

    def death(self, rank: int, death: Any) -> None:
        """A rank's thread ended in a death (the fabric's lock held): confirm, fence, publish, replace."""
        cfg, fabric = self.cfg, self.fabric
        replica, t = rank // cfg.shards, fabric.clocks[rank].t
        hang = death.kind == "hang"
        t_pub = t + sc.published_after_s(death.kind, cfg.runtime.timeout_s)
        fabric.dead[rank] = Death(rank, t, death.kind, self.view.number + 1, cfg.runtime.timeout_s)
        members = tuple(m for m in self.view.members if m != replica)
        why = (f"hung: no step for timeout_s + {settle_s(cfg):g} s and no report, after a peer's sync timed out"
               if hang else "exited")
        self.note("death", t_pub, replica=replica, view=self.view.number, exits=[] if hang else [[rank, -9]],
                  since_last_step_ms=1e3 * (t_pub - t), cause=why if hang else f"rank {rank}: exit -9")
        self.note("fenced", t_pub, replica=replica)
        if len(members) < cfg.runtime.survive_min_replicas:
            fabric.failure = (rank, f"replica {replica} died ({why}): {len(members)} live replica(s) left, fewer than "
                                    f"survive_min_replicas={cfg.runtime.survive_min_replicas}; the run ends")
            return
        fabric.fail_collectives_of(rank)  # first: a schedule with its peers still waiting on it would be a deadlock
        self.view = self.publish(View(self.view.number + 1, members, died=(replica,), reason=why), t_pub)
        if cfg.runtime.rejoin_step >= 0:
            self.life[replica] += 1
            fabric.dead[rank].replaced = True
            self.joining.append(replica)
            self.note("replacement_started", t_pub, replica=replica, life=self.life[replica])
            self.spawn(rank, self.life[replica], t_pub)

    def on_set(self, key: str, t: float) -> None:
        """A member asks for the replacements (`Survival.enter`): the view with them, at once (they are ready)."""
        if self.joining and key == views.join_request_key(self.view.number):
            asked = int(self.store.at(key, t))
            due = deaths.due_now(self.cfg, self.joining, asked)
            if not due:
                return
            view = View(self.view.number + 1, tuple(sorted(self.view.members + tuple(due))),
                        joined=tuple(sorted(due)), reason="replacement")
            self.joining = [r for r in self.joining if r not in due]
            self.view = self.publish(view, t, asked_at_step=asked)
