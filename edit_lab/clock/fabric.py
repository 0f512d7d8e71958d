"""The virtual clock's fabric: every rank's clock, the lanes, and the in-process collectives (`Fabric`).

What `clock/virtual.py` runs ranks on (its docstring says what the virtual clock is): the cost model that
turns a charge or a collective into seconds (`CostModel`), a rank's clock (`VirtualClock`), the scheduler of
lanes and the collectives of every group with their real reductions and virtual completion times (`Fabric`,
backup workers' rendezvous included: `Fabric.quorum`), and the `Comm` whose collectives run on it
(`virtual_comm_class`). Kept apart from the runner (`train_ranks`, `run_virtual`) so that each reads alone.
"""

from __future__ import annotations

import threading
import traceback
from collections import defaultdict
from dataclasses import dataclass, field
from typing import Any

from edit_lab.config import RunConfig, cores
from edit_lab.core.wire import ring_bytes
from edit_lab.protocol import quorum_verdicts

#: Shard-group collectives that cost time of their own (`Costs` fields); every other shard-group transfer's
#: unhidden part is inside the calibrated per-unit compute, so it is free here.
SHARD_COSTS = {"clock": "clock_s", "sync_norms": "shard_exchange_s", "sync_clip": "shard_exchange_s"}


@dataclass
class CostModel:
    """What each charge and each collective costs on the virtual clock, from `Costs` (one replica's numbers)."""

    costs: Any

    def charge(self, what: str, unit: int | None, part: str | None) -> float:
        c = self.costs
        if what in ("fwd", "bwd"):
            x = (c.fwd_s if what == "fwd" else c.bwd_s)[unit]
            return x / 2 if unit == 0 else x  # the root unit: half in the embedding, half in the head
        if what == "optimizer":
            return c.other_s  # the rest of a step (data, clipping, the inner optimizer, bookkeeping)
        if what == "outer_step":
            return sum(c.outer_step_s) if unit is None else c.outer_step_s[unit]
        if what == "eval":
            return c.eval_s  # a validation as a whole: its forwards ("eval_fwd") cost nothing of their own
        return 0.0

    def collective(self, group: str, kind: str, nbytes: int) -> float:
        if group == "shard":
            name = SHARD_COSTS.get(kind)
            return getattr(self.costs, name) if name else 0.0
        return self.costs.collective_s(nbytes)


# ------------------------------------------------------------------------------------------- clocks
class VirtualClock:
    """A rank's clock on the virtual timeline: seconds that pass only when something costs them."""

    virtual = True

    def __init__(self, model: CostModel) -> None:
        self.model = model
        self.t = 0.0

    def reset(self) -> None:
        self.t = 0.0

    def now(self) -> float:
        return self.t

    def advance(self, dt: float) -> None:
        if dt > 0:
            self.t += dt

    def advance_to(self, t: float) -> None:
        self.t = max(self.t, t)

    def charge(self, what: str, unit: int | None = None, part: str | None = None) -> None:
        self.advance(self.model.charge(what, unit, part))


# ------------------------------------------------------------------------------------------- the fabric
#: The most lanes `virtual_lanes = 0` takes: beyond a few, the ranks' Python code contends for the GIL.
MAX_AUTO_LANES = 4


def lanes_for(cfg: RunConfig) -> int:
    """How many ranks compute at once: `cfg.clock.lanes`, or one per core (at most MAX_AUTO_LANES), never more
    than the ranks."""
    n = cfg.clock.lanes or min(cores(), MAX_AUTO_LANES)
    return max(1, min(n, cfg.world_size))


class PeerLost(RuntimeError):
    """Raised in a rank blocked on a collective when another rank failed: a witness, not the cause."""


@dataclass
class Collective:
    """One collective of one group, as its participants arrive: (input copy, output tensor, arrival time)."""

    op: str
    kind: str
    group: str
    nbytes: int
    members: list[int]
    parts: dict[int, tuple[Any, Any, float]] = field(default_factory=dict)
    done_at: float | None = None
    done_for: dict[int, float] = field(default_factory=dict)  # a member's own completion, where they differ
    verdicts: dict[int, bool] = field(default_factory=dict)  # a quorum's answer per member (`Fabric.quorum`)
    error: str | None = None  # a member died (survival): the collective fails for the others, as gloo's does
    ready: Any = None  # a wait that is no transfer (`Fabric.wait_until`): its completion time once known, else None

    def done_of(self, rank: int) -> float | None:
        return self.done_for.get(rank, self.done_at)


