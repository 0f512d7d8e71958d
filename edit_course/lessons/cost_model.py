"""The course's cost model: what a sync (04) or a straggler (01) should cost, from a few measured times.

Two formulas, each printed beside the measurement it predicts:

**A sync's exposed time (notebook 04).** The link carries one transfer at a time; with prefetch unit
l+1's transfer is issued when unit l's sync starts, so it travels while unit l computes its forward.
Unit l's transfer takes t_l = c_l + latency + bytes_l / bandwidth, where c_l is the collective's own
cost (gloo's reduction, a thread waking up: `calibrate`'s sync latency and bandwidth, measured on the
run's own collectives with the link taken out, the same number the virtual clock charges); f_l is the rank's own work on unit l (its
all-gather and forward), measured between its waits. A rank then stands blocked on one sync for

    exposed ≈ d + t₀ + Σ_{l ≥ 1} max(0, t_l − f_{l−1})

where d is the decisions exchange (EDiT's penalty: one latency and a few bytes, nothing hides it), unit
0 (embeddings + head) has nothing before it, and unit 1 has only the embedding lookup (f₀, small) in
front (f₀ is unit 0's share before unit 1). Without prefetch every transfer is waited for in full: d + Σ t_l. Prefetch issues only one
unit ahead, so the link never builds a backlog and the sum is exact for this schedule; what the formula
cannot see is a peer that issues its transfer later than this rank (arrival skew, unit by unit), which
only adds, and a core taken by another rank in the middle of a transfer.

**A straggler's cost to `sync` (notebook 01).** Every step ends in an all-reduce that waits for the
slowest replica. A straggler pauses p ms per step after its own compute, so a step of s ms becomes
s + p ms and tokens/s falls to s / (s + p); 1/k only if compute were all of a step (p = (k − 1)·s).

Functions of numbers only (hand-built values test them), plus readers that take the numbers from a run.
"""

from __future__ import annotations

import functools
from collections.abc import Sequence
from typing import Any

import pandas as pd

#: The overlap condition as the notebooks print it. t_l is the link's charge alone, as `unit_table`'s "t (ms)" column
#: beside it: c is not simply added to it, it runs from the issue and counts only where the link would idle.
FORMULA = ("exposed ≈ d + t₀ + Σ_{l≥1} max(0, t_l − f_{l−1}),  t_l = latency + bytes_l / bandwidth, plus each "
           "collective's own cost c where the link idles   (f_l: the rank's own work on unit l, its all-gather and "
           "forward; d: the decisions exchange)")


def link_ms(nbytes: float, latency_ms: float, bandwidth_mb_s: float) -> float:
    """One transfer on the simulated link (ms): latency + bytes / bandwidth (MB/s = 10⁶ bytes per second)."""
    return float(latency_ms) + float(nbytes) / (float(bandwidth_mb_s) * 1e6) * 1e3


def unit_exposed_ms(transfers_ms: Sequence[float], forwards_ms: Sequence[float], prefetch: bool = True,
                    collective_ms: Sequence[float] | None = None) -> list[float]:
    """The cost model's exposed time of each unit's transfer (ms).

    Without `collective_ms`: t₀ for unit 0, then max(0, t_l − f_{l−1}) with prefetch (t_l without), where
    `transfers_ms[l]` is t_l (the link's charge) and `forwards_ms[l]` f_l, the rank's own work on unit l (the
    last unit's is not used). With `collective_ms` (c_l per unit), the lab's schedule replayed: a transfer's
    own cost c_l runs from its issue, then it waits for the link (one transfer at a time); unit l+1 is issued
    when the rank starts waiting for unit l (units 0 and 1 together, first), so c_l hides behind a busy link and
    adds where the link idles. With every c_l = 0 the replay is exactly the closed form.
    """
    t = [float(x) for x in transfers_ms]
    f = [float(x) for x in forwards_ms]
    if len(f) < len(t) - 1:
        raise ValueError(f"need a forward for each unit but the last: {len(t)} transfers, {len(f)} forwards")
    if collective_ms is None:
        if not prefetch:
            return t
        return [t[0]] + [max(0.0, t[l] - f[l - 1]) for l in range(1, len(t))] if t else []
    c = [float(x) for x in collective_ms]
    out: list[float] = []
    now = link_free = 0.0  # now: when the rank starts waiting for the current unit
    issued = [0.0] * len(t)  # with prefetch units 0 and 1 are issued at 0, unit l+1 when the wait on l starts
    for l in range(len(t)):
        if not prefetch:
            issued[l] = now
        elif 1 <= l < len(t) - 1:
            issued[l + 1] = now
        done = max(issued[l] + c[l], link_free) + t[l]
        link_free = done
        out.append(max(0.0, done - now))
        if l + 1 < len(t):
            now = max(now, done) + f[l]
    return out


