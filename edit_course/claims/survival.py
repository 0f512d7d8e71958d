"""Notebook 10's claims about a replica's death, each computed from the runs' own records (edit-method.md §16).

Two readings: plain data taken from a run directory (`episode`: the views, who synced at each sync, the anchors'
CRCs after each sync, the validation and training losses, the summary's `survival`), and claims on that plain
data, each printing a verdict (`edit_course.verdict`), so that a unit test can hand-build the values. Nothing here
is a timing: what survives, who syncs and what is lost are decided by the schedule, not by this machine's clock
(the phase costs are printed as measurements, without a verdict).
"""

from __future__ import annotations

import statistics
from collections import defaultdict
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

from edit_course.verdict import Verdict, verdict

#: What each phase of `summary.json`'s `survival.costs_ms` measures (edit_lab/runtime/survive_records.py).
PHASES = {
    "launcher_detect_kill_ms": "launcher confirms the death: from the dead replica's last step start to its exit seen",
    "survivor_blocked_in_failed_sync_ms": "a survivor blocked in the collective that failed",
    "rollback_ms": "rollback: prefetched transfers drained, the sync's snapshot restored",
    "view_change_after_failure_ms": "view change after a failed sync (the launcher's confirmation included)",
    "view_change_at_sync_start_ms": "view change met at a sync's start (the death seen before any failure)",
    "view_change_join_ms": "view change that admits the replacement (the donor's hand-over included)",
    "transfer_donor_ms": "transfer, donor side: its state serialised onto the store",
    "transfer_joiner_ms": "transfer, replacement side: the state read and loaded",
    "retried_sync_ms": "the retried sync, in the new view",
}


# ------------------------------------------------------------------------------------ reading a run
def _jsonl(path: Path) -> list[dict[str, Any]]:
    import json

    return [json.loads(line) for line in path.read_text().splitlines() if line.strip()] if path.exists() else []


def sync_members(syncs: Sequence[Mapping[str, Any]]) -> dict[int, list[int]]:
    """step -> the replicas that synced there (the last `sync` row of a step: a retried sync's)."""
    return {int(r["step"]): list(r["members"]) for r in syncs if r.get("kind") == "sync" and "members" in r}


def checksums(run_dir: str | Path) -> dict[int, dict[int, set[tuple[int, int, int, int]]]]:
    """step -> replica -> {(shard, unit, θ CRC, anchor CRC)} of every rank's last checksum at that sync."""
    last: dict[tuple[int, int, int, int], tuple[int, int]] = {}
    for path in sorted(Path(run_dir).glob("events-rank*.jsonl")):
        for e in _jsonl(path):
            if e.get("kind") == "checksum":
                last[(int(e["step"]), int(e["replica"]), int(e["shard"]), int(e["unit"]))] = (
                    int(e["data"]["theta"]), int(e["data"]["anchor"]))
    out: dict[int, dict[int, set[tuple[int, int, int, int]]]] = defaultdict(lambda: defaultdict(set))
    for (step, replica, shard, unit), (theta, anchor) in last.items():
        out[step][replica].add((shard, unit, theta, anchor))
    return {s: dict(v) for s, v in out.items()}


def train_curves(metrics: Sequence[Mapping[str, Any]]) -> dict[int, list[tuple[int, float]]]:
    """replica -> [(step, training loss)] in step order."""
    out: dict[int, list[tuple[int, float]]] = defaultdict(list)
    for m in metrics:
        if m.get("kind") == "train":
            out[int(m["replica"])].append((int(m["step"]), float(m["loss"])))
    return {r: sorted(v) for r, v in sorted(out.items())}


def val_curve(metrics: Sequence[Mapping[str, Any]]) -> dict[int, float]:
    """step -> validation loss of the agreed model (the final one left out: it repeats the last step)."""
    return {int(m["step"]): float(m["val_loss"]) for m in metrics if m.get("kind") == "eval" and not m.get("final")}