class Fabric:
    """Every rank's clock, the lanes, and the in-process collectives of every group."""

    def __init__(self, cfg: RunConfig, model: CostModel) -> None:
        from edit_lab.core.comm import LinkModel

        self.cfg, self.model = cfg, model
        self.world = cfg.world_size
        self.clocks = [VirtualClock(model) for _ in range(self.world)]
        lock = threading.RLock()
        self.cond = threading.Condition(lock)  # guards the fabric's state
        # one condition per rank on the same lock: a lane handed out wakes the rank it names, not every waiting rank
        self.wakes = [threading.Condition(lock) for _ in range(self.world)]
        self.lanes = lanes_for(cfg)
        self.running: set[int] = set()  # the ranks holding a lane
        self.finished: set[int] = set()
        self.waiting: dict[int, Collective | None] = {r: None for r in range(self.world)}
        self.open: dict[tuple, Collective] = {}
        self.seq: dict[tuple, int] = defaultdict(int)
        self.free_at: dict[tuple, float] = defaultdict(float)
        self.links: dict[tuple, Any] = defaultdict(lambda: LinkModel.of(cfg.link.latency_ms, cfg.link.bandwidth_mb_s))
        self.failure: tuple[int, str] | None = None
        # survival (clock/survive_virtual.py): the dead ranks' deaths, the launcher that reacts, replacements' threads
        self.dead: dict[int, Any] = {}
        self.threads: list[threading.Thread] = []

    # ---------------------------------------------------------------- the lanes (lock held)
    def start(self) -> None:
        """Hand out the first lanes (every rank thread is started and waits for one)."""
        with self.cond:
            self._schedule()

    def _runnable(self, r: int) -> tuple[float, int] | None:
        """(virtual time, rank) when rank r could run now, else None."""
        if r in self.finished or r in self.running:
            return None
        c = self.waiting[r]
        if c is None:
            return self.clocks[r].t, r
        return None if c.done_at is None else (max(self.clocks[r].t, c.done_of(r)), r)

    def _schedule(self) -> None:
        """Fill the free lanes with the runnable ranks of smallest virtual time (ties: the lowest rank)."""
        if self.failure is not None:
            self.running.clear()
            self._wake_all()
            return
        free = self.lanes - len(self.running)
        if free > 0:
            ready = sorted(k for k in map(self._runnable, range(self.world)) if k is not None)
            for key in ready:
                if free == 0:
                    break
                c = self.waiting[key[1]]
                if c is not None and c.op == "gate" and any((self.clocks[o].t, o) < key for o in self.running):
                    continue  # a gate opens once nothing that runs can still act earlier (`Fabric.gate`)
                self.running.add(key[1])
                self.wakes[key[1]].notify()
                free -= 1
        if not self.running and len(self.finished) < self.world and self._cancel_idle_waits():
            return self._schedule()
        if not self.running and len(self.finished) < self.world:
            stuck = {r: (c.group, c.kind, sorted(c.parts)) for r, c in self.waiting.items() if c is not None}
            first = min(stuck) if stuck else -1
            self.failure = (first, "deadlock on the virtual clock: every unfinished rank waits on a collective some "
                                   f"member never issued; (group, kind, arrived) per waiting rank: {stuck}")
            self._wake_all()

    def _cancel_idle_waits(self) -> bool:
        """Nothing runs and some ranks wait on the store for what nobody will write (a replacement the run ended
        before admitting: the launcher fences it): they end. True if any did."""
        idle = [r for r, c in self.waiting.items() if c is not None and c.op == "store" and c.done_at is None]
        if not idle or any(c is not None and c.op != "store" for c in self.waiting.values()):
            return False
        for r in idle:
            self.waiting[r].error = "cancelled"
            self.waiting[r].done_at = self.clocks[r].t
        return True

    def _wake_all(self) -> None:
        for w in self.wakes:
            w.notify_all()

    def _await_turn(self, rank: int) -> None:
        while rank not in self.running and self.failure is None:
            self.wakes[rank].wait()
        if self.failure is not None:
            raise PeerLost(f"rank {rank} stopped: rank {self.failure[0]} failed")

    # ---------------------------------------------------------------- a rank's life
    def rank_main(self, rank: int, body: Any) -> None:
        from edit_lab.train.faults import ReplicaDeath

        death: ReplicaDeath | None = None
        try:
            with self.cond:
                self._await_turn(rank)
            body(rank)
        except PeerLost:
            pass
        except ReplicaDeath as d:  # survival: its thread ends here, and its peers' collectives fail (`on_death`)
            death = d
        except BaseException:
            with self.cond:
                if self.failure is None:
                    self.failure = (rank, traceback.format_exc())
        finally:
            with self.cond:
                self.finished.add(rank)
                self.waiting[rank] = None
                self.running.discard(rank)
                if death is not None:
                    self.on_death(rank, death)
                self._schedule()

    def on_death(self, rank: int, death: Any) -> None:
        """A rank's thread ended in a `ReplicaDeath` (lock held): survival's launcher reacts
        (`survive_virtual.Episode` replaces this); without survival a death is a failure of the run."""
        if self.failure is None:
            self.failure = (rank, f"rank {rank} died ({death}) and the run does not survive deaths")

    def respawn(self, rank: int, body: Any, t: float) -> None:
        """A replacement of `rank` (a new life of its replica) starts at virtual time `t` in a thread of its own."""
        with self.cond:
            self.finished.discard(rank)
            self.waiting[rank] = None
            self.clocks[rank] = VirtualClock(self.model)
            self.clocks[rank].t = t
            for key in [k for k in self.seq if k[0] == rank]:
                del self.seq[key]
            thread = threading.Thread(target=self.rank_main, args=(rank, body), name=f"edit_lab-virtual-rank{rank}-life",
                                      daemon=True)
            self.threads.append(thread)
            thread.start()

    def block(self, rank: int, coll: Collective) -> float:
        """Wait (giving up the lane) until `coll` is complete; its virtual completion time."""
        with self.cond:
            if coll.done_at is None:
                self.waiting[rank] = coll
                self.running.discard(rank)
                self._schedule()
                try:
                    self._await_turn(rank)
                finally:
                    self.waiting[rank] = None
            return coll.done_of(rank)

    def gate(self, rank: int) -> None:
        """Yield until no rank can still act at an earlier virtual time: what `rank` reads next (a view on the
        store) is then what was written up to its clock, whichever thread ran first in real time."""
        with self.cond:
            coll = Collective("gate", "gate", "gate", 0, [rank], done_at=self.clocks[rank].t)
            self.waiting[rank] = coll
            self.running.discard(rank)
            self._schedule()
            try:
                self._await_turn(rank)
            finally:
                self.waiting[rank] = None

    def wait_until(self, rank: int, ready: Any) -> float | None:
        """Block until `ready()` (called under the fabric's lock whenever `notify` is) gives a virtual time; the
        clock moves to it. None: cancelled (nothing else could ever make it ready)."""
        with self.cond:
            coll = Collective("store", "store", "store", 0, [rank], ready=ready)
            coll.done_at = ready()
            self.block(rank, coll)
            if coll.error is not None:
                return None
            self.clocks[rank].advance_to(coll.done_at)
            return coll.done_at

    def notify(self) -> None:
        """The store changed: wake the waits that it made ready (lock held by the caller or taken here)."""
        with self.cond:
            woken = False
            for c in self.waiting.values():
                if c is not None and c.op == "store" and c.done_at is None:
                    c.done_at = c.ready()
                    woken = woken or c.done_at is not None
            if woken:  # only then: a schedule in the middle of a death's handling could see a false deadlock
                self._schedule()

    def fail_collectives_of(self, rank: int) -> None:
        """`rank` died: every open collective it is a member of fails for the members that arrived (the caller, a
        death's handling under the lock, schedules once it is done)."""
        with self.cond:
            failed = [key for key, coll in list(self.open.items()) if rank in coll.members and self._failed(key[0], coll)]
            for key in failed:
                del self.open[key]

    def _failed(self, gkey: tuple, coll: Collective) -> bool:
        """A member of `coll` is dead (for this group) and never arrived: it fails, each arrived member at its own time.

        A collective the dead member had arrived at before it died is not failed by its death: its other members
        arrived at it no later in virtual time (EDiT's prefetch issues unit l+1 with unit l, and a death inside the
        sync strikes after unit l's wait), so it completes, as it does at one lane, where ranks run in virtual-time
        order; at several lanes the dying rank's thread may reach its death before a peer's thread reaches its
        arrival, and failing it then made the timeline depend on the threads' order."""
        death = next((self.dead[m] for m in coll.members
                      if m in self.dead and m not in coll.parts and self.dead[m].breaks(gkey)), None)
        if death is None:
            return False
        coll.error = death.error(coll.kind, coll.group)
        coll.done_for = {m: death.failed_at(p[2]) for m, p in coll.parts.items()}
        coll.done_at = max(coll.done_for.values(), default=death.t)
        coll.parts = {m: (None, None, p[2]) for m, p in coll.parts.items()}
        return True

    def stop(self, why: str) -> None:
        with self.cond:
            if self.failure is None:
                self.failure = (-1, why)
            self._schedule()

    # ---------------------------------------------------------------- collectives
    def arrive(self, rank: int, gkey: tuple, members: list[int], op: str, kind: str, nbytes: int, inp: Any,
               out: Any) -> Collective:
        """`rank` issues its next collective on group `gkey`; the last member to arrive completes it."""
        with self.cond:
            n = self.seq[(rank, gkey)]
            self.seq[(rank, gkey)] = n + 1
            coll = self.open.setdefault((gkey, n), Collective(op, kind, gkey[0], nbytes, members))
            if (coll.op, coll.kind) != (op, kind):
                raise RuntimeError(f"collective {n} of group {gkey}: rank {rank} issued {op} {kind!r}, another member "
                                   f"{coll.op} {coll.kind!r} (the ranks' programs diverged)")
            coll.parts[rank] = (None if inp is None else inp.detach().clone(), out, self.clocks[rank].t)
            if self.dead and self._failed(gkey, coll):
                del self.open[(gkey, n)]
                self._schedule()
            elif len(coll.parts) == len(members):
                del self.open[(gkey, n)]
                self._complete(gkey, coll)
                self._schedule()  # its waiters may take a free lane
            return coll

    def quorum(self, rank: int, replica: int, leader: bool, m: int, ready_at: float) -> tuple[bool, float]:
        """Backup workers' rendezvous on virtual time (core/quorum.py for real processes): (is `replica` among the
        first m ready, the virtual time its verdict is known). Every rank of the world arrives at each step; a
        replica's readiness is its leader's (shard 0) `ready_at` (after its pause), ties by replica. A member's
        verdict comes when it is ready; a late replica's when the m-th was ready, or at once if that was before it
        arrived (its leader's arrival): it stops spinning then. Not a transfer: nobody waits for anybody in it."""
        with self.cond:
            gkey = ("quorum",)
            n = self.seq[(rank, gkey)]
            self.seq[(rank, gkey)] = n + 1
            members = list(range(self.world))
            coll = self.open.setdefault((gkey, n), Collective("quorum", "quorum", "quorum", 0, members))
            coll.parts[rank] = ((replica, leader, ready_at), None, self.clocks[rank].t)
            if len(coll.parts) == len(members):
                del self.open[(gkey, n)]
                # a replica's times are its leader's: (arrived, ready)
                verdict = quorum_verdicts({p[0][0]: (p[2], p[0][2]) for p in coll.parts.values() if p[0][1]}, m)
                coll.verdicts = {k: verdict[p[0][0]][0] for k, p in coll.parts.items()}
                coll.done_for = {k: max(p[2], verdict[p[0][0]][1]) for k, p in coll.parts.items()}
                coll.done_at = max(coll.done_for.values())
                self._schedule()
        done = self.block(rank, coll)
        return coll.verdicts[rank], done

    def _complete(self, gkey: tuple, coll: Collective) -> None:
        import torch

        start = max(max(p[2] for p in coll.parts.values()), self.free_at[gkey])
        if coll.op == "barrier":  # no data and no cost: everyone leaves when the last one arrived
            coll.done_at = self.free_at[gkey] = start
            return
        with torch.no_grad():
            ins = [coll.parts[m][0] for m in coll.members]
            if coll.op.startswith("quantised:"):  # every owner's step of the real exchange, in member order
                from edit_lab.core import wire

                fmt = coll.op.split(":", 1)[1]
                reduced = torch.stack([wire.reduce_chunk(torch.stack([p[i] for p in ins]), fmt)
                                       for i in range(len(ins))])
                for m in coll.members:
                    coll.parts[m][1].copy_(reduced)
            elif coll.op == "all_gather":
                full = torch.cat(ins)
                for m in coll.members:
                    coll.parts[m][1].copy_(full)
            elif coll.op == "all_reduce":  # a sum in gloo's order (ring_order.py): the same bits as a real run
                from edit_lab.clock.ring_order import ring_sum

                acc = ring_sum(ins)
                for m in coll.members:
                    coll.parts[m][1].copy_(acc)
            else:  # a sum, in rank order
                acc = ins[0].clone()
                for x in ins[1:]:
                    acc.add_(x)
                if coll.op == "reduce_scatter":
                    k = acc.numel() // len(coll.members)
                    for i, m in enumerate(coll.members):
                        coll.parts[m][1].copy_(acc[i * k:(i + 1) * k])
                else:
                    raise NotImplementedError(f"the virtual clock has no {coll.op}")
        done = start + self.model.collective(coll.group, coll.kind, coll.nbytes)
        self.free_at[gkey] = done
        if coll.group == "sync":
            link = self.links[gkey]
            if link.active:
                done = link.deadline(done, coll.nbytes)
        coll.done_at = done
        coll.parts = {m: (None, None, p[2]) for m, p in coll.parts.items()}  # let go of the tensors