def sync_exposed_ms(transfers_ms: Sequence[float], forwards_ms: Sequence[float], decisions_ms: float = 0.0,
                    prefetch: bool = True, collective_ms: Sequence[float] | None = None) -> float:
    """The cost model's exposed time of one sync (ms): d + Σ of `unit_exposed_ms`."""
    return float(decisions_ms) + sum(unit_exposed_ms(transfers_ms, forwards_ms, prefetch, collective_ms))


def exposure_curve(unit_bytes: Sequence[int], forwards_ms: Sequence[float], latency_ms: float,
                   bandwidths_mb_s: Sequence[float], decisions_bytes: int | None = None,
                   collective_ms: Sequence[float] | None = None) -> pd.DataFrame:
    """The cost model against the link's bandwidth: one row per (bandwidth, prefetch) with "MB/s", "prefetch",
    "expected exposed ms" and "link ms" (Σ of latency + bytes / bandwidth: the link time of one sync). With
    `decisions_bytes` the decisions exchange (one more transfer, never hidden) is added to both; `collective_ms`
    (per unit, c_l) enters the replay (`unit_exposed_ms`), not the link time."""
    rows = []
    c = [0.0] * len(unit_bytes) if collective_ms is None else [float(x) for x in collective_ms]
    for mbps in bandwidths_mb_s:
        link = [link_ms(b, latency_ms, mbps) for b in unit_bytes]
        d = 0.0 if decisions_bytes is None else link_ms(decisions_bytes, latency_ms, mbps)
        for prefetch in (True, False):
            rows.append({"MB/s": float(mbps), "prefetch": prefetch,
                         "expected exposed ms": sync_exposed_ms(link, forwards_ms, d, prefetch, c),
                         "link ms": d + sum(link)})
    return pd.DataFrame(rows)


def compared(measured: float, expected: float, rel_tol: float, abs_tol: float = 0.0) -> bool:
    """Does a measurement agree with the cost model: within `rel_tol` of the expected value, or `abs_tol`."""
    return abs(measured - expected) <= max(rel_tol * abs(expected), abs_tol)


def sync_gap_reason(measured: float, expected: float, peer_later_ms: float, timing: str, unit: str = "ms") -> str:
    """Why a sync's measured exposure is off the cost model, by its direction (a cause that can move it that way).

    Above: what the model leaves out only adds: the peer issued its transfer later (`peer_later_ms`, measured),
    and a core taken by another rank during a transfer (`timing`, e.g. `claims.timing_reason`).
    Below: c, fitted as an average over the run's collectives, overstates these transfers' own cost, or a transfer
    travelled under a wait the model does not count."""
    gap = measured - expected
    if gap > 0:
        peer = f"the peer issued later by {peer_later_ms:.1f} {unit}, which the model leaves out; " if peer_later_ms > 0 else ""
        return (f"{gap:.1f} {unit} more than the model: {peer}a transfer outlasts its calibrated cost when its ranks "
                f"wait for a core; {timing}")
    return (f"{-gap:.1f} {unit} less than the model: c, fitted as an average over the run's collectives, overstates "
            f"these transfers' own cost, or a transfer travelled under a wait the model does not count; {timing}")


def collective_ms(run: Any, nbytes: Sequence[int]) -> list[float]:
    """c_l: each transfer's own cost beyond the link (ms), from `run`'s own sync-group collectives
    (`edit_lab.clock.calibrate`: a latency and a bandwidth fitted with the link's charge taken out)."""
    from edit_lab.records.analysis import as_run

    costs = _calibrated(str(as_run(run).path))
    return [1e3 * costs.collective_s(int(b)) for b in nbytes] if costs is not None else [0.0] * len(nbytes)


@functools.lru_cache(maxsize=64)
def _calibrated(path: str) -> Any:
    from edit_lab.clock.calibrate import calibrate

    try:
        return calibrate(path)
    except Exception:  # a run too short to calibrate: the model without c
        return None


