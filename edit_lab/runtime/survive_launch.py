"""The launcher's side of surviving a replica's death (`RunConfig.runtime.survive`): confirm, fence, publish, replace.

`launch._run` ends every rank at the first failure. With survival on, the launcher instead watches replicas, the
unit of failure, and keeps the views (`core.view`) on its store:

- *a death* is a rank's process killed by a signal: confirmed by the process table itself (waitpid), so no
  peer's word is needed. The rest of that replica's ranks are killed (fencing: a replica is whole or gone), and
  view N+1 without it is published; the survivors, whose next sync with it fails or who see the newer view when a
  sync starts, move to it. A replica whose exited ranks all left a traceback (an exception, no signal) is not
  dead but broken: the run ends at once with that rank and traceback (`WorkerError`), as without survival.
- *a hang*: a survivor reports on the store that a sync of view N failed (its collective timed out after
  `timeout_s`) while no process has exited. The members that have not reported once the others had a moment to
  (`settle_s`) and that started no step for `timeout_s + settle_s` (a survivor blocked in the same collective
  would have reported by then) are hung: they are killed the same way, and the view published without them.
- *a replacement* (`rejoin_step` ≥ 0) is started as soon as its replica is fenced, as a new life of that replica
  (its own world on the store), and waits. When a member asks at a sync at or after `rejoin_step` and every rank
  of the replacement is ready, the view with it is published; its donor hands it the state (`core.survival`).
  A replacement that dies or hangs in the view that admits it is replaced again, at most `MAX_FAILED_JOINS` times.
- Below `survive_min_replicas` live replicas the run ends as without survival: `WorkerError`, with the reason.

Every step of an episode is a row of `survival.jsonl` (seconds from the common start), and `summary.json` gets a
`survival` entry: the views, the deaths, what was lost and what each phase cost (`survive_records`).
"""

from __future__ import annotations

import os
import signal
import time
from pathlib import Path
from typing import Any, Callable

from edit_lab.config import RunConfig, deaths
from edit_lab.core import view as views
from edit_lab.core.view import View
from edit_lab.records import rundir
from edit_lab.records.events import write_jsonl
from edit_lab.runtime import outdir


class Replicas:
    """The processes of every replica's current life, and the launcher's log of the episode."""

    def __init__(self, cfg: RunConfig, out: Path, start: Callable[[int, int], Any]) -> None:
        self.cfg, self.out, self.start = cfg, out, start
        self.life = {r: 0 for r in range(cfg.replicas)}
        self.procs: dict[int, list[Any]] = {}  # replica -> its ranks' processes (current life)
        self.rows: list[dict[str, Any]] = []
        self.start_unix: float | None = None

    def spawn(self, replica: int) -> None:
        S = self.cfg.shards
        self.procs[replica] = [self.start(replica * S + s, self.life[replica]) for s in range(S)]

    def ranks(self, replica: int) -> list[int]:
        S = self.cfg.shards
        return [replica * S + s for s in range(S)]

    def exited(self, replica: int) -> list[tuple[int, int]]:
        """(rank, exit code) of this replica's processes that ended other than 0."""
        codes = [(r, p.poll()) for r, p in zip(self.ranks(replica), self.procs[replica])]
        return [(r, c) for r, c in codes if c not in (None, 0)]

    def finished(self, replica: int) -> bool:
        return all(p.poll() == 0 for p in self.procs[replica])

    def fence(self, replica: int) -> None:
        """Kill whatever is left of the replica (a hung rank, or the shard ranks of a dead one) and reap it."""
        for p in self.procs[replica]:
            if p.poll() is None:
                p.send_signal(signal.SIGKILL)
        for p in self.procs[replica]:
            p.wait()

    def note(self, store: Any, kind: str, **fields: Any) -> None:
        if self.start_unix is None and store.check([views.START_UNIX]):
            self.start_unix = float(store.get(views.START_UNIX))
        t = time.time() - self.start_unix if self.start_unix is not None else None
        self.rows.append({"kind": kind, "t": t, "unix": time.time(), **fields})
        if os.environ.get("EDIT_LAB_SURVIVE_DEBUG"):
            print("survive:", self.rows[-1], flush=True)

    def all_procs(self) -> list[Any]:
        return [p for ps in self.procs.values() for p in ps]


