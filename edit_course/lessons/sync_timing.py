"""What one sync costs a rank: the per-sync timings of notebook 04 (layer-wise sync and prefetch).

Every number here is read from a run's recorded events and split by the one definition of overlap
(`overlap.py`, through `analysis.py`): of a collective's time in flight, **hidden** is what the same
rank spent computing, **exposed** what it spent waiting on that very collective, **other** what it
spent waiting on another one. Nothing is re-derived here; this module only chooses *which* events
make up "one sync" and which rank to look at, and gives each choice a name.

Which syncs count (`training_syncs`): the syncs after warm-up that belong to a training step, i.e.
whose events carry a step below `config.steps`. The closing sync at the end of training is left out
where it is logged after the last step: EDiT's runs in the forward of step `steps`, a step that is
never trained, so nothing could hide it. DiLoCo syncs after its optimizer step, so the matching sync
is logged under step `steps − 1` and stays in: with τ dividing the steps after warm-up, DiLoCo
counts one sync more than EDiT (4 against 3 for 20 steps, W = 4, τ = 4). Every per-sync number
below is a median, so the counts do not weigh on it.

Milliseconds everywhere (the scale of one sync on the lab's links); `syncs` counts the syncs a
median was taken over.
"""

from __future__ import annotations

from typing import Any

import pandas as pd

from edit_lab.records.analysis import RunLike, as_run, comm_by_rank, comm_split, events_table

#: The sync-group collectives of one sync: EDiT's decisions exchange (the penalty's norms and flags,
#: once per sync) and its per-unit transfers; DiLoCo has only the second, one whole-model all-reduce.
SYNC_KINDS = ("sync_decisions", "sync_reduce")

#: How `exposed_parts` names what a rank waited on at a sync.
PARTS = ("decisions exchange", "unit 0", "unit 1", "units 2…")


def training_syncs(run: RunLike) -> list[int]:
    """The steps at which the replicas synced during training: warm-up < step < steps (see the module
    docstring for why the closing sync is in for DiLoCo and out for EDiT)."""
    r = as_run(run)
    cfg = r.config
    return sorted({int(e["step"]) for e in r.events
                   if e["kind"] == "sync_reduce" and cfg.schedule.warmup_steps < int(e["step"]) < cfg.steps})


def unit_order(run: RunLike, step: int, rank: int = 0) -> pd.DataFrame:
    """One row per unit of the sync at `step` on `rank`: the order that makes layer-wise sync work.

    Columns: *sync issued* / *sync done* (the unit's `sync_reduce`), *all-gather starts* and *forward
    starts* (its first all-gather and forward of that step), all in ms from the first issue of the step;
    *sync done before all-gather* (EDiT's rule: a unit is gathered only after its outer step, so every
    shard group gathers the freshly synced parameters); *bytes sent* (this rank's shard of the unit);
    *exposed (ms)* (how long the rank stood blocked on this unit's transfer). Rounded to 0.01 ms.
    """
    ev = events_table(run, steps=step, ranks=[rank])
    sync = ev[ev["kind"] == "sync_reduce"].set_index("unit").sort_index()

    def first(kind: str) -> pd.Series:
        return ev[ev["kind"] == kind].groupby("unit")["t0"].min()

    t = pd.DataFrame({"sync issued": sync["t0"], "sync done": sync["t1"],
                      "all-gather starts": first("all_gather"), "forward starts": first("compute_fwd")})
    t = (t - t["sync issued"].min()) * 1e3
    t["sync done before all-gather"] = sync["t1"] <= first("all_gather")
    t["bytes sent"] = sync["bytes"]
    t["exposed (ms)"] = sync["exposed"] * 1e3
    t.index.name = "unit"
    return t.round(2)


def sync_group_split(run: RunLike) -> pd.DataFrame:
    """`comm_split` of the sync-group collectives of the training steps (steps 0 … steps − 1), summed over
    the ranks, one row per kind: count, bytes, total_s, hidden_s, exposed_s, other_s, hidden_frac (seconds).

    Each collective counts its own split, so two prefetched transfers in flight together both count an
    instant they share: the right reading of "how much of the transfers was hidden", not of a rank's time.
    """
    r = as_run(run)
    t = comm_split(r, by=("group", "kind"), steps=(0, r.config.steps - 1))
    return t[t["group"] == "sync"].drop(columns="group").set_index("kind")