class VirtualWork:
    """What `Comm` holds of an issued collective: `wait()` returns its virtual completion time."""

    def __init__(self, fabric: Fabric, rank: int, coll: Collective) -> None:
        self.fabric, self.rank, self.coll = fabric, rank, coll

    def wait(self) -> float:
        done = self.fabric.block(self.rank, self.coll)
        if self.coll.error is not None:  # a member died: fail as gloo's wait() does, once its time has passed
            self.fabric.clocks[self.rank].advance_to(done)
            raise RuntimeError(self.coll.error)
        return done

    def get_future(self) -> Any:
        raise RuntimeError("no future: completion is known at wait()")


class RankBackend:
    """`torch.distributed`'s few functions that `Comm` calls, on the fabric, for one rank."""

    def __init__(self, fabric: Fabric, mesh: Any, comm: Any) -> None:
        self.fabric, self.mesh, self.comm = fabric, mesh, comm

    def _group(self, name: str) -> tuple[tuple, list[int]]:
        m = self.mesh
        if name == "shard":
            return ("shard", m.replica), m.shard_group_ranks()
        if name == "sync" and m.view is not None:  # survival: the view's group, a new one per view
            members = [r * m.shards + m.shard for r in m.view.members]
            return ("sync", members[0], "view", m.view.number), members
        if name == "sync":  # keyed by its smallest rank: the shard index for the mesh's own groups
            members = m.sync_group_ranks()
            return ("sync", members[0]), members
        return ("world",), list(range(m.world_size))

    def _arrive(self, op: str, group: str, inp: Any, out: Any, nbytes: int) -> VirtualWork:
        gkey, members = self._group(group)
        kind = self.comm._kind  # set by VirtualComm right before the call
        if self.comm._declared is not None:  # time-only mode: the real model's bytes, not the stand-in's
            nbytes = self.comm._declared
        # the counting rule (`wire.ring_bytes`): what one rank sends on a ring, as `Comm` records it
        nbytes = ring_bytes("all_reduce" if op.startswith("quantised") else op, nbytes, len(members))
        return VirtualWork(self.fabric, self.mesh.rank,
                           self.fabric.arrive(self.mesh.rank, gkey, members, op, kind, nbytes, inp, out))

    def all_gather_into_tensor(self, out: Any, inp: Any, group: str, async_op: bool = True) -> VirtualWork:
        return self._arrive("all_gather", group, inp, out, out.numel() * out.element_size())

    def reduce_scatter_tensor(self, out: Any, inp: Any, op: Any = None, group: str = "world",
                              async_op: bool = True) -> VirtualWork:
        return self._arrive("reduce_scatter", group, inp, out, inp.numel() * inp.element_size())

    def all_reduce(self, t: Any, op: Any = None, group: str = "world", async_op: bool = True) -> VirtualWork:
        return self._arrive("all_reduce", group, t, t, t.numel() * t.element_size())

    def quantised(self, payload: Any, reduced: Any, fmt: str, group: str) -> VirtualWork:
        """The integer formats' reduce-scatter + all-gather of encoded chunks, one collective on the fabric."""
        return self._arrive("quantised:" + fmt, group, payload, reduced, payload.numel())

    def barrier(self) -> None:
        """Every rank of the world arrives; each leaves at the last arrival's virtual time."""
        f, rank = self.fabric, self.mesh.rank
        coll = f.arrive(rank, ("barrier",), list(range(self.mesh.world_size)), "barrier", "barrier", 0, None, None)
        f.clocks[rank].advance_to(f.block(rank, coll))

    def broadcast(self, t: Any, src: int, group: str = "world") -> None:
        raise NotImplementedError("broadcast is not used on the virtual clock (there is no start to agree on)")


