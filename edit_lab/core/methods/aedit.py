"""A-EDiT: EDiT with time-based synchronisation (edit-method.md §6, decisions D3–D4).

EDiT syncs every τ *steps*, so with one slow replica every replica waits for it at every sync. A-EDiT
syncs every T_sync *seconds* instead: a fast replica simply trains more local steps per round, and
nobody waits for more than about one step of the slowest replica.

At the start of every step after warm-up, on every rank of replica r:

    t ← mean over the shard group of the ranks' clocks       (all ranks of a replica take the same decision)
    if t − last_sync_time < T_sync: train a local step         (no cross-replica traffic at all)
    else: *meet*: all-gather over the sync group, per replica,
          (steps since the last sync, steps since the last meeting, clock, done, step)   — kind 'step_count'
          total ← Σ steps since the last sync
          last_sync_time ← max of the gathered clocks          (every timer restarts from the same value)
          if total ≥ N_min: SYNC every unit in this forward (EDiT's layer-wise sync, with prefetch)
          else: no sync (the round goes on; only the timers restart)

Why this cannot deadlock, whatever the speeds. After warm-up the only sync-group collectives are
(a) meetings, (b) the SYNC that follows a meeting whose total reached N_min, and (c) the meetings of
`finalize`. Every replica takes the decision (b) from the same gathered vector, so it is the same
everywhere. It remains to show that every replica enters every meeting, and nothing else in between:

* every replica's timer holds the *same* value L: the max of the gathered clocks after a meeting, and
  likewise at the anchor step W, where a small exchange of clocks (kind 'timer_start') starts them;
* a replica that still has steps to train enters the next meeting at its first step start with
  t ≥ L + T_sync. Its clock keeps running and every step takes time, so it gets there — unless it
  runs out of steps first, and then it is in `finalize`;
* a replica that has run all its steps (`finalize`) enters meetings at once, flagged *done*, one after
  the other, and leaves the loop at the first meeting where every replica is flagged done — again
  the same meeting everywhere, because the flags are in the gathered vector.

So meetings pair up one to one across replicas: a fast replica that reaches meeting m first blocks
in the all-gather until the slow one reaches its own next step start (at most one slow step after
L + T_sync) — that block is the "replicas meet here" of §6 and the only waiting A-EDiT does.
(Restarting each replica's timer from its *own* clock would also be deadlock-free, but the fast
replica, which arrived first, would then always expire first and always wait longest.)

Step weighting (optional, D4): w_r ← (1 − ρ)·w_r + ρ·k_r / Σk with k_r the steps of replica r in the
current round (since the last sync), mixed into the penalty's softmax weights. A replica that trained
no step at all in the round (possible only for a replica that finished early and already synced in
`finalize`) holds θ = a, so its Δ = 0 says nothing: it gets weight 0 and the others are renormalised (and, with
error feedback, its residual stays as it was before that sync: `OuterState.keep_residual`, called by EDiT's
`finish` from the final weights).

Time-only twin: `AEDiTProgram` in `edit_lab/clock/sim/programs.py`,
the preview simulator's copy of this schedule: a change to *when* this method talks to the other replicas
changes it too (tests/distributed/test_sim_matches_virtual.py holds the two to the same timeline).
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any

import torch

from edit_lab.core.methods.edit import EDiTMethod
from edit_lab.protocol import MEETING_FIELDS, ScheduleReplay, decide_sync


class SyncTimer:
    """One replica's A-EDiT timer, in float64 seconds of the run's common clock (D3)."""

    def __init__(self, period: float) -> None:
        self.period = float(period)
        self.last_sync_time: float | None = None

    @property
    def running(self) -> bool:
        return self.last_sync_time is not None

    def start(self, t: float) -> None:
        self.last_sync_time = float(t)

    restart = start  # after a meeting, from the common value every replica agreed on

    def stop(self) -> None:
        """Forget the start: the next step start (re)starts the timer (new anchors, or a resumed run)."""
        self.last_sync_time = None

    def expired(self, t: float) -> bool:
        """True once T_sync has passed since the last restart; the replicas then meet."""
        assert self.last_sync_time is not None, "timer not started"
        return float(t) - self.last_sync_time >= self.period

    def elapsed(self, t: float) -> float:
        return 0.0 if self.last_sync_time is None else float(t) - self.last_sync_time


@dataclass
class Meeting:
    """What the replicas learned from one another at one meeting; identical on every rank."""

    since_sync: list[int]  # k_r: local steps since the last sync (the round so far)
    since_meeting: list[int]  # local steps since the previous meeting
    clocks: list[float]  # each replica's clock when it entered the meeting
    done: list[bool]  # replicas that have run all their steps and wait in `finalize`
    steps: list[int]  # each replica's step index at the meeting

    @classmethod
    def from_rows(cls, rows: list[list[float]]) -> "Meeting":
        """`rows[r]` is replica r's vector, in MEETING_FIELDS order."""
        return cls(since_sync=[int(round(v[0])) for v in rows], since_meeting=[int(round(v[1])) for v in rows],
                   clocks=[float(v[2]) for v in rows], done=[bool(v[3]) for v in rows],
                   steps=[int(round(v[4])) for v in rows])

    @property
    def total(self) -> int:
        return sum(self.since_sync)

    @property
    def restart_time(self) -> float:
        """The moment the last replica arrived: every timer restarts from it."""
        return max(self.clocks)

    @property
    def all_done(self) -> bool:
        return all(self.done)