def per_sync_ms(run: RunLike) -> dict[str, float]:
    """One sync's `sync_reduce` time on one rank (ms), as a median over the training syncs and the ranks.

    comm: the time with at least one `sync_reduce` in flight (each instant once, prefetched transfers
    overlap each other); hidden / exposed / other: its split (comm = hidden + exposed + other). The decisions
    exchange is left out: this is what prefetch acts on. A median, so that one sync slowed down by a busy
    machine does not decide. Plus `syncs`, the number of training syncs.
    """
    r = as_run(run)
    syncs = training_syncs(r)
    if not syncs:
        return {"comm": 0.0, "hidden": 0.0, "exposed": 0.0, "other": 0.0, "syncs": 0}
    per = pd.concat([comm_by_rank(r, steps=s, kinds=["sync_reduce"]) for s in syncs])
    return {part: 1e3 * float(per[f"{part}_s"].median()) for part in ("comm", "hidden", "exposed", "other")} | {
        "syncs": len(syncs)}


def link_ms_per_sync(run: RunLike, rank: int = 0) -> float:
    """The link time of one sync (ms): Σ over `rank`'s `sync_reduce` transfers of its first sync of
    latency + bytes / bandwidth, on the link the run simulated (`comm.LinkModel`, one transfer at a time).

    What a rank would wait for if nothing were hidden and collectives cost nothing else: EDiT pays one
    latency per unit, DiLoCo one for its single message. The decisions exchange is not counted. 0 when the
    run has no simulated link or never synced.
    """
    from edit_lab.core.comm import LinkModel  # comm imports torch: only when a link is asked for

    r = as_run(run)
    cfg = r.config
    ev = [e for e in r.events if e["rank"] == rank and e["kind"] == "sync_reduce"]
    if not ev:
        return 0.0
    first = min(e["step"] for e in ev)
    link = LinkModel.of(cfg.link.latency_ms, cfg.link.bandwidth_mb_s)
    return 1e3 * float(sum(link.transfer_time(int(e.get("bytes") or 0)) for e in ev if e["step"] == first))


def last_to_arrive(run: RunLike) -> dict[int, tuple[int, float]]:
    """Per training sync: (the rank that reached it last, the arrival skew in seconds).

    A rank reaches a sync when its first sync-group collective of that step starts. The ranks that arrive
    earlier wait in the sync for the last one: that wait (the arrival skew, last − first arrival) is the
    cost of a slower replica (notebook 06), not of the sync, so the sync's own cost is read on the rank
    that arrived last. Ties go to the lowest rank.
    """
    ev = events_table(run, kinds=SYNC_KINDS)
    out: dict[int, tuple[int, float]] = {}
    for step in training_syncs(run):
        arrive = ev[ev["step"] == step].groupby("rank")["t0"].min()
        out[step] = (int(arrive.idxmax()), float(arrive.max() - arrive.min()))
    return out


def per_sync_group_ms(run: RunLike) -> dict[str, float]:
    """One sync's cost on the sync group, on the rank that arrived last, medians over the training syncs.

    `hidden ms` / `exposed ms` / `other ms`: the split of the time with any sync-group collective in flight
    (decisions exchange included, each instant once); `link ms`: `link_ms_per_sync`; `arrival skew ms`: how
    much earlier the first rank had arrived (not part of the sync's cost, see `last_to_arrive`); `syncs`.
    """
    r = as_run(run)
    last = last_to_arrive(r)
    if not last:
        return {"link ms": link_ms_per_sync(r), "hidden ms": 0.0, "exposed ms": 0.0, "other ms": 0.0,
                "arrival skew ms": 0.0, "syncs": 0}
    per = pd.DataFrame([comm_by_rank(r, steps=s, ranks=[rank], groups=["sync"]).iloc[0]
                        for s, (rank, _) in last.items()])
    return {"link ms": link_ms_per_sync(r),
            **{f"{part} ms": 1e3 * float(per[f"{part}_s"].median()) for part in ("hidden", "exposed", "other")},
            "arrival skew ms": 1e3 * float(pd.Series([skew for _, skew in last.values()]).median()),
            "syncs": len(last)}