def watch(cfg: RunConfig, out: Path, store: Any, start: Callable[[int, int], Any], poll: Callable[[], None],
          fail: Callable[[int, str], BaseException]) -> Replicas:
    """Start every replica, follow the run through its deaths and joins until every live member has finished.

    `start(rank, life)` starts one rank's process; `poll()` is the launcher's progress and stall check; `fail(rank,
    why)` the error to raise when the run cannot go on (below the minimum, a replacement that died)."""
    reps = Replicas(cfg, out, start)
    view = views.publish(store, View(0, tuple(range(cfg.replicas)), reason="start"))
    for r in range(cfg.replicas):
        reps.spawn(r)
    reps.note(store, "view", **views.describe(view))
    joining: list[int] = []
    failed_joins: dict[int, int] = {}  # replica -> its replacements that died before they joined
    first_report: float | None = None
    settle_s = max(1.0, cfg.runtime.timeout_s / 4)
    while True:
        dead = {r: reps.exited(r) for r in view.members}
        dead = {r: e for r, e in dead.items() if e}
        for r, codes in sorted(dead.items()):
            if all(c > 0 for _, c in codes):  # it raised, and nothing killed it: a bug, not a death
                raise fail(*_raised(out, codes))
        for r in joining:
            if reps.exited(r):
                raise fail(reps.ranks(r)[0], f"the replacement of replica {r} died before it joined: "
                           f"{reps.exited(r)} (see its rank log)")
        why = ""
        if not dead:  # a hang: a member reported a failed sync of this view, and some members never did
            reported = {r for r in view.members
                        if any(store.check([views.failed_key(view.number, k)]) for k in reps.ranks(r))}
            if reported:
                first_report = first_report or time.monotonic()
                if time.monotonic() - first_report > settle_s:
                    silent = [r for r in view.members if r not in reported]
                    if not silent:
                        raise fail(reps.ranks(min(reported))[0], "every live replica reported a failed sync of view "
                                   f"{view.number} and none died or hangs: a network failure?")
                    # a survivor blocked in the same collective reports within timeout_s of entering it, which is
                    # less than a step after its last step start: silent longer than that, it is not blocked, it hangs
                    hung = [r for r in silent if not _stepped_within(store, reps.ranks(r), cfg.runtime.timeout_s + settle_s)]
                    dead = {r: [] for r in hung}
                    why = (f"hung: no step for timeout_s + {settle_s:g} s and no report, after a peer's sync timed "
                           "out")
        if dead:
            for r, codes in sorted(dead.items()):
                reps.note(store, "death", replica=r, view=view.number, exits=codes,
                          since_last_step_ms=_since_last_step_ms(store, reps.ranks(r)),
                          cause=why or ", ".join(f"rank {k}: exit {c}" for k, c in codes))
                reps.fence(r)
                reps.note(store, "fenced", replica=r)
            abandoned = []
            for r in sorted(dead):  # a replacement that dies in the view that admitted it never joined
                failed_joins[r] = failed_joins.get(r, 0) + (r in view.joined)
                if failed_joins[r] >= MAX_FAILED_JOINS:  # said before the view: no survivor asks for it again
                    store.set(views.abandoned_key(r), str(failed_joins[r]))
                    abandoned.append(r)
            members = tuple(m for m in view.members if m not in dead)
            if len(members) < cfg.runtime.survive_min_replicas:
                r = min(dead)
                raise fail(reps.ranks(r)[0], f"replica {r} died ({why or dead[r]}): {len(members)} live "
                           f"replica(s) left, fewer than survive_min_replicas={cfg.runtime.survive_min_replicas}; the run "
                           f"ends")
            view = views.publish(store, View(view.number + 1, members, died=tuple(sorted(dead)),
                                             reason=why or "exited"))
            reps.note(store, "view", **views.describe(view))
            first_report = None
            if cfg.runtime.rejoin_step >= 0:
                for r in sorted(dead):
                    if r in abandoned:
                        reps.note(store, "replacement_abandoned", replica=r, failed_joins=failed_joins[r])
                        continue
                    reps.life[r] += 1
                    reps.spawn(r)
                    joining.append(r)
                    reps.note(store, "replacement_started", replica=r, life=reps.life[r])
        asked = (int(store.get(views.join_request_key(view.number)))
                 if joining and store.check([views.join_request_key(view.number)]) else None)
        due = deaths.due_now(cfg, joining, asked) if asked is not None else []
        if due and all(store.check([views.ready_key(r, reps.life[r], s)]) for r in due for s in range(cfg.shards)):
            view = views.publish(store, View(view.number + 1, tuple(sorted(view.members + tuple(due))),
                                             joined=tuple(sorted(due)), reason="replacement"))
            reps.note(store, "view", **views.describe(view), asked_at_step=asked)
            joining = [r for r in joining if r not in due]
        if all(reps.finished(r) for r in view.members):
            for r in joining:  # a replacement the run ended before admitting
                reps.fence(r)
            return reps
        poll()
        time.sleep(0.02)