def rows_at(syncs: Sequence[Mapping[str, Any]], step: int) -> list[str]:
    """The kinds of the sync records of one step, in order (detection, rollback, view, sync, retry, discard)."""
    return [str(r["kind"]) for r in syncs if r.get("step") == step]


# ------------------------------------------------------------------------------------ claims
def run_ended(error: BaseException | None, replica: int) -> Verdict:
    """Without survival a killed replica ends the run: `launch` raised WorkerError."""
    name = type(error).__name__ if error is not None else "nothing"
    first = str(error).strip().splitlines()[0] if error is not None and str(error).strip() else ""
    return verdict(f"Without survival, replica {replica}'s death ends the whole run", name == "WorkerError",
                   f"launch raised {name}" + (f" ({first})" if first else ""),
                   "the run finished: was the fault set (fault_replica, fault_replica_step)?")


def restart_loses(checkpoint_step: int | None, death_step: int, replicas: int) -> tuple[int, Verdict]:
    """A restart from the newest checkpoint re-trains every replica's steps since it: the survivors' too.
    Returns (replica-steps lost, the verdict)."""
    since = death_step - (checkpoint_step if checkpoint_step is not None else 0)
    lost = since * replicas
    survivors = since * (replicas - 1)
    v = verdict("A restart from the checkpoint loses the survivors' work too", survivors > 0,
                f"checkpoint at step {checkpoint_step}, death at step {death_step}: {since} steps × {replicas} "
                f"replicas = {lost} replica-steps lost, {survivors} of them the survivors'",
                "the death struck at the checkpoint's step: nothing was trained since it")
    return lost, v


def views_go(views: Sequence[Sequence[int]], expected: Sequence[Sequence[int]]) -> Verdict:
    """The views the launcher published, in order."""
    got = [list(v) for v in views]
    want = [list(v) for v in expected]
    said = " → ".join("{" + ",".join(map(str, v)) + "}" for v in got)
    return verdict("The views go " + " → ".join("{" + ",".join(map(str, v)) + "}" for v in want), got == want,
                   f"published: {said}", "a death or a join the episode did not plan (see survival.jsonl)")


def window_synced_survivors(members: Mapping[int, Sequence[int]], death_step: int, join_step: int,
                            survivors: Sequence[int]) -> Verdict:
    """Every sync after the death and before the join averaged the survivors only."""
    window = {s: list(m) for s, m in sorted(members.items()) if death_step < s < join_step}
    bad = {s: m for s, m in window.items() if m != sorted(survivors)}
    return verdict(f"Each sync between the death (step {death_step}) and the join (step {join_step}) averages "
                   f"{len(survivors)} replicas", bool(window) and not bad,
                   f"{len(window)} syncs ({', '.join(map(str, window))}), members "
                   + ("; ".join(f"{s}: {m}" for s, m in list(bad.items())[:3]) if bad else str(sorted(survivors))),
                   "no sync fell in the window" if not window else "another member took part")


def val_keeps_falling(val: Mapping[int, float], death_step: int, join_step: int) -> Verdict:
    """The agreed model's validation loss falls at every evaluation from the death to the join."""
    pts = [(s, v) for s, v in sorted(val.items()) if death_step <= s <= join_step]
    falls = len(pts) >= 2 and all(b < a for (_, a), (_, b) in zip(pts, pts[1:]))
    return verdict("The survivors' validation loss keeps falling while a replica is dead", falls,
                   ", ".join(f"step {s}: {v:.3f}" for s, v in pts) or "no evaluation in the window",
                   "fewer than two evaluations between the death and the join (eval_every)" if len(pts) < 2
                   else "a rise at one evaluation: with two replicas each sync averages less")