def unit_table(run: Any, step: int, rank: int = 0) -> pd.DataFrame:
    """The cost model unit by unit for the sync at `step` on `rank` (ms), beside what the run measured.

    Per unit: "bytes"; "c (ms)", the collective's own cost (`collective_ms`); "t (ms)", the link's charge
    (latency + bytes / bandwidth);
    "f before (ms)", the rank's own work between its wait on the previous unit and its wait on this one (the
    previous unit's all-gather and forward: what the transfer can travel under; unit 0: none); "expected ms",
    the cost model with the run's prefetch; "exposed ms", measured (`overlap.py`'s definition)."""
    from edit_lab.records.analysis import as_run, events_table

    r = as_run(run)
    cfg = r.config
    ev = events_table(r, steps=step, ranks=[rank])
    sync = ev[ev["kind"] == "sync_reduce"].set_index("unit").sort_index()
    waits = ev[(ev["kind"] == "wait") & (ev["group"] == "sync")].groupby("unit")[["t0", "t1"]].first()
    units = [int(u) for u in sync.index]
    nbytes = [int(sync.loc[u, "bytes"] or 0) for u in units]
    c = collective_ms(r, nbytes)
    t = [link_ms(b, cfg.link.latency_ms, cfg.link.bandwidth_mb_s) for b in nbytes]
    f = [1e3 * max(0.0, float(waits.loc[u, "t0"] - waits.loc[p, "t1"]))
         if u in waits.index and p in waits.index else float("nan") for p, u in zip(units, units[1:])]
    expected = unit_exposed_ms(t, [0.0 if x != x else x for x in f], bool(cfg.schedule.prefetch), c)
    return pd.DataFrame({"bytes": nbytes, "c (ms)": c, "t (ms)": t,
                         "f before (ms)": [float("nan")] + f, "expected ms": expected,
                         "exposed ms": [1e3 * float(sync.loc[u, "exposed"]) for u in units]},
                        index=pd.Index(units, name="unit"))


def own_work_ms(run: Any, steps: Sequence[int], rank: int = 0) -> list[float]:
    """f of the cost model: the rank's own work before each unit's wait (unit 1 on; `unit_table`'s "f before"),
    the median over `steps`. Index l holds f_l, the work of unit l that unit l+1's transfer travels under."""
    tables = [unit_table(run, s, rank)["f before (ms)"] for s in steps]
    if not tables:
        return []
    return [float(v) for v in pd.concat(tables, axis=1).median(axis=1).iloc[1:]]


# ------------------------------------------------------------------------------------------- notebook 01
def straggler_fraction(step_ms: float, pause_ms: float) -> float:
    """tokens/s with a straggler ÷ without, when every step waits out the straggler's pause: s / (s + p)."""
    return float(step_ms) / (float(step_ms) + float(pause_ms)) if step_ms > 0 else float("nan")


def straggler_gap_reason(measured: float, expected: float, wait_ms: float, pause_ms: float) -> str:
    """Why the measured fraction is off s / (s + p), by its direction.

    Above the model: the fast replica waited less than the pause (`wait_ms` < `pause_ms`): with fewer cores
    than ranks it computes alone, faster, while the straggler spins. Below: the steps grew by more than the
    pause: the collectives and the shared cores slowed the straggler run's steps beyond its pause."""
    if measured >= expected:
        return (f"the fast replica waited {wait_ms:.1f} ms per step, {'less' if wait_ms < pause_ms else 'no less'} than "
                f"the {pause_ms:.1f} ms pause: while the straggler spins, the fast replica computes with the cores to "
                f"itself (Going further)")
    return (f"the steps grew by more than the {pause_ms:.1f} ms pause (the fast replica waited {wait_ms:.1f} ms): other "
            f"work on the machine or the collectives slowed the straggler run")


