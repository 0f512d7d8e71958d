"""One rank's side of surviving a replica's death (edit-method.md §16): views, detection, rollback, retry, join.

With `RunConfig.runtime.survive` each replica is its own torch.distributed world of S ranks (its shard group, which never
changes) and the sync group is the current *view*'s (`core.view`): a gloo group of the live replicas' ranks of
this shard index, built on the launcher's store under `view{N}/shard{s}`. Every sync attempt goes through
`Survival.attempt`:

1. *enter* (`before_sync`, first in DiLoCo's `sync_between_steps`, EDiT's `start_sync`, sync's `after_backward`):
   the replica's ranks agree on the newest published view (a max over the shard group)
   and move to it; at a sync at or after `rejoin_step` with a replica missing they ask for the replacement and
   wait for the view that holds it, the lowest survivor (the donor) handing its state over the store. Then a
   snapshot: the method's state (anchor, outer momentum, the penalty's detectors, counters) and θ.
2. *detect*: a collective with a dead replica fails (gloo: "Connection closed by peer" within ms; a hung one
   after `timeout_s`). Any other exception is a bug and ends the run as before.
3. *roll back*: the prefetched transfers are drained, the snapshot restored, the records of the failed attempt
   dropped; the rank reports the failure on the store (the launcher's witness of a hang) and waits for view N+1,
   which the launcher publishes once it has confirmed the death and fenced the replica's processes.
4. *retry* (the default): the same sync again, in the new view, with the survivors' τ local steps kept (EDiT and
   sync: the step again up to its optimizer, `Trainer.until_optimizer`); or
   *discard* (`survive_on_failure`): θ ← a, the round dropped, as torchft's DiLoCo does.

A replacement (`join`) waits for a view that names it, loads the donor's state (θ = a, so its Δ is 0 and its
local steps k = 0: EDiT weighs it 0, DiLoCo leaves it out of the mean; sync: the donor's θ) and from then on
trains as any other.
"""

from __future__ import annotations

import copy
import datetime
import gc
import io
import re
import sys
import time
from dataclasses import dataclass
from typing import Any, Callable, TypeVar

import torch
import torch.distributed as dist

from edit_lab.config import deaths
from edit_lab.core import view as views
from edit_lab.core.mesh import Mesh
from edit_lab.core.view import View
from edit_lab.records.events import EventLog

T = TypeVar("T")

#: The last line of a collective's error when a peer is gone or late (the launcher's `_PEER_LOSS`, plus a new
#: group's rendezvous that a dead member never reached).
PEER_LOSS = re.compile(r"timeout|timed out|closed by peer|reset by peer|pair closure|Connection refused|Broken pipe"
                       r"|DistBackendError|DistNetworkError|Socket|connect", re.I)


def is_peer_loss(exc: BaseException) -> bool:
    """Did this exception come from a peer that died or hangs (rather than from a bug of this rank)?"""
    if isinstance(exc, (dist.DistBackendError, dist.DistNetworkError)):
        return True
    lines = str(exc).strip().splitlines()
    return isinstance(exc, RuntimeError) and bool(lines) and bool(PEER_LOSS.search(lines[-1]))


class RoundDiscarded(Exception):
    """`survive_on_failure='discard'`: a sync met a view that a death made; the round is dropped, as the survivors
    whose sync failed drop it (every survivor of the round discards alike)."""


class ViewBackend:
    """torch.distributed for the shard group; the view's sync group through the gloo group's own calls.

    A view's group is a bare `ProcessGroupGloo` built on a store prefix (no global registration, so no world-wide
    `new_group`), which torch.distributed's functions do not all accept; `Comm.backend` is this object."""

    def __init__(self, survival: "Survival") -> None:
        self.survival = survival

    def __getattr__(self, name: str) -> Any:
        return getattr(dist, name)

    def _mine(self, group: Any) -> bool:
        return group is not None and group is self.survival.pg

    def all_reduce(self, t: torch.Tensor, op: Any = dist.ReduceOp.SUM, group: Any = None, async_op: bool = False):
        if not self._mine(group):
            return dist.all_reduce(t, op=op, group=group, async_op=async_op)
        opts = dist.AllreduceOptions()
        opts.reduceOp = op
        return self._done(group.allreduce([t], opts), async_op)

    def all_gather_into_tensor(self, out: torch.Tensor, inp: torch.Tensor, group: Any = None, async_op: bool = False):
        if not self._mine(group):
            return dist.all_gather_into_tensor(out, inp, group=group, async_op=async_op)
        return self._done(group._allgather_base(out, inp), async_op)

    def reduce_scatter_tensor(self, out: torch.Tensor, inp: torch.Tensor, op: Any = dist.ReduceOp.SUM,
                              group: Any = None, async_op: bool = False):
        if not self._mine(group):
            return dist.reduce_scatter_tensor(out, inp, op=op, group=group, async_op=async_op)
        opts = dist.ReduceScatterOptions()
        opts.reduceOp = op
        return self._done(group._reduce_scatter_base(out, inp, opts), async_op)

    @staticmethod
    def _done(work: Any, async_op: bool) -> Any:
        if async_op:
            return work
        work.wait()
        return None