def joiner_agrees(crcs: Mapping[int, Mapping[int, set]], join_step: int, joiner: int) -> Verdict:
    """From its join on, the replacement's θ and anchors are bit for bit the others' at every sync (CRCs)."""
    steps = sorted(s for s in crcs if s >= join_step)
    compared = [s for s in steps if joiner in crcs[s] and len(crcs[s]) >= 2]
    differ = [s for s in compared if len({frozenset(v) for v in crcs[s].values()}) != 1]
    return verdict(f"After its join the replacement holds the others' parameters (checksums)",
                   bool(compared) and not differ,
                   f"θ and anchor CRCs of every unit equal on every replica at {len(compared) - len(differ)} of "
                   f"{len(compared)} syncs from step {join_step}" + (f"; first differing: step {differ[0]}"
                                                                     if differ else ""),
                   "no checksum recorded (checksums=True)" if not compared else "its state was not the donor's")


def rejoins_at_level(curves: Mapping[int, Sequence[tuple[int, float]]], joiner: int, survivors: Sequence[int],
                     join_step: int, rel_tol: float = 0.1) -> Verdict:
    """The replacement's first training loss (at `join_step`) is within `rel_tol` of the survivors' mean there,
    where a fresh model's (the run's step 0) is far above it."""
    mine = {s: v for s, v in curves.get(joiner, []) if s >= join_step}
    theirs = [dict(curves.get(r, [])).get(join_step) for r in survivors]
    theirs = [v for v in theirs if v is not None]
    if join_step not in mine or not theirs:
        return verdict("The replacement rejoins at the survivors' level, not from scratch", False,
                       f"no training loss of the replacement and the survivors at step {join_step}",
                       "the replacement never trained (rejoin_step after the end?)")
    first, level = mine[join_step], statistics.fmean(theirs)
    start = [v for r in survivors for s, v in curves.get(r, []) if s == 0]
    fresh = f"; a fresh model's at step 0: {statistics.fmean(start):.3f}" if start else ""
    return verdict("The replacement rejoins at the survivors' level, not from scratch",
                   abs(first - level) <= rel_tol * level,
                   f"its first loss (step {join_step}) {first:.3f}, the survivors' {level:.3f} (within "
                   f"{rel_tol:.0%}){fresh}", "its state was not the donor's")


def lost_as_defined(lost: Sequence[Mapping[str, Any]], replica: int, last_sync: int, join_step: int,
                    tokens_per_step: int) -> Verdict:
    """summary.json's `lost` for the death: the dead replica's steps from its last sync to its replacement's join."""
    row = next((x for x in lost if x.get("replica") == replica), None)
    want = join_step - last_sync
    ok = row is not None and row["replica_steps"] == want and row["tokens"] == want * tokens_per_step
    got = "none" if row is None else f"{row['replica_steps']} replica-steps, {row['tokens']:,} tokens"
    return verdict(f"The work lost is replica {replica}'s alone: from its last sync (step {last_sync}) to its "
                   f"replacement's join (step {join_step})", ok,
                   f"summary.json: {got}; expected {want} × {tokens_per_step} tokens",
                   "the death or the join fell elsewhere than planned")


def retry_and_discard(retry_rows: Sequence[str], discard_rows: Sequence[str], step: int) -> Verdict:
    """The same episode twice: `retry` keeps the survivors' local steps and syncs them again; `discard` drops the
    round (θ ← a). Judged from each run's records at the sync the death struck."""
    ok = "discard" not in retry_rows and "sync" in retry_rows and "discard" in discard_rows
    return verdict(f"At step {step} retry syncs the survivors' round again and discard drops it", ok,
                   f"retry: {', '.join(retry_rows) or 'nothing'}; discard: {', '.join(discard_rows) or 'nothing'}",
                   "the death did not strike a sync in one of the runs")