def active_weights(weights: list[float], steps: list[int]) -> list[float]:
    """Zero the weight of replicas that trained no step in the round (their Δ is 0) and renormalise.

    When every replica trained, the weights are EDiT's, untouched: dividing by their sum (1 up to
    rounding) would change their last bit, and A-EDiT in lockstep must be EDiT bit for bit."""
    if all(k > 0 for k in steps):
        return list(weights)
    kept = [w if k > 0 else 0.0 for w, k in zip(weights, steps)]
    s = sum(kept)
    if s <= 0.0 or not math.isfinite(s):
        return kept
    return [w / s for w in kept]


def mix_step_weights(weights: list[float], steps: list[int], rho: float) -> list[float]:
    """w_r ← (1 − ρ)·w_r + ρ·k_r / Σk, over the replicas that still have a weight (D4: k of this round).

    Replicas with weight 0 (anomalous, or no steps) keep 0, so the step share cannot re-admit a
    pseudo-gradient the penalty rejected; the shares are taken over the others, so the result still
    sums to 1.
    """
    eligible = [w > 0.0 for w in weights]
    k_sum = sum(k for k, ok in zip(steps, eligible) if ok)
    if k_sum <= 0:
        return list(weights)
    return [(1.0 - rho) * w + rho * k / k_sum if ok else 0.0 for w, k, ok in zip(weights, steps, eligible)]


