"""Tidy tables of a run: the one layer between a run directory and every figure, report or notebook cell.

Why tables and not figures straight from the JSON: a reader can print the very numbers a figure
draws (`comm_split(run)` next to the timeline), tests can assert on them, and several runs compare
by concatenating rows. Every function takes a `Run`, a run directory or a path, and returns a
`pandas.DataFrame` with one row per thing (event, step, penalty decision, replica, rank, run).

Two quantities need a definition:

- **hidden / exposed communication.** Every collective is recorded from issue to completion
  (`t0`..`t1`) with `data.exposed`, the seconds its rank stood blocked by it. A blocking collective
  is exposed for its whole duration; an asynchronous one (prefetch, reduce-scatter in the backward)
  only for the `wait` at the end. `exposed` here is that value clipped to the duration and
  `hidden = duration − exposed`: the part that travelled while the rank computed. So
  `hidden + exposed = duration` for every collective, and the sums over any grouping add up too.
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

from .run import Run

RunLike = Union[Run, str, Path]
StepRange = Union[int, tuple[int, int], None]

#: Collectives that make the replicas agree on the model (a "sync" in the paper's sense).
MODEL_SYNC_KINDS = ("sync_reduce", "param_average", "co2_reduce")

EVENT_COLUMNS = ["rank", "replica", "shard", "step", "unit", "kind", "t0", "t1", "duration", "bytes", "group",
                 "comm", "overlapped", "exposed", "hidden", "part", "on", "reason", "data"]


def as_run(run: RunLike) -> Run:
    """A Run from a Run, a run directory or its path."""
    return run if isinstance(run, Run) else Run(run)


def is_comm(kind: str, group: str | None) -> bool:
    """True for a collective (it has a group); a `wait` is the rank blocked on one, not a collective."""
    return group is not None and kind != "wait"


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


def split_exposed(ev: dict[str, Any]) -> tuple[float, float]:
    """(exposed, hidden) seconds of one event; (0, 0) for anything that is not a collective.

    A collective recorded without `data.exposed` (older runs) counts as blocking: fully exposed.
    """
    if not is_comm(ev["kind"], ev.get("group")):
        return 0.0, 0.0
    dur = max(ev["t1"] - ev["t0"], 0.0)
    raw = (ev.get("data") or {}).get("exposed")
    exposed = dur if raw is None else min(max(float(raw), 0.0), dur)
    return exposed, dur - exposed


def events_table(run: RunLike, steps: StepRange = None, ranks: Iterable[int] | None = None,
                 kinds: Iterable[str] | None = None) -> pd.DataFrame:
    """One row per event: the schema of events.py plus duration, comm, exposed, hidden and a few data fields."""
    rows = []
    for e in event_rows(run, steps, ranks, kinds):
        data = e.get("data") or {}
        exposed, hidden = split_exposed(e)
        rows.append({
            "rank": e["rank"], "replica": e["replica"], "shard": e["shard"], "step": e["step"],
            "unit": e.get("unit"), "kind": e["kind"], "t0": e["t0"], "t1": e["t1"],
            "duration": max(e["t1"] - e["t0"], 0.0), "bytes": int(e.get("bytes") or 0), "group": e.get("group"),
            "comm": is_comm(e["kind"], e.get("group")), "overlapped": bool(data.get("overlapped", False)),
            "exposed": exposed, "hidden": hidden, "part": data.get("part"), "on": data.get("on"),
            "reason": data.get("reason"), "data": data,
        })
    df = pd.DataFrame(rows, columns=EVENT_COLUMNS)
    df["unit"] = df["unit"].astype("Int64")
    return df


def comm_split(run: RunLike, by: Sequence[str] = ("rank", "kind"), steps: StepRange = None,
               ranks: Iterable[int] | None = None) -> pd.DataFrame:
    """Communication time per group of `by` (any event columns): count, bytes, total, hidden, exposed seconds.

    `hidden_frac` is the share of the communication time that was hidden under compute.
    """
    df = events_table(run, steps, ranks)
    df = df[df["comm"]]
    cols = ["count", "bytes", "total_s", "hidden_s", "exposed_s", "hidden_frac"]
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
    }).reset_index()
    out["hidden_frac"] = (out["hidden_s"] / out["total_s"]).where(out["total_s"] > 0, 0.0)
    return out


def comm_totals(run: RunLike, steps: StepRange = None, ranks: Iterable[int] | None = None) -> dict[str, float]:
    """Total, hidden and exposed communication seconds summed over the chosen ranks and steps."""
    total = hidden = exposed = 0.0
    for e in event_rows(run, steps, ranks):
        if is_comm(e["kind"], e.get("group")):
            ex, hi = split_exposed(e)
            total += max(e["t1"] - e["t0"], 0.0)
            hidden += hi
            exposed += ex
    return {"total_s": total, "hidden_s": hidden, "exposed_s": exposed}


# ---------------------------------------------------------------------------------------- metrics
def metrics_table(run: RunLike) -> pd.DataFrame:
    """Training rows: step, replica, loss, tokens, t (seconds since the start at the end of the step), dt."""
    r = as_run(run)
    rows = [m for m in r.metrics if m["kind"] == "train"]
    cols = ["step", "replica", "loss", "tokens", "t", "dt"]
    return pd.DataFrame([{c: m.get(c) for c in cols} for m in rows], columns=cols)


def eval_table(run: RunLike) -> pd.DataFrame:
    """Validation rows: step, val_loss, spread over replicas, and t (end of the eval on rank 0, if recorded)."""
    r = as_run(run)
    # one eval span per evaluation on every rank; the span carries the training step it followed, the
    # metric the step count after it, so they are matched by order rather than by step
    times = sorted(e["t1"] for e in r.events if e["kind"] == "eval" and e["rank"] == 0)
    evals = sorted((m for m in r.metrics if m["kind"] == "eval"), key=lambda m: m["step"])
    if len(times) != len(evals):
        times = [None] * len(evals)  # type: ignore[list-item]
    rows = [{"step": m["step"], "val_loss": m["val_loss"], "val_loss_spread": m.get("val_loss_spread"), "t": t}
            for m, t in zip(evals, times)]
    return pd.DataFrame(rows, columns=["step", "val_loss", "val_loss_spread", "t"])


def penalty_table(run: RunLike) -> pd.DataFrame:
    """One row per sync, unit and replica: G, z, threshold, outlier, weight, clip, skipped, and `sync` (0, 1, …)."""
    r = as_run(run)
    cols = ["step", "sync", "unit", "replica", "G", "z", "threshold", "outlier", "weight", "clip", "skipped"]
    rows = [p for p in r.penalty if p.get("kind", "penalty") == "penalty"]
    if not rows:
        return pd.DataFrame(columns=cols)
    df = pd.DataFrame([{c: p.get(c) for c in cols if c != "sync"} for p in rows])
    for c in ("G", "z", "threshold", "weight", "clip"):
        df[c] = pd.to_numeric(df[c], errors="coerce")  # null (a non-finite value in JSON) -> NaN
    for c in ("outlier", "skipped"):
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
        rows.append({"rank": rank, "replica": rank // S, "shard": rank % S, **mem})
    return pd.DataFrame(rows)


# ---------------------------------------------------------------------------------------- replicas
def replica_table(run: RunLike, from_step: int = 0) -> pd.DataFrame:
    """Per replica: tokens, steps, time, blocked time on the sync group, achieved and own-pace tokens/s.

    `blocked_s` is the exposed sync-group communication of training steps (mean over the replica's
    ranks): time spent waiting for the other replicas or the slow link. `own_tokens_per_s` is what the
    replica would do without that time; their sum is the capacity bound.

    `from_step` > 0 counts only steps ≥ from_step, timed from the end of the replica's step
    from_step − 1: the steady state after a warm-up, whose synchronous steps hold every replica to
    the slowest one's pace whatever the method.
    """
    r = as_run(run)
    cfg = r.config
    m = metrics_table(r)
    blocked: dict[int, list[float]] = {}
    straggle: dict[int, list[float]] = {}
    per_rank_blocked: dict[int, float] = {rank: 0.0 for rank in range(cfg.world_size)}
    per_rank_straggle: dict[int, float] = {rank: 0.0 for rank in range(cfg.world_size)}
    for e in r.events:
        if not from_step <= e["step"] < cfg.steps:
            continue  # warm-up, or the final sync and eval after training
        if e.get("group") in ("sync", "world") and e["kind"] != "wait":
            per_rank_blocked[e["rank"]] += split_exposed(e)[0]
        elif e["kind"] == "straggle":
            per_rank_straggle[e["rank"]] += e["t1"] - e["t0"]
    for rank in range(cfg.world_size):
        blocked.setdefault(rank // cfg.shards, []).append(per_rank_blocked[rank])
        straggle.setdefault(rank // cfg.shards, []).append(per_rank_straggle[rank])
    summ = r.summary.get("per_replica", {})
    rows = []
    for rep in range(cfg.replicas):
        mine = m[m["replica"] == rep]
        before = mine[mine["step"] < from_step]
        start = float(before["t"].max()) if from_step > 0 and len(before) else 0.0
        mine = mine[mine["step"] >= from_step]
        tokens = int(mine["tokens"].sum()) if len(mine) else 0
        span = float(mine["t"].max()) - start if len(mine) else 0.0
        b = sum(blocked.get(rep, [0.0])) / max(len(blocked.get(rep, [])), 1)
        st = sum(straggle.get(rep, [0.0])) / max(len(straggle.get(rep, [])), 1)
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


def rounds_table(run: RunLike) -> pd.DataFrame:
    """Local steps per round and replica: the steps each replica trained between two agreements.

    Uses `summary.method_info["local_steps"]` (or `"local_steps_per_round"`, A-EDiT's) when the method
    reports it: a list per round of per-replica counts, or {replica: [counts]}, counted from the end of
    warm-up. Otherwise derives rounds from the run: every step
    with a cross-replica gradient all-reduce is a round of one step, and every model sync recorded
    in syncs.jsonl (or an anchor creation) closes a round. Columns: replica, round, start_step,
    end_step (exclusive), local_steps.
    """
    r = as_run(run)
    cols = ["replica", "round", "start_step", "end_step", "local_steps"]
    info = r.summary.get("method_info") or {}
    ls = info.get("local_steps") or info.get("local_steps_per_round")
    rows: list[dict[str, Any]] = []
    if ls:
        per_rep: dict[int, list[int]] = {}
        if isinstance(ls, dict):
            per_rep = {int(k): [int(x) for x in v] for k, v in ls.items()}
        else:
            for counts in ls:
                for rep, k in enumerate(counts if isinstance(counts, (list, tuple)) else [counts]):
                    per_rep.setdefault(rep, []).append(int(k))
        for rep, counts in sorted(per_rep.items()):
            start = r.config.warmup_steps  # rounds of local steps begin with the anchors, after warm-up
            for i, k in enumerate(counts):
                rows.append({"replica": rep, "round": i, "start_step": start, "end_step": start + k, "local_steps": k})
                start += k
        return pd.DataFrame(rows, columns=cols)
    cfg = r.config
    shared = {int(s["step"]) for s in r.syncs if s.get("kind") in ("sync", "anchor")}
    for rep in range(cfg.replicas):
        rank = rep * cfg.shards
        bounds = set(shared)
        bounds |= {e["step"] + 1 for e in r.events if e["rank"] == rank and e["kind"] == "grad_all_reduce"}
        bounds = sorted(b for b in bounds | {0} if 0 <= b <= cfg.steps)
        for i, (a, b) in enumerate(zip(bounds, bounds[1:])):
            rows.append({"replica": rep, "round": i, "start_step": a, "end_step": b, "local_steps": b - a})
    return pd.DataFrame(rows, columns=cols)


def sync_window(run: RunLike) -> tuple[int, int]:
    """Two steps worth looking at on a timeline: the step before the first sync and the sync step itself
    (where the sync traffic and its overlap are), or steps 1–2 when the method never syncs (step 0
    also pays one-off start-up costs)."""
    r = as_run(run)
    steps = r.config.steps
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
    bits = [f"{c.method} {c.shards}×{c.replicas}"]
    if c.method == "aedit":
        bits.append(f"T_sync {c.sync_period:.3g} s")
    if c.method in ("edit", "aedit") and not c.prefetch:
        bits.append("no prefetch")
    if c.straggler_replicas and c.straggler_factor > 1:
        bits.append(f"slow ×{c.straggler_factor:g}")
    if c.random_pause_prob > 0 and c.random_pause_ms > 0:
        bits.append(f"pauses {c.random_pause_prob:g}·{c.random_pause_ms:g} ms")
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
        sync_bytes = sum(e["bytes"] for e in r.events if e["rank"] == 0 and e.get("group") == "sync"
                         and e["kind"] != "wait")
        rows.append({
            "label": name, "method": c.method, "shards": c.shards, "replicas": c.replicas, "steps": c.steps,
            "tokens": s.get("tokens"), "wall_s": s.get("wall_s"), "tokens_per_s": s.get("tokens_per_s"),
            "capacity_tokens_per_s": cap,
            "efficiency": (s.get("tokens_per_s") or 0.0) / cap if cap > 0 else float("nan"),
            "final_train_loss": s.get("final_train_loss"), "final_val_loss": s.get("final_val_loss"),
            "comm_s": comm["total_s"], "hidden_s": comm["hidden_s"], "exposed_s": comm["exposed_s"],
            "sync_bytes_rank0": sync_bytes, "syncs": sum(1 for x in r.syncs if x.get("kind") == "sync"),
            "path": str(r.path),
        })
    return pd.DataFrame(rows)