#: A replica's replacements that may die (or be found hung) in the view admitting them before the launcher stops
#: replacing it: a replacement that cannot reach its group (always slower than the survivors' bound, a machine that
#: cannot start it) would otherwise be started again and again, and the run would end only at its stall timeout.
MAX_FAILED_JOINS = 2


def _raised(out: Path, codes: list[tuple[int, int]]) -> tuple[int, str]:
    """(rank, traceback) of a replica whose ranks exited with an exception: the first rank's own error, else the
    first one written (`rundir.error_file`). A death is a process killed (a signal) or hung (fenced); a rank that
    raises outside a collective's peer loss (`core.survival`) is a bug, and ends the run as without survival."""
    texts = {k: (out / rundir.error_file(k)).read_text(errors="replace")
             for k, _ in codes if (out / rundir.error_file(k)).exists()}
    if not texts:
        k, c = codes[0]
        return k, f"exit code {c} without a Python traceback (see rank{k}'s log)"
    k = min(texts)
    return k, f"rank {k} raised (not a death: survival trains through a kill or a hang only):\n{texts[k]}"


def _stepped_within(store: Any, ranks: list[int], seconds: float) -> bool:
    """Has any of these ranks started a step in the last `seconds` (their heartbeats, `Survival.heartbeat`)?"""
    now = time.time()
    for k in ranks:
        key = views.alive_key(k)
        if store.check([key]) and now - float(store.get(key)) < seconds:
            return True
    return False


def _since_last_step_ms(store: Any, ranks: list[int]) -> float | None:
    """How long before now the replica last started a step: for a kill at a step's start, the launcher's
    detection time (its heartbeat is set right before the fault)."""
    beats = [float(store.get(views.alive_key(k))) for k in ranks if store.check([views.alive_key(k)])]
    return 1e3 * (time.time() - max(beats)) if beats else None


def log_name(rank: int, life: int) -> str:
    """A rank's log: the run's start keeps `rank{r}.log`, a replacement gets its own."""
    return outdir.rank_log(rank) if life == 0 else f"rank{rank}.life{life}.log"


def write_records(cfg: RunConfig, out: Path, reps: Replicas, start_unix: float) -> None:
    """The run directory from the live ranks' records (what rank 0 gathers without survival)."""
    import pickle

    import torch

    from edit_lab.runtime.survive_records import survival_summary
    from edit_lab.runtime.survive_worker import MODEL, RECORD

    # the first record is the one whose per-sync records become syncs.jsonl: a rank of the run's start that
    # lived to the end (it saw every view), else the lowest replacement
    alive = [r for r in sorted(reps.procs) if reps.finished(r)]
    final = [k for r in sorted(alive, key=lambda r: (reps.life[r] > 0, r)) for k in reps.ranks(r)]
    records = []
    for k in final:
        path = out / RECORD.format(rank=k)
        with open(path, "rb") as f:
            records.append(pickle.load(f))
        path.unlink()
    state = torch.load(out / MODEL, weights_only=True)
    (out / MODEL).unlink()
    rundir.RunWriter(out, cfg, start_unix).write_all(records, state)
    write_jsonl(out / SURVIVAL, reps.rows)
    survival_summary(cfg, out, reps.rows, records)


#: The launcher's rows of every episode (deaths, fencing, views, replacements), seconds from the common start.
SURVIVAL = "survival.jsonl"
