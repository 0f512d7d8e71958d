"""Notebook 09's race, EDiT against Streaming DiLoCo and DiLoCo: every number read from the runs' own records.

- bytes: what each pseudo-gradient collective of the sync group carried (`sync_reduce` events of rank 0,
  the bytes the link charged; edit_lab/core/wire.py). `measure` is the one reading, shared with
  benchmarks/streaming_vs_edit.py: bytes per collective, the peak and mean bytes of one training step (the
  closing sync after the last step left out of the peak);
- exposed sync time: overlap.py's one definition (`analysis.comm_totals` of the sync group), per rank;
- validation loss against time and against the bytes sent by then (`loss_points`).

Claims print a verdict (edit_course.verdict); a ranking of losses, which may go either way, prints a computed
sentence (`winner_line`) instead, without ✓ or ✗.
"""

from __future__ import annotations

import statistics
from collections import defaultdict
from collections.abc import Mapping, Sequence
from typing import Any

import numpy as np
import pandas as pd

from edit_course.verdict import Verdict, verdict
from edit_lab.records.analysis import RunLike, as_run, comm_totals, eval_table

NAMES = {"edit": "EDiT", "streaming_diloco": "Streaming DiLoCo", "diloco": "DiLoCo"}


def name(method: str) -> str:
    return NAMES.get(method, method)


def sync_events(run: RunLike, rank: int = 0) -> list[dict[str, Any]]:
    """The sync group's pseudo-gradient collectives of `rank`, in time order."""
    r = as_run(run)
    return sorted((e for e in r.events_of("sync_reduce", rank=rank) if e.get("group") == "sync"),
                  key=lambda e: e["t0"])


def training_end(run: RunLike) -> float:
    """When replica 0 ended its last training step (what came after is the closing sync)."""
    r = as_run(run)
    return max((m["t"] for m in r.metrics if m["kind"] == "train" and m.get("replica") == 0), default=float("inf"))


def step_bytes(run: RunLike) -> dict[int, int]:
    """Bytes the pseudo-gradient collectives issued in each training step carried (steps that sent nothing are
    absent; the closing sync is left out)."""
    end = training_end(run)
    per_step: dict[int, int] = defaultdict(int)
    for e in sync_events(run):
        if e["t0"] < end:  # issued in a training step, not by the closing sync of `finalize`
            per_step[int(e["step"])] += int(e["bytes"] or 0)
    return dict(sorted(per_step.items()))


def measure(run: RunLike) -> dict[str, Any]:
    """Bytes per pseudo-gradient collective, per step (peak, and the mean over the steps replica 0 trained, not the
    configured `steps`, which a time budget ignores) and the final loss, from the run's records."""
    r = as_run(run)
    events = sync_events(r)
    per_step = step_bytes(r)
    vals = r.val_losses()
    return {"collective_bytes": sorted({e["bytes"] for e in events}), "collectives": len(events),
            "peak_step_bytes": max(per_step.values(), default=0),
            "mean_step_bytes": sum(e["bytes"] for e in events) / max(trained_steps(r), 1),
            "val_loss": vals[-1][1] if vals else float("nan")}


def bytes_by(run: RunLike, t: float) -> int:
    """Bytes rank 0's sync-group collectives had carried by time `t` (those issued by then)."""
    return sum(int(e["bytes"] or 0) for e in sync_events(run) if e["t0"] <= t)


def loss_points(run: RunLike) -> pd.DataFrame:
    """Every validation of the agreed model: t, val_loss, final, and mb (megabytes rank 0 had sent by then)."""
    ev = eval_table(run)
    out = ev[["t", "val_loss", "final"]].copy()
    out["mb"] = [bytes_by(run, t) / 1e6 for t in ev["t"]]
    return out.reset_index(drop=True)


def loss_at_mb(run: RunLike, mb: float) -> float:
    """The validation loss the run's loss-against-MB line passes at `mb` megabytes: linear between its two
    validations around `mb` (the latest of several at the same MB); NaN beyond its last one."""
    p = loss_points(run).drop_duplicates("mb", keep="last")
    if not len(p) or mb > float(p["mb"].max()) + 1e-12:
        return float("nan")
    return float(np.interp(mb, p["mb"], p["val_loss"]))