def straggler_numbers(base: Any, slow: Any, fast: int = 0, slow_replica: int = 1) -> dict[str, float]:
    """The numbers notebook 01's cost model reads from its two runs (ms per step, `replica_table`'s definitions):
    "step ms" (s: the baseline's time per step, its replicas' mean), "pause ms" (p: the straggler's pause per step),
    "wait ms" (the fast replica's blocked time per step), "straggler step ms" (the straggler run's time per step),
    "own pace ratio" (the fast replica's own tokens/s in the straggler run ÷ in the baseline: 1 when the machine
    was as busy for both), "expected" (s / (s + p)) and "measured" (tokens/s with the straggler ÷ without)."""
    from edit_lab.records.analysis import as_run, replica_table

    b, s = as_run(base), as_run(slow)
    bt, st = replica_table(b).set_index("replica"), replica_table(s).set_index("replica")
    step = 1e3 * float(bt["time_s"].mean()) / b.config.steps
    pause = 1e3 * float(st.loc[slow_replica, "straggle_s"]) / s.config.steps
    return {"step ms": step, "pause ms": pause, "wait ms": 1e3 * float(st.loc[fast, "blocked_s"]) / s.config.steps,
            "straggler step ms": 1e3 * float(st["time_s"].mean()) / s.config.steps,
            "own pace ratio": float(st.loc[fast, "own_tokens_per_s"]) / float(bt.loc[fast, "own_tokens_per_s"]),
            "expected": straggler_fraction(step, pause),
            "measured": float(s.summary["tokens_per_s"]) / float(b.summary["tokens_per_s"])}


def straggler_reason(n: dict[str, float], rel_tol: float = 0.15) -> str:
    """`straggler_gap_reason` for `straggler_numbers`' dict, after the one cause the model cannot be blamed for:
    the machine busier during one run than the other, seen in the fast replica's own pace (which the straggler
    does not touch) differing by more than `rel_tol` between the runs; or a baseline slower than the straggler
    run (measured above 1), which only load can cause."""
    ratio = n.get("own pace ratio", 1.0)
    if abs(ratio - 1.0) > rel_tol or n["measured"] >= 1.0:
        which = "the baseline" if ratio > 1.0 or n["measured"] >= 1.0 else "the straggler run"
        return (f"the fast replica's own pace, which the straggler does not touch, was {ratio:.2f}× the baseline's: "
                f"other work on this machine slowed {which} (a baseline step took {n['step ms']:.1f} ms, a straggler "
                f"run's step {n['straggler step ms']:.1f} ms); run both again")
    return straggler_gap_reason(n["measured"], n["expected"], n["wait ms"], n["pause ms"])


def check_straggler_fraction(base: Any, slow: Any, rel_tol: float = 0.15) -> Any:
    """Print notebook 01's cost model beside its measurement and the verdict: the measured fraction within
    `rel_tol` of s / (s + p) (a timing of this machine). Returns the verdict."""
    from edit_course.verdict import verdict

    n = straggler_numbers(base, slow)
    print(f"cost model: s = {n['step ms']:.1f} ms per baseline step (wall time ÷ steps), p = {n['pause ms']:.1f} ms "
          f"pause per step → s / (s + p) = {n['expected']:.2f}; measured (tokens/s with the straggler ÷ without): {n['measured']:.2f}")
    return verdict(f"the straggler run reaches the cost model's fraction of the baseline's tokens/s "
                   f"(within {rel_tol:.0%})", compared(n["measured"], n["expected"], rel_tol),
                   f"measured {n['measured']:.2f} against s / (s + p) = {n['expected']:.2f}",
                   why_not=straggler_reason(n), timing=True)


def check_units(run: Any, step: int, name: str, timing: str, rank: int = 0, first: int = 2,
                tol_ms: float = 5.0) -> Any:
    """The verdict of notebook 04's part 1: units `first`… (each behind a block's work) exposed what the cost model
    explains, their sum within `tol_ms` per unit. The model cannot know when the peer issues its transfer (the
    all-reduce starts only then), so each unit's wait is explained by the larger of the model's value and the
    peer's late issue (`unit_waits`' "peer later ms", measured); both are printed. A ✗ says why by its direction."""
    from edit_course.lessons.sync_timing import unit_waits
    from edit_course.verdict import verdict

    t = unit_table(run, step, rank)
    peer = unit_waits(run, step, rank)["peer later ms"].reindex(t.index).fillna(0.0)
    later = t.index >= first
    exposed, model = float(t.loc[later, "exposed ms"].sum()), float(t.loc[later, "expected ms"].sum())
    late = float(peer[later].sum())
    explained = float(pd.concat([t.loc[later, "expected ms"], peer[later]], axis=1).max(axis=1).sum())
    n = int(later.sum())
    return verdict(f"{name}: units {first}… expose what the cost model or the peer's late issue explains "
                   f"(within {tol_ms:g} ms per unit)", compared(exposed, explained, 0.0, tol_ms * max(n, 1)),
                   f"exposed {exposed:.1f} ms over {n} units; the cost model {model:.1f} ms, the peer's late issue "
                   f"{late:.1f} ms, the larger of the two per unit {explained:.1f} ms",
                   why_not=sync_gap_reason(exposed, explained, 0.0, timing), timing=True)