def exposed_parts(run: RunLike) -> dict[str, Any]:
    """EDiT's exposed sync-group time of one sync, by what the rank waited on (ms, the rank that arrived
    last, medians over the training syncs): the decisions exchange, unit 0 (nothing computes before it),
    unit 1 (queued behind unit 0 with only the embedding lookup in front of it) and units 2… (each under
    the previous block's forward).

    Plus `latencies per sync`: the sync-group collectives of one sync, one after the other on the link, so
    one link latency each on the rank's critical path (EDiT: 1 + units; DiLoCo: 1). The median over the syncs.
    """
    rows, counts = [], []
    for step, (rank, _) in last_to_arrive(run).items():
        ev = events_table(run, steps=step, ranks=[rank], kinds=SYNC_KINDS)
        unit = ev["unit"].fillna(-1).astype(int)
        part = [PARTS[0] if k == "sync_decisions" else PARTS[1] if u == 0 else PARTS[2] if u == 1 else PARTS[3]
                for k, u in zip(ev["kind"], unit)]
        rows.append(ev.assign(part=part).groupby("part")["exposed"].sum() * 1e3)
        counts.append(len(ev))
    med = pd.DataFrame(rows).fillna(0.0).median().to_dict() if rows else {}
    return {p: float(med.get(p, 0.0)) for p in PARTS} | {
        "latencies per sync": int(pd.Series(counts).median()) if counts else 0}


#: How `wait_parts` names what a rank's exposed `sync_reduce` time was made of.
WAIT_PARTS = ("link ms", "peer later ms", "rest ms")


def _wait_rows(r: Any, steps: set[int]) -> list[tuple[int, int, int, float, float, float]]:
    """(step, rank, unit, exposed, peer later, link charge) in seconds for every `sync_reduce` at `steps`
    (`wait_parts` says what each part is); exposed as `overlap.py` defines it, through `events_table`."""
    from edit_lab.core.comm import LinkModel

    cfg = r.config
    link = LinkModel.of(cfg.link.latency_ms, cfg.link.bandwidth_mb_s)
    out = []
    for step in sorted(steps):
        ev = events_table(r, steps=step, kinds=["sync_reduce"])
        issued = {(int(e.unit), int(e.shard), int(e.replica)): float(e.t0) for e in ev.itertuples()}
        for e in ev.itertuples():
            peers = [t for (u, sh, rep), t in issued.items() if u == e.unit and sh == e.shard and rep != e.replica]
            exposed = float(e.exposed)
            later = min(max(max(peers, default=float(e.t0)) - float(e.t0), 0.0), exposed)
            charged = min(link.transfer_time(int(e.bytes or 0)), exposed - later)
            out.append((step, int(e.rank), int(e.unit), exposed, later, charged))
    return out


def wait_parts(run: RunLike) -> dict[str, float]:
    """What a rank's exposed `sync_reduce` time of one sync is made of (ms, medians over the training syncs and the
    ranks): the part `link_ms_per_sync` accounts for and the two it does not.

    A unit's all-reduce starts only once its peer in the sync group (the same shard of the other replica) has
    issued it too, and the simulated link charges its transfer from that moment (`comm.LinkModel`). So of a
    unit's exposed time:

    - `peer later ms`: how much later than this rank the peer issued the unit's transfer (0 when this rank was
      the later one), at most the exposed time: arrival skew repeated unit by unit, which a core shared by
      two ranks, or a peer still computing its previous unit, makes long;
    - `link ms`: the link's charge for the transfer (latency + bytes / bandwidth), at most what is left;
    - `rest ms`: what remains: the collective's own cost (gloo's reduction, a thread waking up).

    Summed over the units of one sync on one rank. Without prefetch every unit's transfer is exposed in full, so
    these add up to the whole wait; with prefetch most of each is hidden, and the parts bound what was left.
    """
    r = as_run(run)
    rows: dict[tuple[int, int], list[float]] = {}
    for step, rank, _, exposed, later, charged in _wait_rows(r, set(training_syncs(r))):
        acc = rows.setdefault((step, rank), [0.0, 0.0, 0.0])
        acc[0] += charged
        acc[1] += later
        acc[2] += exposed - later - charged
    if not rows:
        return {p: 0.0 for p in WAIT_PARTS}
    per = pd.DataFrame(list(rows.values()), columns=list(WAIT_PARTS)) * 1e3
    return {p: float(per[p].median()) for p in WAIT_PARTS}