@dataclass
class Snapshot:
    """What a sync may change before it fails: the method's state and θ, and how many records were written."""

    method_state: dict[str, Any]
    theta: list[torch.Tensor]
    n_records: int
    n_events: int

    @classmethod
    def take(cls, method: Any, shards: list[torch.Tensor], log: EventLog) -> "Snapshot":
        return cls(copy.deepcopy(method.state_dict()), [p.detach().clone() for p in shards], len(log.records),
                   len(log.events))

    @torch.no_grad()
    def restore(self, method: Any, shards: list[torch.Tensor], log: EventLog) -> None:
        method.load_state_dict(self.method_state)
        for p, v in zip(shards, self.theta):
            p.copy_(v)
        del log.records[self.n_records:]  # the failed attempt's penalty rows: the retry writes its own
        # the failed attempt's checksums are not a sync's; its collectives' spans stay (they are what happened)
        log.events[self.n_events:] = [e for e in log.events[self.n_events:] if e["kind"] != "checksum"]


class Survival:
    """This rank's view of the run, and the steps of an episode (module docstring)."""

    def __init__(self, cfg: Any, store: Any, mesh: Mesh, log: EventLog, life: int) -> None:
        self.cfg, self.store, self.mesh, self.log, self.life = cfg, store, mesh, log, life
        from edit_lab.rules import Rules

        self.donor = Rules.from_config(cfg).donor  # who hands a replacement its state: the library's, or a reader's
        self.timeout = datetime.timedelta(seconds=cfg.runtime.timeout_s)
        self.wait_s = max(3 * cfg.runtime.timeout_s, 60.0)  # the launcher confirms, fences and publishes within this
        self.pg: Any = None
        self.view: View | None = None
        self.fresh: tuple[int, ...] = ()  # replicas that joined this view and have not synced yet (weight 0)
        self.unjudged = False  # the view changed since the last sync: the penalty judges nobody at the next one
        self.method: Any = None
        self.state_for_joiner: Callable[[int], dict[str, Any]] | None = None  # the trainer's (set by it)
        self.snapshot: Snapshot | None = None
        self.sync_t0 = 0.0  # when the current sync attempt's collectives started (clock seconds)
        self.entering: View | None = None  # the view this rank is moving to (`change_to`), until it holds it

    # ------------------------------------------------------------ what a clock may replace (clock/survive_virtual.py)
    def backend(self, comm: Any) -> Any:
        """The `Comm.backend` that talks on this rank's view: gloo groups on the store (`ViewBackend`)."""
        return ViewBackend(self)

    def make_group(self, view: View) -> Any:
        """View `view`'s sync group of this rank's shard index: a gloo group under `view{N}/shard{s}`, created once
        every member has arrived (`gather`), so that gloo's rendezvous, bounded by `timeout_s`, never waits for a
        member that is merely slow to get there (a replacement starting on a busy machine)."""
        self.gather(view)
        prefix = dist.PrefixStore(views.group_prefix(view.number, self.mesh.shard), self.store)
        return dist.ProcessGroupGloo(prefix, view.index(self.mesh.replica), len(view.members), self.timeout)

    def gather(self, view: View) -> None:
        """Wait until every member of `view` has reached its group's creation, for at most `wait_s`.

        A RuntimeError that says "timed out" names the members that never came: a peer loss by `is_peer_loss`'s
        words, so the sync is retried in the next view, which the launcher publishes once it has fenced them (the
        builtin TimeoutError, an OSError, was no peer loss: the rank raised and the run ended as a bug); a newer
        view published meanwhile supersedes this one at once (a member died on the way)."""
        self.store.set(views.arrived_key(view.number, self.mesh.shard, self.mesh.replica), "1")
        keys = {r: views.arrived_key(view.number, self.mesh.shard, r) for r in view.members}
        deadline = time.monotonic() + self.wait_s
        while not self.store.check(list(keys.values())):
            if self.latest() > view.number:
                raise RuntimeError(f"view {view.number} timed out: superseded by view {self.latest()} before every "
                                   "member reached its group")
            if time.monotonic() > deadline:
                missing = [r for r, k in keys.items() if not self.store.check([k])]
                raise RuntimeError(f"view {view.number} timed out: replica(s) {missing} did not reach its group "
                                   f"within {self.wait_s:g} s")
            time.sleep(0.002)

    def latest(self) -> int:
        """The newest published view's number (-1: none)."""
        return views.latest_number(self.store)

    def wait_newer(self, than: int, timeout_s: float) -> View:
        """Block until a view newer than `than` is published (the launcher's confirmation of a death, a join)."""
        return views.wait_newer(self.store, than, timeout_s)

    def fetch(self, key: str) -> bytes:
        """A value a peer wrote on the store (the donor's state)."""
        return self.store.get(key)

    def heartbeat(self, step: int) -> None:
        """At each step start: the launcher tells a hung replica from a slow one by it (`survive_launch.watch`)."""
        self.store.set(views.alive_key(self.mesh.rank), f"{time.time()}")

    # ------------------------------------------------------------ views
    def adopt(self, view: View, step: int, t0: float | None = None, after: str = "start") -> None:
        """Make `view` this rank's: a new gloo group of its members' ranks of this shard index. `after`: what led
        here (a failed sync, a sync's start, a replacement's arrival), for the records."""
        t0 = self.log.clock.now() if t0 is None else t0
        n = len(view.members)
        self.mesh.sync_group = self.pg = None  # the old view's group: dropped, its connections close (`recover`)
        if n > 1:
            self.pg = self.make_group(view)
        self.mesh.sync_group, self.mesh.view, self.view = self.pg, view, view
        if view.joined or view.died:
            self.unjudged = True
        self.fresh = view.joined
        if self.method is not None and hasattr(self.method, "on_view"):
            self.method.on_view(view)
        donor = {"donor": self.donor(view.members, view.joined)} if view.joined else {}  # who handed the state
        self.log.record("view", step=step, **views.describe(view), after=after, t0=t0, t1=self.log.clock.now(),
                        ms=1e3 * (self.log.clock.now() - t0), **donor)

    def agree(self, n: int) -> int:
        """The newest view any rank of this replica has seen: every rank of a replica moves together."""
        if self.mesh.shards == 1:
            return n
        t = torch.tensor([n], dtype=torch.int64)
        dist.all_reduce(t, op=dist.ReduceOp.MAX, group=self.mesh.shard_group)
        return int(t)

    def joiners_due(self, step: int, view: View | None = None) -> bool:
        """A replacement joins here: a replica is missing that the launcher still replaces, and this sync is at or
        after its replacement's due step (`config.deaths.due_step`: `rejoin_step` for the first death)."""
        view = view or self.view
        assert view is not None
        missing = [r for r in range(self.cfg.replicas) if r not in view.members]
        return any(not self.store.check([views.abandoned_key(r)]) for r in deaths.due_now(self.cfg, missing, step))

    def enter(self, step: int) -> bool:
        """Stage 1 of a sync attempt: move to the newest view (asking for a replacement when one is due); True when
        the newer view was made by a death."""
        assert self.view is not None
        t0 = self.log.clock.now()
        n = self.latest()
        newest = self.view if n == self.view.number else views.read(self.store, n)
        if self.joiners_due(step, newest):  # asked in the newest view: a death seen at this sync's start delays no join
            self.store.set(views.join_request_key(n), str(step))
            n = self.wait_newer(n, self.wait_s).number
        n = self.agree(n)
        if n <= self.view.number:
            return False
        before = self.view.number
        self.change_to(views.read(self.store, n), step, t0, "sync_start")
        return any(views.read(self.store, k).died for k in range(before + 1, n + 1))

    def change_to(self, view: View, step: int, t0: float, after: str) -> None:
        """Adopt `view`; as the donor of a replacement, hand it this rank's state first (over the store)."""
        self.entering = view  # a failure before the adoption completes is this view's (`recover`)
        if view.joined and self.donor(view.members, view.joined) == self.mesh.replica:
            assert self.state_for_joiner is not None
            t1 = self.log.clock.now()
            buf = io.BytesIO()
            torch.save(self.state_for_joiner(step), buf)
            self.store.set(views.state_key(view.number, self.mesh.shard), buf.getvalue())
            self.log.record("transfer", step=step, view=view.number, to=list(view.joined), bytes=buf.tell(),
                            side="donor", t0=t1, ms=1e3 * (self.log.clock.now() - t1))
        self.adopt(view, step, t0, after)
        self.entering = None

    # ------------------------------------------------------------ one sync attempt after another
    def before_sync(self, step: int) -> None:
        """Called first by every sync (DiLoCo's `sync_between_steps`, EDiT's `start_sync`): enter, then snapshot."""
        died = self.enter(step)
        assert self.method is not None
        if died and self.cfg.runtime.survive_on_failure == "discard":
            raise RoundDiscarded(f"view {self.view.number if self.view else None} at step {step}")
        self.snapshot = Snapshot.take(self.method, self.method.engine.shards, self.log)
        self.sync_t0 = self.log.clock.now()  # the sync's collectives start here

    def attempt(self, step: int, run: Callable[[], T], rerun_after_discard: bool) -> T | None:
        """Run `run` (a sync, or EDiT's forward holding one) until it completes in some view."""
        retry_t0: float | None = None
        while True:
            self.snapshot = None
            try:
                out = run()
            except RoundDiscarded:
                self.method.abandon_sync()
                self.method.discard_round(step)
                self.log.record("discard", step=step, view=self.view.number if self.view else None)
                if not rerun_after_discard:
                    return None
                continue
            except Exception as e:
                if not is_peer_loss(e):
                    raise
                failure = f"{type(e).__name__}: {str(e).strip().splitlines()[-1][:300]}"
            else:
                if self.snapshot is not None:  # a sync happened: the replacements of this view have synced
                    self.fresh = ()
                    self.unjudged = False
                if retry_t0 is not None:
                    self.log.record("retry", step=step, view=self.view.number if self.view else None,
                                    mode=self.cfg.runtime.survive_on_failure, t0=retry_t0,
                                    ms=1e3 * (self.log.clock.now() - retry_t0))
                return out
            # out of the `except`: its traceback held the failed collective's work, and with it the old group
            discarded = self.recover(failure, step)
            retry_t0 = self.log.clock.now()
            if discarded and not rerun_after_discard:
                return None

    def recover(self, failure: str, step: int) -> bool:
        """Detection, rollback and the view change after a failed sync; True when the round was discarded.

        The old view's group is let go of at once (its last reference dropped, which closes its connections): a
        survivor still blocked in the failed collective with *this* rank, not with the dead one, then fails within
        milliseconds too, instead of waiting out `timeout_s` while this rank waits for it in the new view."""
        clock, view = self.log.clock, self.entering or self.view  # the view whose sync or group failed
        self.entering = None
        assert view is not None and self.method is not None
        t_fail = clock.now()
        print(f"edit_lab.core.survival: rank {self.mesh.rank}: a sync of view {view.number} failed at step {step} "
              f"({failure}); rolling back, waiting for the next view", file=sys.stderr, flush=True)
        blocked = None if self.snapshot is None else 1e3 * (t_fail - self.sync_t0)
        self.method.abandon_sync()
        self.mesh.sync_group = self.pg = None
        gc.collect(1)  # the failed attempt's handles and their work futures form young cycles that hold it too
        rolled = self.snapshot is not None
        if self.snapshot is not None:  # first: it drops the failed attempt's records
            self.snapshot.restore(self.method, self.method.engine.shards, self.log)
            self.snapshot = None
        self.log.record("detection", step=step, view=view.number, error=failure[:200],
                        blocked_ms=blocked, t=t_fail)
        self.log.record("rollback", step=step, view=view.number, restored=rolled, t0=t_fail,
                        ms=1e3 * (clock.now() - t_fail))
        t0 = clock.now()
        while True:  # until a view is held: one that fails while this rank enters it is reported, and the next waited for
            self.store.set(views.failed_key(view.number, self.mesh.rank), str(step))
            n = self.agree(self.wait_newer(view.number, self.wait_s).number)
            try:
                self.change_to(views.read(self.store, n), step, t0, "failure")
                break
            except Exception as e:
                if not is_peer_loss(e):
                    raise
                view, self.entering = self.entering or views.read(self.store, n), None
                self.log.record("detection", step=step, view=view.number, error=str(e).strip()[-200:],
                                blocked_ms=None, t=clock.now())
        discard = self.cfg.runtime.survive_on_failure == "discard" and rolled
        if discard:
            self.method.discard_round(step)
            self.log.record("discard", step=step, view=n)
        return discard

    # ------------------------------------------------------------ a replacement
    def join(self) -> tuple[View, dict[str, Any]]:
        """A replacement's entry: announce readiness, wait for the view that names it, read the donor's state."""
        me = self.mesh.replica
        seen = self.latest()  # before the ready key: the launcher may publish the view naming it at once after it
        self.store.set(views.ready_key(me, self.life, self.mesh.shard), "1")
        t0 = self.log.clock.now()
        while True:
            v = self.wait_newer(seen, 24 * 3600.0)  # the launcher ends a replacement never needed
            seen = v.number
            if me in v.joined:
                break
        t1 = self.log.clock.now()
        raw = self.fetch(views.state_key(v.number, self.mesh.shard))
        state = torch.load(io.BytesIO(raw), weights_only=True)
        self.log.record("transfer", step=state["step"], view=v.number, to=[me], bytes=len(raw), side="joiner",
                        t0=t1, ms=1e3 * (self.log.clock.now() - t1), waited_ms=1e3 * (t1 - t0))
        return v, state  # the caller loads the state, then adopts the view (`on_view` resets its detectors after)
