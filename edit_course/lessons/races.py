"""The numbers and tables notebook 06 reads off its straggler runs, defined once and tested.

The lesson races `sync`, EDiT, CO2 and A-EDiT for the same wall-clock time with one replica slower,
then asks three things of the runs: how fast the fast replica steps when nobody waits (A-EDiT's sync
period is derived from it), how many steps each replica trained (the prediction), and how many local
steps each replica trained per round. This module turns runs into those numbers; the per-run
statistics themselves come from `edit_lab.records.analysis` (metrics, rounds) and `edit_course.claims.stragglers`
(`pace_table`, `local_rounds`, `steps_of`), so nothing here re-derives them.

Replica 0 is the fast one and the last replica the slow one throughout, as in the lesson's runs
(`straggler_replicas=(R - 1,)`).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence

import pandas as pd

from edit_course.claims.stragglers import local_rounds, pace_table, steps_of
from edit_lab.records.analysis import metrics_table
from edit_lab.records.run import Run


def fast_step_s(run: Run) -> float:
    """Seconds of one training step of replica 0 (the fast one), the median of its `dt` over the steps
    from the end of warm-up on: its own pace per step, the step time A-EDiT's period is built from.

    The median, not the mean: a step that waited at a sync (EDiT's last step of a round) or stalled on
    a busy machine is one long outlier among τ ordinary ones. NaN when replica 0 has no step after
    warm-up."""
    m = metrics_table(run)
    if m.empty:
        return float("nan")
    rows = m[(m["replica"] == 0) & (m["step"] >= run.config.schedule.warmup_steps)]
    return float(rows["dt"].median()) if len(rows) else float("nan")


def aedit_sync_period(runs: Mapping[str, Run], tau: int, fixed_s: float = 0.0, fallback_s: float = 1.0) -> float:
    """A-EDiT's sync period T_sync in seconds, the value notebook 06 gives `RunConfig.aedit.sync_period`.

    `fixed_s` when it is positive (the notebook's `SYNC_PERIOD_S`); otherwise τ × `fast_step_s` of the
    EDiT run in `runs` (else of the first run), so that A-EDiT and EDiT sync about equally often from
    the fast replica's point of view: EDiT's round is τ of its steps. `fallback_s` when there is no run
    to measure yet, or its step time is unknown."""
    if fixed_s > 0:
        return float(fixed_s)
    reference = runs.get("edit") or next(iter(runs.values()), None)
    if reference is None:
        return float(fallback_s)
    step = fast_step_s(reference)
    return float(fallback_s) if step != step else tau * step  # NaN: no step to measure


def step_ratio(run: Run) -> float:
    """Steps replica 0 trained divided by the steps the last replica trained (summary.json's per-replica
    `steps`): about 1 for a lockstep method (`sync`) and for τ-step rounds (EDiT, CO2), where the fast
    replica waits instead of stepping on; about the straggler factor for A-EDiT with a core per rank.
    The slow replica's count is taken as at least 1, so a run where it never stepped gives a number."""
    steps = steps_of(run)
    return steps[0] / max(steps[-1], 1)


def syncs_of(run: Run) -> int:
    """The syncs a run's records hold (`syncs.jsonl` entries of kind "sync", the closing sync included): how
    often the replicas averaged, whatever decided when (τ steps, or A-EDiT's T_sync seconds)."""
    return sum(1 for s in run.syncs if s.get("kind") == "sync")


def sync_count_line(edit: Run, aedit: Run) -> str:
    """How often EDiT and A-EDiT synced in the same seconds, read off the two runs, and why they differ.

    Notebook 06 sets T_sync to τ × the fast replica's step, while an EDiT round ends only when the slow replica
    has trained τ steps: A-EDiT meets more often, so over a slow link it also sends more bytes in the same
    seconds. The direction word is the runs', never assumed."""
    e, a = syncs_of(edit), syncs_of(aedit)
    ratio = a / e if e else float("nan")
    more = "more" if a > e else ("as" if a == e else "less")
    return (f"syncs in the same seconds: EDiT {e}, A-EDiT {a} ({ratio:.2f}×): A-EDiT meets every T_sync = τ of the "
            f"fast replica's steps, EDiT when the slow one has trained τ steps, so A-EDiT synced {more} often here "
            "(on a slow link, more syncs send more bytes in the same seconds)")


def race_table(runs: Mapping[str, Run]) -> pd.DataFrame:
    """`claims_stragglers.pace_table` (wall time, seconds each replica stood blocked, Σ of the replicas'
    tokens/s against the capacity bound, its share, the final validation loss; warm-up left out) with
    two columns more, the ones the step-ratio prediction is checked on:

    - `steps per replica`: each replica's trained steps, replica 0 first (a list);
    - `fast / slow steps`: `step_ratio`, replica 0's steps over the last replica's.
    """
    table = pace_table(dict(runs))
    table["steps per replica"] = [steps_of(runs[name]) for name in table.index]
    table["fast / slow steps"] = [step_ratio(runs[name]) for name in table.index]
    return table


def rounds_side_by_side(runs: Mapping[str, Run], methods: Sequence[str] = ("edit", "aedit"),
                        rounds: int = 12) -> pd.DataFrame:
    """Local steps per round of several runs, side by side: `claims_stragglers.local_rounds` of each of
    `methods` present in `runs` (rounds from the end of warm-up on, renumbered from 0), under a column
    level named by the method, one column per replica, as nullable integers (`<NA>` where a run had
    fewer rounds), the first `rounds` rows. Methods not in `runs` are left out; none present: an empty
    table."""
    shown = [m for m in methods if m in runs]
    if not shown:
        return pd.DataFrame()
    return pd.concat({m: local_rounds(runs[m]) for m in shown}, axis=1).astype("Int64").head(rounds)