def costs_table(costs: Mapping[str, Mapping[str, float] | None]) -> list[tuple[str, str, str]]:
    """(phase, its definition, 'mean ms (n)') for every phase summary.json measured; '–' where none was paid."""
    out = []
    for key, meaning in PHASES.items():
        st = costs.get(key)
        out.append((key, meaning, "–" if not st else f"{st['mean']:.1f} ms (n = {st['n']})"))
    return out


#: The pieces of the timeline's episode band that the survivors stand still for (edit_lab/viz/episode.py).
STANDSTILL = ("detection", "rollback", "view", "retry")


def episode_in_order(spans: Sequence[Mapping[str, Any]], dead: int, joiner: int) -> Verdict:
    """The timeline's episode band (`edit_lab.viz.episode.episode_spans`) in the order survival acts: `dead`'s
    death, then the survivors' pieces (detection, rollback, view change, retried sync), then `joiner`'s join. An
    order of records, not a timing: every survivor piece ends at or after the death and starts before the join. (Ends,
    not starts: the death is drawn at the dead replica's last step start, and on a busy machine a survivor can already
    be waiting in the sync it will find failed before a slow replica starts its last step.)"""
    death = [s["t0"] for s in spans if s["piece"] == "death" and s["replica"] == dead]
    stand = [s for s in spans if s["piece"] in STANDSTILL and s["replica"] != dead]
    join = [s["t0"] for s in spans if s["piece"] == "join" and s["replica"] == joiner]
    ok = bool(death and stand and join) and min(death) <= min(s["t1"] for s in stand) \
        and max(s["t0"] for s in stand) <= min(join)
    seen = ", ".join(dict.fromkeys(s["piece"] for s in sorted(stand, key=lambda s: s["t0"]))) or "none"
    return verdict("The timeline shows the episode in order: the death, the survivors' reaction, the join", ok,
                   f"replica {dead} dies at {min(death, default=float('nan')):.3f} s; the survivors' pieces: {seen}; "
                   f"replica {joiner} joins at {min(join, default=float('nan')):.3f} s",
                   "a piece is missing from the records, or out of order")


def standstill_ms(spans: Sequence[Mapping[str, Any]], dead: int) -> float:
    """Milliseconds one survivor spent on the death: the band's detection, rollback, the view change without the
    dead replica and the retried sync (a later view change, the join's, is not the death's). A measurement of this
    machine, printed without a verdict."""
    death = min((s["t0"] for s in spans if s["piece"] == "death" and s["replica"] == dead), default=float("inf"))
    mine = [s for s in spans if s["piece"] in STANDSTILL and s["replica"] != dead and s["t1"] >= death]
    # up to the first view change after the death (the view without it) and the retried sync that starts as it ends
    end = min((s["t1"] for s in mine if s["piece"] == "view"), default=float("inf"))
    return 1e3 * sum(s["t1"] - s["t0"] for s in mine if s["t0"] <= end)


def torchft_agrees(side: Mapping[str, Any], tol: float = 2e-6) -> Verdict:
    """The same episode under torchft's DiLoCo (`edit_course.lessons.torchft_episode.side_by_side`): each side drops
    or commits the same rounds (the lab's `discard` record where torchft's commit failed, a `sync` where it
    committed) and the lab's final model equals torchft's survivors' last anchors within `tol` (float32 rounding
    of a dozen steps taken in another order)."""
    rounds = {step: committed for rows in side["torchft"].values() for step, committed, _ in rows}
    alike = bool(rounds) and all(
        side["lab"].get(step) == (["sync"] if committed else ["discard"])
        for rows in side["torchft"].values() for step, committed, _ in rows)
    ok = alike and side["final_max_diff"] < tol
    return verdict(f"With {side['mode']}, the lab's survivors and torchft's commit the same rounds and end on the "
                   f"same model", ok,
                   f"rounds committed (torchft): {dict(sorted(rounds.items()))}; the final model within "
                   f"{side['final_max_diff']:.1e} of torchft's anchors",
                   "the two sides committed different rounds or ended apart (each side's rounds printed)")