class AEDiTMethod(EDiTMethod):
    """EDiT's layer-wise sync and penalty, triggered by wall-clock time instead of a step count."""

    name = "aedit"

    def __init__(self, cfg, engine) -> None:
        super().__init__(cfg, engine)
        self.timer = SyncTimer(cfg.aedit.sync_period)
        self.last_meeting_step: int | None = None
        self.meeting: Meeting | None = None  # the latest one (its step counts feed the weights)
        self.meetings: list[dict[str, Any]] = []
        # RunConfig.aedit.schedule: meet and stop where a finished run did, instead of by the timers
        self.replay = (ScheduleReplay.of_run(cfg.aedit.schedule, self.mesh.replica)
                       if cfg.aedit.schedule is not None else None)

    # ------------------------------------------------------------ the trigger
    def create_anchors(self, step: int, record: bool = True) -> None:
        super().create_anchors(step, record)
        self.last_meeting_step = step
        # started by begin_step → start_timer; not here, as a resumed run calls this before its clock starts
        self.timer.stop()

    def begin_step(self, step: int) -> None:
        super().begin_step(step)  # anchors at step W; `should_sync` on every later step
        if self.outer is not None and not self.timer.running:
            self.start_timer()

    def start_timer(self) -> None:
        """Start every replica's timer from the same value: the latest replica clock, shared over the sync group.

        Called at the anchor step W (or the first step of a resumed run), which every rank reaches exactly
        once, so this small exchange pairs up like any other collective.
        """
        dev = self.comm.device
        mine = torch.tensor([self.replica_clock()], dtype=torch.float64, device=dev)
        everyone = torch.zeros(self.mesh.replicas, dtype=torch.float64, device=dev)
        self.comm.all_gather(everyone, mine, group="sync", kind="timer_start")
        self.timer.start(float(everyone.max()))

    # region aedit-meeting
    def should_sync(self, step: int) -> bool:
        if not self.timer.running:  # a resumed run whose first step is not its last sync step
            self.start_timer()
            return False
        t = self.replica_clock()
        due = self.timer.expired(t) if self.replay is None else self.replay.meets(step)
        if not due:
            return False
        return self.meet(step, t, done=False)

    def meet(self, step: int, t: float, done: bool) -> bool:
        """The blocking step-count exchange over the sync group; returns whether to sync now."""
        assert self.last_sync_step is not None and self.last_meeting_step is not None
        R = self.mesh.replicas
        dev = self.comm.device
        mine = torch.tensor([step - self.last_sync_step, step - self.last_meeting_step, t, float(done), step],
                            dtype=torch.float64, device=dev)
        everyone = torch.zeros(R * len(MEETING_FIELDS), dtype=torch.float64, device=dev)
        self.comm.all_gather(everyone, mine, group="sync", kind="step_count")
        m = Meeting.from_rows(everyone.reshape(R, len(MEETING_FIELDS)).cpu().tolist())
        sync = decide_sync(m.total, self.cfg.aedit.min_sync_steps, m.all_done)
        self.timer.restart(m.restart_time)
        self.last_meeting_step = step
        self.meeting = m
        info = {"steps": m.since_sync, "new_steps": m.since_meeting, "synced": sync, "total": m.total,
                "t": m.restart_time, "clocks": m.clocks, "at_steps": m.steps, "done": m.done}
        self.meetings.append({"step": step, **info})
        self.log.record("round", step=step, **info)
        return sync
    # endregion aedit-meeting

    # ------------------------------------------------------------ the sync: EDiT's, with round-aware weights
    def full_round(self, steps: list[int]) -> bool:
        """A-EDiT's closing round is a full one when its total reaches N_min, as every round it syncs: with a period
        shorter than a step and N_min = R·τ it then syncs and judges exactly as EDiT does."""
        return sum(steps) >= max(self.cfg.aedit.min_sync_steps, 1)

    @torch.no_grad()
    def start_sync(self, step: int, judge: bool = True, judge_full_round: bool = False) -> None:
        super().start_sync(step, judge, judge_full_round)
        if self.meeting is None:
            return
        k = self.meeting.since_sync
        self.weights = [active_weights(w, k) for w in self.weights]
        if self.cfg.aedit.step_weighting:
            self.weights = [mix_step_weights(w, k, self.cfg.aedit.step_weight_mix) for w in self.weights]

    # region aedit-stop
    def stop_here(self, step: int, spent: bool) -> bool:
        """After warm-up no exchange is needed: a replica whose budget is spent goes to `finalize`, whose
        meetings (flagged done) pair up with the others' timed meetings (see the module docstring)."""
        if self.replay is not None:  # every replica replays, so none needs the others' word
            return self.replay.stops(step)
        if self.outer is None:
            return super().stop_here(step, spent)
        return spent

    def finalize(self, step: int) -> None:
        """This replica has run all its steps; meet (flagged done) until every replica has.

        A replica still training meets when its timer expires, so the loop costs the finished replica
        at most one period per meeting; the last meeting (all done) syncs whatever was trained since the
        last sync, N_min notwithstanding, so every replica ends on the same model.
        """
        if self.outer is None:  # never left warm-up: every replica holds the same θ
            return
        while True:
            if self.meet(step, self.replica_clock(), done=True):
                assert self.meeting is not None
                # the closing round: judged when it is a round the timer would have synced anyway (see EDiT's)
                self.start_sync(step, judge=not self.meeting.all_done, judge_full_round=True)
                for unit in range(self.engine.n_units):
                    self.pre_unit(unit)
            assert self.meeting is not None
            if self.meeting.all_done:
                return
    # endregion aedit-stop

    # ------------------------------------------------------------ state and accounting
    def state_dict(self) -> dict[str, Any]:
        # No timer value: the clock restarts at zero in a resumed run, and a checkpoint is taken right
        # after a sync, so the resumed run restarts the timer on its first step (`load_state_dict`).
        return {**super().state_dict(), "last_meeting_step": self.last_meeting_step}

    def load_state_dict(self, state: dict[str, Any]) -> None:
        super().load_state_dict(state)
        self.last_meeting_step = state.get("last_meeting_step", self.last_sync_step)
        self.timer.stop()

    def summary(self) -> dict[str, Any]:
        """For summary.json's method_info: every meeting, and the local steps per replica of each round."""
        return {**super().summary(), "sync_period_s": self.timer.period, "min_sync_steps": self.cfg.aedit.min_sync_steps,
                "meetings": self.meetings,
                "local_steps_per_round": [m["steps"] for m in self.meetings if m["synced"]]}