def median_sync_parts(run: RunLike) -> dict[str, float]:
    """The parts of one sync that add up: of the training syncs × ranks, the one whose exposed `sync_reduce` time is
    the median (the lower of the two middle ones when their number is even), with its "exposed ms" and
    `WAIT_PARTS` (link + peer later + rest = exposed), its "step" and "rank". `wait_parts` takes each part's own
    median instead, so its parts need not add up. Zeros when the run never synced."""
    r = as_run(run)
    rows: dict[tuple[int, int], list[float]] = {}
    for step, rank, _, exposed, later, charged in _wait_rows(r, set(training_syncs(r))):
        acc = rows.setdefault((step, rank), [0.0, 0.0, 0.0, 0.0])
        acc[0] += exposed
        acc[1] += charged
        acc[2] += later
        acc[3] += exposed - later - charged
    if not rows:
        return {"exposed ms": 0.0, **{p: 0.0 for p in WAIT_PARTS}, "step": -1, "rank": -1}
    ordered = sorted(rows.items(), key=lambda kv: (kv[1][0], kv[0]))
    (step, rank), (exposed, link, later, rest) = ordered[(len(ordered) - 1) // 2]
    return {"exposed ms": 1e3 * exposed, "link ms": 1e3 * link, "peer later ms": 1e3 * later, "rest ms": 1e3 * rest,
            "step": step, "rank": rank}


def unit_waits(run: RunLike, step: int, rank: int = 0) -> pd.DataFrame:
    """`wait_parts` unit by unit for the sync at `step` on `rank` (ms): exposed, and of it how much the peer came
    later, what the link charged, and the rest. One row per unit."""
    rows = [(u, exposed, later, charged, exposed - later - charged)
            for s, rk, u, exposed, later, charged in _wait_rows(as_run(run), {step}) if rk == rank]
    t = pd.DataFrame(rows, columns=["unit", "exposed ms", *WAIT_PARTS[1::-1], WAIT_PARTS[2]]).set_index("unit")
    return (t * 1e3).sort_index()


def exposure_reason(run: RunLike, step: int, rank: int = 0, first: int = 2) -> str:
    """Why a later unit (from `first` on) was exposed longer than units 0 and 1 at `step` on `rank`, from the run:
    the most exposed later unit, how much of its wait its peer's late issue and the link explain, and the run's
    ranks per core (`claims.timing_reason`). On the virtual clock no peer comes late by more than the schedule."""
    from edit_course.claims import timing_reason

    t = unit_waits(run, step, rank)
    later = t[t.index >= first]
    if later.empty:
        return timing_reason(as_run(run))
    u = int(later["exposed ms"].idxmax())
    row = later.loc[u]
    return (f"unit {u} waited {row['exposed ms']:.1f} ms: its peer issued the transfer {row['peer later ms']:.1f} ms "
            f"after this rank, the link's charge covers {row['link ms']:.1f} ms, {row['rest ms']:.1f} ms is left; "
            f"{timing_reason(as_run(run))}")


def local_step_ms(run: RunLike) -> float:
    """The median time of a step with no sync-group collective (ms, over the replicas' steps, step 0 left out).

    Why: two runs' wall clocks differ by what the sync costs *and* by how busy the machine was. A step without
    a sync is the same arithmetic in every run of one configuration and touches no sync link, so prefetch and
    the method cannot move it: its median is the machine's pace during that run, the yardstick a wall-clock gap
    is read against. Step 0 (process start, first all-gathers) is left out. NaN when no such step was trained.
    """
    from edit_lab.records.analysis import metrics_table

    r = as_run(run)
    syncing = {int(e["step"]) for e in r.events if e.get("group") == "sync"} | {0}
    m = metrics_table(r)
    local = m.loc[~m["step"].isin(syncing), "dt"]
    return 1e3 * float(local.median()) if len(local) else float("nan")