def trained_steps(run: RunLike) -> int:
    """Steps replica 0 trained (the warm-up included)."""
    return max((s for s, _ in as_run(run).train_losses(0)), default=-1) + 1


def exposed_s(run: RunLike) -> float:
    """Seconds a rank stood blocked on the sync group in its training steps, the mean over the ranks
    (overlap.py's one definition; the closing sync after the last step, the same for every method, left out)."""
    r = as_run(run)
    return comm_totals(r, steps=(0, trained_steps(r) - 1), groups=["sync"])["exposed_s"] / r.config.world_size


def exposed_model(run: RunLike) -> dict[str, float]:
    """The cost model of a Streaming DiLoCo run's exposed sync time, beside its measurement (`exposed_s`).

    Every collective on the sync link costs latency + bytes / bandwidth (`LinkModel.transfer_time`, the link the
    run simulated). The warm-up's gradient all-reduces have nothing to hide under (a step waits for its whole
    gradient): `warmup_s` is their transfer time. A fragment travels under τ = `fragment_sync_delay` whole steps,
    so each landing leaves uncovered what its transfer lasts beyond τ of the run's own steps: `landings_s` =
    Σ max(0, transfer − τ · own_step_s), with `own_step_s` replica 0's step without its exposed time (the
    training time minus `exposed_s`, per step). `predicted_s` is their sum, per rank, the closing sync left out
    as in `exposed_s`; `transfer_s` the longest landing's transfer.
    """
    from edit_lab.core.comm import LinkModel

    r = as_run(run)
    c = r.config
    link = LinkModel.of(c.link.latency_ms, c.link.bandwidth_mb_s)
    end = training_end(r)
    warm = sum(link.transfer_time(int(e["bytes"] or 0)) for e in r.events_of("grad_all_reduce", rank=0)
               if e.get("group") == "sync" and e["t0"] < end and e["step"] < c.schedule.warmup_steps)
    per_landing: dict[int, float] = defaultdict(float)
    for e in sync_events(r):
        if e["t0"] < end:
            per_landing[int(e["step"])] += link.transfer_time(int(e["bytes"] or 0))
    steps = max(trained_steps(r), 1)
    t_train = max((m["t"] for m in r.metrics if m["kind"] == "train" and m.get("replica") == 0), default=0.0)
    measured = exposed_s(r)
    own = max(t_train - measured, 0.0) / steps
    cover = c.streaming.fragment_sync_delay * own
    landings = sum(max(0.0, t - cover) for t in per_landing.values())
    return {"warmup_s": warm, "landings_s": landings, "predicted_s": warm + landings, "measured_s": measured,
            "own_step_s": own, "cover_s": cover, "transfer_s": max(per_landing.values(), default=0.0)}


def check_exposed_model(run: RunLike, where: str, rtol: float = 0.25) -> Verdict:
    """Print the cost model's exposed time beside the run's, and whether the model accounts for it (`rtol`)."""
    m = exposed_model(run)
    hides = "hides under them" if m["transfer_s"] <= m["cover_s"] else "outlasts them"
    numbers = (f"{where}: measured {m['measured_s']:.3f} s per rank; model {m['predicted_s']:.3f} s = warm-up "
               f"all-reduces {m['warmup_s']:.3f} + landings {m['landings_s']:.3f} (a fragment's transfer of "
               f"{1e3 * m['transfer_s']:.0f} ms against τ steps of {1e3 * m['cover_s']:.1f} ms: it {hides})")
    ok = abs(m["measured_s"] - m["predicted_s"]) <= rtol * max(m["predicted_s"], 1e-9)
    return verdict("the link's cost model accounts for the exposed sync time", ok, numbers,
                   why_not="the model charges each collective alone, while the link serialises transfers and the "
                   "warm-up's all-reduces partly overlap the backward", timing=True)


def exposed_ms_per_step(run: RunLike) -> float:
    """`exposed_s` per step trained, in milliseconds: what the sync costs each step, whatever the steps."""
    return 1e3 * exposed_s(run) / max(trained_steps(run), 1)


