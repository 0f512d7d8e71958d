"""When the replicas talk and what they send: the step schedule (edit-method.md §3), A-EDiT's meeting rule (§6),
and the layouts of the small float64 tensors the methods gather.

Plain functions of step counts, without torch, because two places follow them: the methods that run
(`edit_lab/core/methods/`) and the preview simulator that replays them in time only (`edit_lab/clock/sim/`). With
W warm-up steps and sync interval τ: steps 0 … W−1 are synchronous, the anchors are created at the start
of step W, and the replicas sync at the start of steps W+τ, W+2τ, …
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path
from typing import Any, NamedTuple


def in_warmup(step: int, warmup: int) -> bool:
    """Steps 0 … W−1: synchronous training, gradients all-reduced across replicas."""
    return step < warmup


def is_anchor_step(step: int, warmup: int) -> bool:
    """The first 'sync', at step W: it only creates the anchors."""
    return step == warmup


def is_sync_step(step: int, warmup: int, interval: int) -> bool:
    """True at the start of steps W+τ, W+2τ, …: the steps whose forward pass syncs."""
    return step > warmup and (step - warmup) % interval == 0


def quorum_verdicts(times: dict[int, tuple[float, float]], m: int) -> dict[int, tuple[bool, float]]:
    """Backup workers' rendezvous on a clock that knows every replica's times (core/quorum.py for real processes):
    `times` maps each replica to (arrived, ready), the moment it asked and the moment its pause ends. The first m
    ready, ties by replica, are the members; each gets (member, when its verdict is known): a member's when it is
    ready, a late replica's when the m-th was ready, or at once if that was before it asked (it stops spinning).
    The virtual clock (`Fabric.quorum`) and the simulator (`Engine`'s `Quorum`) both decide by it."""
    ranked = sorted(times, key=lambda r: (times[r][1], r))
    members = set(ranked[:m])
    t_met = times[ranked[m - 1]][1]
    return {r: (True, ready) if r in members else (False, max(arrived, t_met)) for r, (arrived, ready) in times.items()}


def fragment_units(n_units: int, fragments: int) -> list[list[int]]:
    """Streaming DiLoCo's fragments: P runs of consecutive sync units, as equal as they come, the first ones
    one unit longer (3 units in 2 fragments: [0, 1] and [2]; unit 0 is the root unit)."""
    base, extra = divmod(n_units, fragments)
    out, u = [], 0
    for p in range(fragments):
        k = base + (1 if p < extra else 0)
        out.append(list(range(u, u + k)))
        u += k
    return out


def fragment_landing(step: int, warmup: int, interval: int, fragments: int) -> int | None:
    """Streaming DiLoCo: the fragment whose outer step lands at the start of `step`, or None.

    Every H/P steps after warm-up one fragment lands, in turn: fragment p at the start of steps
    W + (p + 1)·H/P + k·H, so fragment p is offset by p·H/P from fragment 0 and each syncs every H
    steps (torchft's order: fragment 0 first, H/P steps after the anchors). With P = 1 these are
    DiLoCo's sync steps (`is_sync_step`). Its pseudo-gradient leaves `fragment_sync_delay` steps earlier.
    """
    h = interval // fragments
    if step <= warmup or (step - warmup) % h:
        return None
    return ((step - warmup) // h - 1) % fragments


def decide_sync(total: int, min_sync_steps: int, all_done: bool) -> bool:
    """Sync after an A-EDiT meeting? Normally when the round holds at least N_min steps over the sync group.

    When every replica has finished, sync whenever anything was trained since the last sync (N_min no
    longer applies: this is the last chance for the replicas to end on the same model).
    """
    if all_done:
        return total > 0
    return total >= min_sync_steps


@dataclass(frozen=True)
class ScheduleReplay:
    """One replica's A-EDiT schedule as a finished run recorded it: the steps at which it entered a timed
    meeting, and the step at which its budget stopped it (`RunConfig.aedit.schedule`).

    A-EDiT's numerics follow from its schedule alone: which steps each replica trained before each meeting
    decides every sync's contents and weights, and the timers only decide *when* that is. Replaying the
    schedule of a real run on the virtual clock therefore trains the real run's model exactly, whatever the
    cost model says (tests/distributed/test_virtual_clock.py)."""

    meet_at: tuple[int, ...]
    stop_at: int
    replicas: int

    @classmethod
    def of_run(cls, run_dir: str | Path, replica: int) -> "ScheduleReplay":
        """From `summary.json`'s meetings (`method_info.meetings`, rank 0's record of every meeting: the
        step every replica entered it at, and which replicas had finished)."""
        summary = json.loads((Path(run_dir) / "summary.json").read_text())
        meetings = summary["method_info"]["meetings"]
        if not meetings:
            raise ValueError("it recorded no A-EDiT meeting")
        replicas = len(meetings[0]["at_steps"])
        timed = tuple(int(m["at_steps"][replica]) for m in meetings if not m["done"][replica])
        done = [int(m["at_steps"][replica]) for m in meetings if m["done"][replica]]
        if not done:
            raise ValueError(f"replica {replica} never finished in it")
        return cls(meet_at=timed, stop_at=done[0], replicas=replicas)

    #: The knobs (flags) a replay must share with the replayed run (RunConfig.validate refuses another value).
    SETTINGS = ("warmup_steps", "min_sync_steps", "sync_period")

    def meets(self, step: int) -> bool:
        """Did this replica enter a timed meeting at the start of `step`?"""
        return step in self.meet_at

    def stops(self, step: int) -> bool:
        return step >= self.stop_at


# ------------------------------------------------------------------------ what the replicas exchange
# The layouts of the small float64 tensors the methods gather, in one place each.
#
# EDiT's per-unit penalty decisions (one all-gather per sync, kind 'sync_decisions') and A-EDiT's
# step-count meeting (kind 'step_count'). Torch-free, so that the preview simulator (`sim/programs.py`)
# sizes the same exchanges from the same definition as the methods pack and read them.


class Decision(NamedTuple):
    """What each replica shares per unit at the start of a sync (one all-gather, kind 'sync_decisions').

    One row of the gathered float64 tensor `decisions[replica, unit, column]`: packed from a `Decision`,
    read back by name through `COLUMN`, so the packing and every reader share this one layout. A replica
    sends its G and k (and, in the outlier column, `exclude_trouble`'s answer); every rank then fills in
    the rest for every replica from every replica's detectors (`penalty.judge_replicas`, D11).
    """

    G: float  # the replica's pseudo-gradient norm of the unit
    z: float  # the detector's z-score of what it judges (filled in after the gather)
    threshold: float  # the detector's threshold δ·f (after the gather; inf: not judged)
    outlier: float  # 1.0: flagged (its Δ counts as 0), after the gather
    readmitted: float  # 1.0: re-admitted after K flags in a row (the per-unit rule of D10), after the gather
    steps: float  # k, its local steps in the round (G/k is what the detector judges, `PenaltyConfig.judged_norm`)
    flagged_in_a_row: float  # the syncs in a row it has been flagged (`AnomalyDetector.count_flag`), after it


DECISION_FIELDS = Decision._fields
#: Each field's column in the gathered tensor: `decisions[:, unit, COLUMN.outlier]`.
COLUMN = Decision(*range(len(DECISION_FIELDS)))


#: Values per replica in A-EDiT's step-count exchange, in this order (`methods/aedit.Meeting`).
MEETING_FIELDS = ("since_sync", "since_meeting", "clock", "done", "step")