def virtual_comm_class() -> type:
    """`VirtualComm`, defined on first use so that importing this module does not import torch."""
    global _VirtualComm
    if _VirtualComm is None:
        from edit_lab.core.comm import Comm, LinkModel

        class VirtualComm(Comm):
            """A `Comm` whose collectives run on the fabric; the link model is applied there, per group."""

            def __init__(self, mesh: Any, log: Any, fabric: Fabric, declared: Any = None, wire: str = "none") -> None:
                """`declared`: time-only mode's `time_only.DeclaredSizes` (None: the tensors' own bytes)."""
                super().__init__(mesh, log, LinkModel(), device="cpu", wire=wire)
                self.backend = RankBackend(fabric, mesh, self)
                self._kind = ""
                self.declared = declared
                self._declared: int | None = None  # the bytes of the collective being issued (time-only mode)

            def _declare(self, kind: str, group: str, unit: int | None, t: Any, call: Any) -> Any:
                """Run `call` with the collective's declared bytes set (time-only mode; the outermost call only:
                a compressed all-reduce issues its own all-gather or all-reduce of the encoded tensor)."""
                if self.declared is None or self._declared is not None:
                    return call()
                self._declared = self.declared.nbytes(kind, group, unit, t, self.wire)
                try:
                    return call()
                finally:
                    self._declared = None

            def _issue(self, work: Any, kind: str, group: str, unit: int | None, nbytes: int, *args: Any,
                       **kw: Any) -> Any:
                if self._declared is not None:
                    nbytes = self._declared
                return super()._issue(work, kind, group, unit, nbytes, *args, **kw)

            def _quantised_work(self, payload: Any, fmt: str, group: str) -> Any:
                """The fabric computes the owners' reductions at once (`wire.quantised_sum`'s steps), charged as
                one all-reduce of the encoded tensor (the rule `Comm` records)."""
                import torch

                reduced = torch.empty_like(payload)
                return self.backend.quantised(payload, reduced, fmt, group), reduced

            def group(self, name: str) -> Any:
                if name not in ("shard", "sync", "world"):
                    raise ValueError(f"unknown group {name!r}")
                return name

            def all_gather(self, out: Any, inp: Any, group: str, kind: str = "all_gather", **kw: Any) -> Any:
                self._kind = kind
                return self._declare(kind, group, kw.get("unit"), out,
                                     lambda: super(VirtualComm, self).all_gather(out, inp, group, kind, **kw))

            def reduce_scatter(self, out: Any, inp: Any, group: str, kind: str = "reduce_scatter", **kw: Any) -> Any:
                self._kind = kind
                return self._declare(kind, group, kw.get("unit"), inp,
                                     lambda: super(VirtualComm, self).reduce_scatter(out, inp, group, kind, **kw))

            def all_reduce(self, t: Any, group: str, kind: str = "all_reduce", **kw: Any) -> Any:
                self._kind = kind
                return self._declare(kind, group, kw.get("unit"), t,
                                     lambda: super(VirtualComm, self).all_reduce(t, group, kind, **kw))

            def compressed_all_reduce(self, t: Any, group: str, kind: str, **kw: Any) -> Any:
                self._kind = kind
                return self._declare(kind, group, kw.get("unit"), t,
                                     lambda: super(VirtualComm, self).compressed_all_reduce(t, group, kind, **kw))

            def quorum(self, step: int, m: int, pause_s: float, timeout_s: float) -> Any:
                """Backup workers' rendezvous on the fabric (`Fabric.quorum`): the clock moves to the verdict."""
                from edit_lab.core.quorum import Verdict

                fabric, mesh = self.backend.fabric, self.mesh
                t0 = self.clock.now()
                member, done = fabric.quorum(mesh.rank, mesh.replica, mesh.shard == 0, m, t0 + pause_s)
                self.clock.advance_to(done)
                return Verdict(member, self.clock.now() - t0)

            def _finish(self, h: Any) -> float:
                done = h.work.wait()
                self.clock.advance_to(done)
                h.done_at = done
                if h.after is not None:  # a compressed pseudo-gradient is decoded once it landed (wire.py)
                    h.after()
                return done

        _VirtualComm = VirtualComm
    return _VirtualComm


_VirtualComm: type | None = None