def final_loss(run: RunLike) -> float:
    vals = as_run(run).val_losses()
    return float(vals[-1][1]) if vals else float("nan")


def race_table(runs: Mapping[str, Sequence[RunLike]]) -> pd.DataFrame:
    """One row per method (its runs: one per seed): peak and mean MB per step, exposed sync s per rank, steps
    trained, MB sent, final validation loss and the loss at equal bytes (the fewest MB any method sent), all
    means over the seeds."""
    equal_mb = min(loss_points(r)["mb"].max() for rs in runs.values() for r in rs)
    rows = []
    for method, rs in runs.items():
        ms = [measure(r) for r in rs]
        rows.append({"method": name(method),
                     "peak MB per step": statistics.mean(m["peak_step_bytes"] for m in ms) / 1e6,
                     "mean MB per step": statistics.mean(m["mean_step_bytes"] for m in ms) / 1e6,
                     "exposed sync s per rank": statistics.mean(exposed_s(r) for r in rs),
                     "exposed ms per step": statistics.mean(exposed_ms_per_step(r) for r in rs),
                     "steps": statistics.mean(trained_steps(r) for r in rs),
                     "MB sent": statistics.mean(loss_points(r)["mb"].max() for r in rs),
                     "val loss at the end": statistics.mean(final_loss(r) for r in rs),
                     f"val loss by {equal_mb:.2f} MB": statistics.mean(loss_at_mb(r, equal_mb) for r in rs)})
    return pd.DataFrame(rows).set_index("method")


# ------------------------------------------------------------------------------------------------ claims
def lower_peak(stream: Sequence[RunLike], whole: Sequence[RunLike], whole_name: str = "DiLoCo") -> Verdict:
    """Streaming DiLoCo's peak bytes in one step is below the whole-model method's, in every seed."""
    s = [measure(r)["peak_step_bytes"] for r in stream]
    w = [measure(r)["peak_step_bytes"] for r in whole]
    fragments = as_run(stream[0]).config.streaming.fragments
    never = min(w) == 0  # the whole-model method sent nothing inside training: its only sync was the closing one
    why = (f"{whole_name} never synced inside training in this run (its first sync step lay beyond the budget's "
           "last step; only the closing sync sent its model): there is no peak to compare" if never else
           "a fragment is most of the model (P = 1, or one unit holds nearly every parameter)")
    return verdict(f"Streaming DiLoCo's peak per step is below {whole_name}'s",
                   not never and all(a < b for a, b in zip(s, w)),
                   f"{max(s) / 1e6:.3f} MB against {min(w) / 1e6:.3f} MB in one step"
                   + ("" if never else f" ({max(s) / min(w):.2f}×; one fragment of P = {fragments})"), why)


def exposes_less(a: Sequence[RunLike], b: Sequence[RunLike], a_name: str, b_name: str) -> Verdict:
    """`a` stands less time blocked on the sync group per step trained than `b`, in every seed."""
    xa, xb = [exposed_ms_per_step(r) for r in a], [exposed_ms_per_step(r) for r in b]
    return verdict(f"{a_name} exposes less sync time per step than {b_name}", all(x < y for x, y in zip(xa, xb)),
                   f"{statistics.mean(xa):.1f} ms against {statistics.mean(xb):.1f} ms per step trained, per rank "
                   f"({statistics.mean(exposed_s(r) for r in a):.3f} s against "
                   f"{statistics.mean(exposed_s(r) for r in b):.3f} s in all)",
                   f"the transfer took longer than the steps {a_name} hides it under")


def same_bytes(real: RunLike, twin: RunLike) -> Verdict:
    """A real run's pseudo-gradient collectives carried the bytes its virtual twin's did, step by step."""
    a, b = step_bytes(real), step_bytes(twin)
    return verdict("the real run's collectives carry the bytes the virtual clock's did", a == b,
                   f"{sum(a.values()):,} bytes in {len(a)} steps against {sum(b.values()):,} in {len(b)}",
                   "the two runs did not train the same schedule")


