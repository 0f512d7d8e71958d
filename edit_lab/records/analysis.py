"""Tidy tables of a run: the one layer between a run directory and every figure, report or notebook cell.

Why tables and not figures straight from the JSON: a reader can print the very numbers a figure
draws (`comm_split(run)` next to the timeline), tests can assert on them, and several runs compare
by concatenating rows. Every function takes a `Run`, a run directory or a path, and returns a
`pandas.DataFrame` with one row per thing (event, step, penalty decision, replica, rank, run).

Two quantities need a definition:

- **hidden / exposed communication**, defined once in `overlap.py`: the part of a collective in
  flight while its rank *worked* is hidden, the rank's own wait on it is exposed, and the rest was in
  flight while the rank waited on another collective (`other`). `hidden + exposed + other =
  duration` for every collective. Tables per kind sum each collective's own split; per-rank totals
  (`comm_totals`, `replica_table`) split the union of the collectives, so an instant of a rank's
  time is never counted twice.
- **capacity bound.** The tokens/s the replicas would reach together if none of them ever stood
  waiting on the sync group: each replica at its own pace, `tokens / (time − blocked time)`, summed
  over replicas. Synchronous training runs at R × the slowest replica's pace; A-EDiT's point is
  to get close to this bound when replicas run at different speeds.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from pathlib import Path
from typing import Any, Union

import pandas as pd

from edit_lab.records.events import coords, is_comm, sync_group_bytes
from edit_lab.records.run import Run
from edit_lab.registry import capabilities

RunLike = Union[Run, str, Path]
StepRange = Union[int, tuple[int, int], None]

EVENT_COLUMNS = ["rank", "replica", "shard", "step", "unit", "kind", "t0", "t1", "duration", "bytes", "group",
                 "comm", "overlapped", "exposed", "hidden", "other", "part", "on", "reason", "data"]


def as_run(run: RunLike) -> Run:
    """A Run from a Run, a run directory or its path."""
    return run if isinstance(run, Run) else Run(run)


def _step_filter(steps: StepRange) -> tuple[int, int] | None:
    if steps is None:
        return None
    if isinstance(steps, int):
        return steps, steps
    lo, hi = steps
    return int(lo), int(hi)


# ---------------------------------------------------------------------------------------- events
def event_rows(run: RunLike, steps: StepRange = None, ranks: Iterable[int] | None = None,
               kinds: Iterable[str] | None = None) -> list[dict[str, Any]]:
    """The raw event dicts of `run`, filtered (steps inclusive on both ends)."""
    r = as_run(run)
    rng = _step_filter(steps)
    rank_set = None if ranks is None else {int(x) for x in ranks}
    kind_set = None if kinds is None else set(kinds)
    out = []
    for e in r.events:
        if rng is not None and not rng[0] <= e["step"] <= rng[1]:
            continue
        if rank_set is not None and e["rank"] not in rank_set:
            continue
        if kind_set is not None and e["kind"] not in kind_set:
            continue
        out.append(e)
    return out


def events_table(run: RunLike, steps: StepRange = None, ranks: Iterable[int] | None = None,
                 kinds: Iterable[str] | None = None) -> pd.DataFrame:
    """One row per event: the schema of events.py plus duration, comm, exposed, hidden, other and a few data fields."""
    r = as_run(run)
    rows = []
    for e in event_rows(r, steps, ranks, kinds):
        data = e.get("data") or {}
        sp = r.overlap.split(e)
        rows.append({
            "rank": e["rank"], "replica": e["replica"], "shard": e["shard"], "step": e["step"],
            "unit": e.get("unit"), "kind": e["kind"], "t0": e["t0"], "t1": e["t1"],
            "duration": max(e["t1"] - e["t0"], 0.0), "bytes": int(e.get("bytes") or 0), "group": e.get("group"),
            "comm": is_comm(e["kind"], e.get("group")), "overlapped": bool(data.get("overlapped", False)),
            "exposed": sp.exposed, "hidden": sp.hidden, "other": sp.other, "part": data.get("part"), "on": data.get("on"),
            "reason": data.get("reason"), "data": data,
        })
    df = pd.DataFrame(rows, columns=EVENT_COLUMNS)
    df["unit"] = df["unit"].astype("Int64")
    return df


def comm_split(run: RunLike, by: Sequence[str] = ("rank", "kind"), steps: StepRange = None,
               ranks: Iterable[int] | None = None) -> pd.DataFrame:
    """Communication time per group of `by` (any event columns): count, bytes, total, hidden, exposed, other seconds.

    Each collective contributes its own split (overlap.py), so two collectives in flight together
    both count an instant they share: the right reading of "how much of the sync-group all-reduce
    was hidden", not of a rank's time (use `comm_totals` for that). `hidden_frac` = hidden / total.
    """
    df = events_table(run, steps, ranks)
    df = df[df["comm"]]
    cols = ["count", "bytes", "total_s", "hidden_s", "exposed_s", "other_s", "hidden_frac"]
    by = list(by)
    if df.empty:
        return pd.DataFrame(columns=by + cols)
    g = df.groupby(by, dropna=False)
    out = pd.DataFrame({
        "count": g.size(),
        "bytes": g["bytes"].sum(),
        "total_s": g["duration"].sum(),
        "hidden_s": g["hidden"].sum(),
        "exposed_s": g["exposed"].sum(),
        "other_s": g["other"].sum(),
    }).reset_index()
    out["hidden_frac"] = (out["hidden_s"] / out["total_s"]).where(out["total_s"] > 0, 0.0)
    return out


def _comm_events(r: Run, steps: StepRange, ranks: Iterable[int] | None, groups: Iterable[str] | None,
                 kinds: Iterable[str] | None) -> list[dict[str, Any]]:
    """The collectives of `r` chosen by steps, ranks, groups and kinds."""
    group_set = None if groups is None else set(groups)
    return [e for e in event_rows(r, steps, ranks, kinds)
            if is_comm(e["kind"], e.get("group")) and (group_set is None or e.get("group") in group_set)]


def comm_by_rank(run: RunLike, steps: StepRange = None, ranks: Iterable[int] | None = None,
                 groups: Iterable[str] | None = None, kinds: Iterable[str] | None = None) -> pd.DataFrame:
    """Per rank, the wall-clock time with at least one chosen collective in flight, split once.

    Columns: rank, comm_s, hidden_s, exposed_s, other_s (comm_s = hidden + exposed + other), work_s
    (all the rank's work in the run) and hidden_frac. `groups` / `kinds` choose the collectives
    (e.g. groups=["sync"] for the sync group alone).
    """
    r = as_run(run)
    tot = r.overlap.rank_totals(_comm_events(r, steps, ranks, groups, kinds))
    rows = [{"rank": k, **v, "work_s": r.overlap.work_s(k)} for k, v in sorted(tot.items())]
    cols = ["rank", "comm_s", "hidden_s", "exposed_s", "other_s", "work_s"]
    df = pd.DataFrame(rows, columns=cols)
    df["hidden_frac"] = (df["hidden_s"] / df["comm_s"]).where(df["comm_s"] > 0, 0.0)
    return df


def comm_totals(run: RunLike, steps: StepRange = None, ranks: Iterable[int] | None = None,
                groups: Iterable[str] | None = None, kinds: Iterable[str] | None = None) -> dict[str, float]:
    """`comm_by_rank` summed over ranks (rank-seconds, `Overlap.totals`): total_s (with communication in
    flight), hidden_s, exposed_s, other_s. No instant of any rank is counted twice."""
    r = as_run(run)
    return r.overlap.totals(_comm_events(r, steps, ranks, groups, kinds))


# ---------------------------------------------------------------------------------------- metrics
def metrics_table(run: RunLike) -> pd.DataFrame:
    """Training rows: step, replica, loss, tokens, t (seconds since the start at the end of the step), dt."""
    r = as_run(run)
    rows = [m for m in r.metrics if m["kind"] == "train"]
    cols = ["step", "replica", "loss", "tokens", "t", "dt"]
    return pd.DataFrame([{c: m.get(c) for c in cols} for m in rows], columns=cols)


def eval_table(run: RunLike) -> pd.DataFrame:
    """Validation rows in time order: step (the most any replica had reached), val_loss, its spread over the
    replicas, t (end of the eval on rank 0), at_s (the scheduled time of a timed validation, else NaN) and
    final (the validation after the last sync)."""
    r = as_run(run)
    # one eval span per evaluation on every rank; the span carries the training step it followed, the
    # metric the step count after it, so they are matched by order rather than by step
    times = sorted(e["t1"] for e in r.events if e["kind"] == "eval" and e["rank"] == 0)
    evals = [m for m in r.metrics if m["kind"] == "eval"]  # merge_metrics wrote them in the order they happened
    if len(times) != len(evals):
        times = [m.get("t") for m in evals]  # type: ignore[misc]
    rows = [{"step": m["step"], "val_loss": m["val_loss"], "val_loss_spread": m.get("val_loss_spread"), "t": t,
             "at_s": m.get("at_s", float("nan")), "final": bool(m.get("final", False))}
            for m, t in zip(evals, times)]
    return pd.DataFrame(rows, columns=["step", "val_loss", "val_loss_spread", "t", "at_s", "final"])


def penalty_table(run: RunLike) -> pd.DataFrame:
    """One row per sync, unit and replica: G, z, threshold, outlier, readmitted (D10), steps (the replica's local
    steps in the round), weight, clip, skipped, `peer` (G/k over the median of the other replicas' G/k, what
    the detector judges with `penalty_peers`, D11), `closing` (the closing sync of `finalize`, not judged), and
    `sync` (0, 1, …). Runs recorded before D10 lack readmitted and steps, before D11 peer and closing (NaN,
    False)."""
    r = as_run(run)
    cols = ["step", "sync", "unit", "replica", "G", "z", "threshold", "outlier", "readmitted", "steps", "weight",
            "clip", "skipped", "peer", "closing"]
    rows = [p for p in r.penalty if p.get("kind", "penalty") == "penalty"]
    if not rows:
        return pd.DataFrame(columns=cols)
    df = pd.DataFrame([{c: p.get(c) for c in cols if c != "sync"} for p in rows])
    for c in ("G", "z", "threshold", "weight", "clip", "steps", "peer"):
        df[c] = pd.to_numeric(df[c], errors="coerce")  # null (a non-finite value in JSON) -> NaN
    for c in ("outlier", "readmitted", "skipped", "closing"):
        df[c] = df[c].fillna(False).astype(bool)
    order = {s: i for i, s in enumerate(sorted(df["step"].unique()))}
    df["sync"] = df["step"].map(order)
    return df[cols].sort_values(["step", "unit", "replica"]).reset_index(drop=True)


def memory_table(run: RunLike) -> pd.DataFrame:
    """One row per rank: replica, shard and every byte count of summary.memory (params, optimizer, …)."""
    r = as_run(run)
    S = r.config.shards
    rows = []
    for rank, mem in sorted(r.summary.get("memory", {}).items(), key=lambda kv: int(kv[0])):
        rank = int(rank)
        replica, shard = coords(rank, S)
        rows.append({"rank": rank, "replica": replica, "shard": shard, **mem})
    return pd.DataFrame(rows)


# ---------------------------------------------------------------------------------------- replicas
def trained_steps(run: RunLike) -> dict[int, int]:
    """{replica: the end (exclusive) of its training steps}, the bound of every per-step table and figure.

    `cfg.steps` without a time budget. With one, `steps` is ignored (edit-method.md §12): each replica
    trained as many steps as fit, its own number (86 where the config says 40). Then the end is 1 + the
    replica's last training row in metrics.jsonl (a resumed run's carried rows included, so it counts from
    step 0, as the events do), or summary.json's per-replica `steps` for a run without training rows.
    """
    r = as_run(run)
    cfg = r.config
    if not cfg.time_budget:
        return {rep: cfg.steps for rep in range(cfg.replicas)}
    last: dict[int, int] = {}
    for m in r.metrics:
        if m["kind"] == "train":
            last[int(m["replica"])] = max(last.get(int(m["replica"]), -1), int(m["step"]))
    per = r.summary.get("per_replica", {})
    return {rep: last[rep] + 1 if rep in last else int(per.get(str(rep), {}).get("steps", 0))
            for rep in range(cfg.replicas)}


def replica_table(run: RunLike, from_step: int = 0) -> pd.DataFrame:
    """Per replica: tokens, steps, time, blocked time on the sync group, achieved and own-pace tokens/s.

    `blocked_s` is the time the replica stood blocked on the sync group during the training steps
    (`Overlap.replica_blocked_s`, the definition behind summary.json's `sync_wait_s` too, which counts
    the whole run): time spent waiting for the other replicas or the slow link. `own_tokens_per_s` is what the
    replica would do without that time; their sum is the capacity bound.

    `from_step` > 0 counts only steps ≥ from_step, timed from the end of the replica's step
    from_step − 1: the steady state after a warm-up, whose synchronous steps hold every replica to
    the slowest one's pace whatever the method.
    """
    r = as_run(run)
    cfg = r.config
    m = metrics_table(r)
    summ = r.summary.get("per_replica", {})
    # warm-up, and the final sync and eval after training, are left out; with a time budget each replica
    # trained its own number of steps
    end = trained_steps(r)
    training = [e for e in r.events if from_step <= e["step"] < end[e["replica"]]]
    blocked = r.overlap.replica_blocked_s(training, cfg.shards)
    straggle: dict[int, float] = {}
    for e in training:
        if e["kind"] == "straggle":  # mean over the replica's ranks
            rep = coords(e["rank"], cfg.shards)[0]
            straggle[rep] = straggle.get(rep, 0.0) + (e["t1"] - e["t0"]) / cfg.shards
    rows = []
    for rep in range(cfg.replicas):
        mine = m[m["replica"] == rep]
        before = mine[mine["step"] < from_step]
        start = float(before["t"].max()) if from_step > 0 and len(before) else 0.0
        mine = mine[mine["step"] >= from_step]
        tokens = int(mine["tokens"].sum()) if len(mine) else 0
        span = float(mine["t"].max()) - start if len(mine) else 0.0
        b, st = blocked.get(rep, 0.0), straggle.get(rep, 0.0)
        busy = max(span - b, 1e-12)
        rows.append({
            "replica": rep, "tokens": tokens, "steps": int(len(mine)), "time_s": span,
            "tokens_per_s": tokens / span if span > 0 else 0.0,
            "blocked_s": b, "straggle_s": st,
            "sync_wait_s": float(summ.get(str(rep), {}).get("sync_wait_s", 0.0)),
            "own_tokens_per_s": tokens / busy if span > 0 else 0.0,
        })
    return pd.DataFrame(rows)


def capacity_bound(run: RunLike, from_step: int = 0) -> float:
    """Tokens/s of all replicas together if none ever waited on the sync group (sum of own paces)."""
    t = replica_table(run, from_step)
    return float(t["own_tokens_per_s"].sum()) if len(t) else 0.0


def budget_table(runs: dict[str, RunLike]) -> pd.DataFrame:
    """What each run made of its time (time-budget runs, edit-method.md §12), one row per run:

    - `val_loss`: validation loss of the agreed model after the final sync (the run's last validation);
    - `train_end_s`: when the final sync ended; `tokens`: every replica's tokens, every step;
    - `steps`: each replica's step count; `fast_step_share`: replica 0's share of all steps;
    - `fast_weight`: replica 0's mean aggregation weight over the syncs and units (EDiT and A-EDiT:
      the penalty's softmax, mixed with the step shares when step weighting is on; NaN otherwise).
      Far below `fast_step_share`, replica 0's extra steps barely reach the model;
    - `discarded_tokens`: tokens of the rounds the anomaly filter rejected (a flagged replica and unit
      counts its whole round once per unit, divided by the number of units).
    """
    rows = []
    for name, run in runs.items():
        r = as_run(run)
        s, cfg = r.summary, r.config
        steps = [int(v["steps"]) for _, v in sorted(s["per_replica"].items(), key=lambda kv: int(kv[0]))]
        pen = r.penalty
        weights = [p["weight"] for p in pen if p["replica"] == 0]
        tokens_per_step = cfg.shards * cfg.data.batch_size * cfg.data.seq_len
        discarded = 0.0
        if pen:
            units = len({p["unit"] for p in pen})
            # the round a sync at step s judged is the one that ended at s
            ended = {(int(x.replica), int(x.end_step)): int(x.local_steps) for x in rounds_table(r).itertuples()}
            for p in pen:
                if p["outlier"]:
                    k = ended.get((p["replica"], p["step"]), cfg.schedule.sync_interval)
                    discarded += k * tokens_per_step / units
        rows.append({"run": name, "val_loss": s.get("final_val_loss"), "train_end_s": s.get("train_end_s"),
                     "tokens": s["tokens"], "steps": steps,
                     "fast_step_share": steps[0] / sum(steps) if sum(steps) else float("nan"),
                     "fast_weight": sum(weights) / len(weights) if weights else float("nan"),
                     "discarded_tokens": discarded})
    return pd.DataFrame(rows).set_index("run")


def rounds_table(run: RunLike) -> pd.DataFrame:
    """Local steps per round and replica: the steps each replica trained between two agreements.

    Uses `summary.method_info["local_steps_per_round"]` when the method reports it (A-EDiT: a list per
    round of per-replica counts, counted from the end of warm-up). Otherwise derives rounds from the
    run: every step
    with a cross-replica gradient all-reduce is a round of one step, every model sync recorded
    in syncs.jsonl (or an anchor creation) closes a round, and the run's closing sync closes the last
    one at the replica's own end (`trained_steps`: with a time budget the steps it trained, not
    `cfg.steps`). Columns: replica, round, start_step, end_step (exclusive), local_steps.
    """
    r = as_run(run)
    cols = ["replica", "round", "start_step", "end_step", "local_steps"]
    info = r.summary.get("method_info") or {}
    ls = info.get("local_steps_per_round")
    rows: list[dict[str, Any]] = []
    if ls:
        per_rep: dict[int, list[int]] = {}
        for counts in ls:
            for rep, k in enumerate(counts):
                per_rep.setdefault(rep, []).append(int(k))
        for rep, counts in sorted(per_rep.items()):
            start = r.config.schedule.warmup_steps  # rounds of local steps begin with the anchors, after warm-up
            for i, k in enumerate(counts):
                rows.append({"replica": rep, "round": i, "start_step": start, "end_step": start + k, "local_steps": k})
                start += k
        return pd.DataFrame(rows, columns=cols)
    cfg = r.config
    shared = {int(s["step"]) for s in r.syncs if s.get("kind") in ("sync", "anchor")}
    ends = trained_steps(r)
    for rep in range(cfg.replicas):
        rank = rep * cfg.shards
        bounds = set(shared)
        bounds |= {e["step"] + 1 for e in r.events if e["rank"] == rank and e["kind"] == "grad_all_reduce"}
        bounds = sorted(b for b in bounds | {0, ends[rep]} if 0 <= b <= ends[rep])
        for i, (a, b) in enumerate(zip(bounds, bounds[1:])):
            rows.append({"replica": rep, "round": i, "start_step": a, "end_step": b, "local_steps": b - a})
    return pd.DataFrame(rows, columns=cols)


def sync_window(run: RunLike) -> tuple[int, int]:
    """Two steps worth looking at on a timeline: the step before the first sync and the sync step itself
    (where the sync traffic and its overlap are), or steps 1–2 when the method never syncs (step 0
    also pays one-off start-up costs)."""
    r = as_run(run)
    steps = max(trained_steps(r).values(), default=0)
    syncs = sorted(int(s["step"]) for s in r.syncs if s.get("kind") == "sync" and int(s["step"]) < steps)
    if syncs:
        return max(syncs[0] - 1, 0), syncs[0]
    lo = 1 if steps > 2 else 0
    return lo, max(min(lo + 1, steps - 1), lo)


# ---------------------------------------------------------------------------------------- several runs
def run_label(run: RunLike) -> str:
    """A short name for legends: method and mesh, plus the notable knobs (prefetch off, stragglers)."""
    r = as_run(run)
    c = r.config
    caps = capabilities(c.method)
    bits = [f"{c.method} {c.shards}×{c.replicas}"]
    if caps.time_triggered:
        bits.append(f"T_sync {c.aedit.sync_period:.3g} s")
    if caps.layerwise_sync and not c.schedule.prefetch:
        bits.append("no prefetch")
    if c.stragglers.replicas and c.stragglers.factor > 1:
        bits.append(f"slow ×{c.stragglers.factor:g}")
    if c.stragglers.random_pause_prob > 0 and c.stragglers.random_pause_ms > 0:
        bits.append(f"pauses {c.stragglers.random_pause_prob:g}·{c.stragglers.random_pause_ms:g} ms")
    return ", ".join(bits)


def run_labels(runs: Sequence[RunLike], labels: Sequence[str] | None = None) -> list[str]:
    """Unique labels for several runs (the run directory's name is added where labels would clash)."""
    if labels is not None:
        if len(labels) != len(runs):
            raise ValueError(f"got {len(labels)} labels for {len(runs)} runs")
        return list(labels)
    base = [run_label(r) for r in runs]
    out = []
    for r, b in zip(runs, base):
        out.append(b if base.count(b) == 1 else f"{b} [{as_run(r).path.name}]")
    return out


def as_runs(runs: RunLike | Sequence[RunLike]) -> list[Run]:
    if isinstance(runs, (Run, str, Path)):
        return [as_run(runs)]
    return [as_run(r) for r in runs]


def compare(runs: RunLike | Sequence[RunLike], labels: Sequence[str] | None = None) -> pd.DataFrame:
    """One row per run: what it was and what it achieved (loss, throughput against its capacity, traffic)."""
    rs = as_runs(runs)
    names = run_labels(rs, labels)
    rows = []
    for name, r in zip(names, rs):
        s, c = r.summary, r.config
        comm = comm_totals(r)
        cap = capacity_bound(r)
        sync_bytes = sync_group_bytes(r.events, rank=0)
        rows.append({
            "label": name, "method": c.method, "shards": c.shards, "replicas": c.replicas, "steps": c.steps,
            "tokens": s.get("tokens"), "wall_s": s.get("wall_s"), "tokens_per_s": s.get("tokens_per_s"),
            "capacity_tokens_per_s": cap,
            "efficiency": (s.get("tokens_per_s") or 0.0) / cap if cap > 0 else float("nan"),
            "final_train_loss": s.get("final_train_loss"), "final_val_loss": s.get("final_val_loss"),
            "comm_s": comm["total_s"], "hidden_s": comm["hidden_s"], "exposed_s": comm["exposed_s"],
            "other_s": comm["other_s"],
            "sync_bytes_rank0": sync_bytes, "syncs": sum(1 for x in r.syncs if x.get("kind") == "sync"),
            "path": str(r.path),
        })
    return pd.DataFrame(rows)