def sync_expected_ms(run: Any, rank: int = 0, bandwidth_mb_s: float | None = None) -> float:
    """The cost model's exposed `sync_reduce` time of one sync of `run` (ms, decisions left out): its units' bytes
    and `rank`'s own work (`own_work_ms`, median over the training syncs) on its link, or at `bandwidth_mb_s`."""
    from edit_course.lessons.sync_timing import training_syncs
    from edit_lab.records.analysis import as_run

    r = as_run(run)
    steps = training_syncs(r)
    if not steps:
        return 0.0
    t = unit_table(r, steps[0], rank)
    mbps = r.config.link.bandwidth_mb_s if bandwidth_mb_s is None else bandwidth_mb_s
    transfers = [link_ms(b, r.config.link.latency_ms, mbps) for b in t["bytes"]]
    return sync_exposed_ms(transfers, own_work_ms(r, steps, rank), 0.0, bool(r.config.schedule.prefetch),
                           list(t["c (ms)"]))


def check_sync(run: Any, name: str, timing: str, rel_tol: float = 0.3, abs_ms: float = 5.0) -> tuple[float, float]:
    """Notebook 04's part 3 verdict: a sync's measured exposed `sync_reduce` time (`per_sync_ms`: median over ranks
    and syncs) against the cost model's (`sync_expected_ms`), within `rel_tol` or `abs_ms`; a ✗ says why by its
    direction (`sync_gap_reason`, the median sync's late peer measured). Returns (measured, expected)."""
    from edit_course.lessons.sync_timing import median_sync_parts, per_sync_ms
    from edit_course.verdict import verdict

    measured, expected = per_sync_ms(run)["exposed"], sync_expected_ms(run)
    verdict(f"{name}: the exposed sync_reduce time per sync (d left out) is the cost model's "
            f"(within {rel_tol:.0%} or {abs_ms:g} ms)",
            compared(measured, expected, rel_tol, abs_ms),
            f"measured {measured:.1f} ms (median over ranks and syncs) against expected {expected:.1f} ms",
            why_not=sync_gap_reason(measured, expected, median_sync_parts(run)["peer later ms"], timing), timing=True)
    return measured, expected


def run_curve(run: Any, bandwidths_mb_s: Sequence[float], rank: int = 0) -> pd.DataFrame:
    """`exposure_curve` of `run`'s own units: its bytes per unit, `rank`'s own work (median over the training
    syncs) and each transfer's own cost c, at each bandwidth of `bandwidths_mb_s` on the run's latency."""
    from edit_course.lessons.sync_timing import training_syncs
    from edit_lab.records.analysis import as_run

    r = as_run(run)
    steps = training_syncs(r)
    t = unit_table(r, steps[0], rank)
    return exposure_curve(list(t["bytes"]), own_work_ms(r, steps, rank), r.config.link.latency_ms, bandwidths_mb_s,
                          collective_ms=list(t["c (ms)"]))


def check_many(claim: str, pairs: dict[str, tuple[float, float]], timing: str, rel_tol: float = 0.3,
               abs_ms: float = 5.0) -> Any:
    """One verdict for several runs: each measured exposure (`pairs`: name -> (measured, expected) ms) within
    `rel_tol` or `abs_ms` of the cost model; a ✗ names the runs off it, each with its direction."""
    from edit_course.verdict import verdict

    off = {k: (m, e) for k, (m, e) in pairs.items() if not compared(m, e, rel_tol, abs_ms)}
    numbers = "; ".join(f"{k}: {m:.1f} against {e:.1f} ms" for k, (m, e) in pairs.items())
    why = ", ".join(f"{k} {'above' if m > e else 'below'} the model by {abs(m - e):.1f} ms" for k, (m, e) in off.items())
    # only the causes that can move a run the way it moved: a ✗ above the model is never blamed on an overstated c
    causes = {True: "above, a late peer or a core taken mid-transfer (the model leaves both out)",
              False: "below, c (a fitted average) overstating these transfers' own cost, or a transfer that travelled "
                     "under a wait the model does not count"}
    seen = "; ".join(causes[d] for d in (True, False) if d in {m > e for m, e in off.values()})
    return verdict(f"{claim} (measured against the cost model, within {rel_tol:.0%} or {abs_ms:g} ms)",
                   bool(pairs) and not off, numbers, why_not=f"{why}: {seen}; {timing}", timing=True)