def winner_line(runs: Mapping[str, Sequence[RunLike]], at: str) -> str:
    """Who reached the lowest mean validation loss (`at`: 'time', the end of the budget, or 'bytes', by the
    fewest MB any method sent), said as computed, for whichever method it is; printed and returned."""
    if at == "bytes":
        equal_mb = min(loss_points(r)["mb"].max() for rs in runs.values() for r in rs)
        loss = {m: [loss_at_mb(r, equal_mb) for r in rs] for m, rs in runs.items()}
        where = f"at equal bytes ({equal_mb:.2f} MB sent, read off each loss-against-MB line)"
    else:
        loss = {m: [final_loss(r) for r in rs] for m, rs in runs.items()}
        where = "at equal time (the end of the budget)"
    mean = {m: statistics.mean(v) for m, v in loss.items()}
    best = min(mean, key=mean.get)
    others = ", ".join(f"{name(m)} {v:.4f}" for m, v in mean.items() if m != best)
    line = f"{where}, {name(best)} reaches the lowest validation loss: {mean[best]:.4f} ({others})"
    if best == "streaming_diloco":
        paired = min(sum(a < b for a, b in zip(loss[best], v)) for m, v in loss.items() if m != best)
        line = (f"Streaming DiLoCo wins {where}: {mean[best]:.4f} ({others}); lower than every other method in "
                f"{paired} of {len(loss[best])} seeds")
    elif "streaming_diloco" in loss:
        line += "; Streaming DiLoCo does not win here"
    print(line, flush=True)
    return line


# ------------------------------------------------------------------------------------------------ wire formats
def per_sync_bytes(run: RunLike) -> float:
    """Bytes one rank sends per pseudo-gradient collective, the mean over the run (rank 0's `sync_reduce` events:
    what it sends on a ring, `wire.ring_bytes`): the format's price of one sync, whatever the steps trained."""
    events = sync_events(run)
    return sum(int(e["bytes"] or 0) for e in events) / max(len(events), 1)


def wire_table(runs: Mapping[str, Sequence[RunLike]], reference: str) -> pd.DataFrame:
    """One row per wire format (its runs: one per seed): bytes per sync and their ratio to `reference`'s, MB sent,
    syncs and steps trained in the same seconds, final validation loss; means over the seeds."""
    ref = statistics.mean(per_sync_bytes(r) for r in runs[reference])
    rows = []
    for fmt, rs in runs.items():
        b = statistics.mean(per_sync_bytes(r) for r in rs)
        rows.append({"wire format": fmt, "KB per sync": b / 1e3, f"÷ {reference}": b / ref,
                     "MB sent": statistics.mean(loss_points(r)["mb"].max() for r in rs),
                     "syncs": statistics.mean(len(sync_events(r)) for r in rs),
                     "steps": statistics.mean(trained_steps(r) for r in rs),
                     "val loss at the end": statistics.mean(final_loss(r) for r in rs)})
    return pd.DataFrame(rows).set_index("wire format")


def sends_at_most(a: Sequence[RunLike], b: Sequence[RunLike], fraction: float, a_name: str, b_name: str) -> Verdict:
    """`a` sends at most `fraction` of `b`'s bytes per sync, in every seed (a property of the format and R)."""
    ratios = [per_sync_bytes(x) / per_sync_bytes(y) for x, y in zip(a, b)]
    return verdict(f"{a_name} sends at most {fraction:g} of {b_name}'s bytes per sync", bool(ratios) and
                   max(ratios) <= fraction, "per seed " + ", ".join(f"{x:.3f}" for x in ratios))


def more_steps(a: Sequence[RunLike], b: Sequence[RunLike], a_name: str, b_name: str) -> Verdict:
    """`a` trains more steps than `b` in the same seconds, in every seed: on a slow link a smaller sync is a shorter
    one, and the seconds it no longer waits become steps (the virtual clock: the same on any machine)."""
    pairs = [(trained_steps(x), trained_steps(y)) for x, y in zip(a, b)]
    return verdict(f"{a_name} trains more steps than {b_name} in the same seconds", bool(pairs) and
                   all(x > y for x, y in pairs), "; ".join(f"{x} against {y}" for x, y in pairs))
