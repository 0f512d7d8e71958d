"""What does a sync step cost? EDiT with and without prefetch against DiLoCo, over a slow link; and loss.

Part 1 (issue 3's overlap target). Two short calibration runs measure one block's forward compute
time F, and the time R the real (loopback) all-reduce of one block's shard takes beside the compute;
the simulated sync link, which adds its transfer time after the real collective, is then set to
L = max(F − R, F/4) per block (latency 0.2·L, bandwidth B / 0.8·L for a shard of B bytes), so that
one unit's sync takes about as long as one unit's forward compute. Then `edit` with prefetch, `edit`
without, and `diloco` train the same model in one run of this script. For each sync we compare the
sync step (for EDiT the step whose forward syncs, for DiLoCo the step whose end syncs) with the mean
of its two neighbours, which are local steps, on the replica that reached the sync last (see
`sync_pairs`), and report the medians over the syncs: both step times, their ratio and difference
(the extra time), and the fraction of sync-group communication hidden under the same rank's compute
(overlap.py: the time with a sync-group collective in flight while the rank worked, each instant
once; waiting on one collective hides no other).
Targets: edit with prefetch ≤ 1.05× with at least 80% of the sync-group communication hidden, and
less than half of DiLoCo's extra time.

The defaults are the regime EDiT is built for, scaled to a CPU: the `small` model (6 blocks), 4096
tokens per rank and step, one core per rank (1 shard × 2 replicas). The batch matters because the
per-unit work of a sync that no overlap can hide (the outer step, Δ, the norms, a collective's fixed
cost: ~1–3 ms per unit here) is set by the parameters, while the forward compute, and with it the
calibrated link, grows with the tokens; at the lab's default 512 tokens per rank that work is as
large as a unit's forward, and with 4 processes on 2 cores the "background" transfer takes its CPU
from the compute it should hide under. `--model tiny --mesh 2x2 --seq-len 64 --batch-size 8` shows
that regime (see docs/benchmarks.md).

Part 2: validation loss after the same number of tokens for sync, post_local_sgd, diloco and edit,
on the tiny model over 2 × 2 ranks (no simulated link: this is about what the methods learn).
Target: edit within 5% of sync.

    python benchmarks/edit_overlap.py [--part overlap|loss] [--model small] [--mesh 1x2] [--steps 44]
                                      [--seq-len 128] [--batch-size 32] [--loss-steps 600] [--link-ratio 1]

`--model deep` (small's blocks, 12 of them) is the regime layer-wise sync is built for: only unit 0
(embeddings + head) and unit 1 (the first block, behind which only the embedding lookup runs) have
no compute to hide behind, a smaller share of a deeper model. The script prints each unit's
hidden and exposed time and writes the timeline of the first sync step next to the runs.
"""

from __future__ import annotations

import argparse
import statistics
import sys
from pathlib import Path
from typing import NamedTuple

import pandas as pd

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from edit_lab import (
    RunConfig,
    launch,  # noqa: E402
)
from edit_lab.core.model import get_size  # noqa: E402
from edit_lab.records.analysis import comm_totals, events_table, sync_window  # noqa: E402
from edit_lab.records.run import Run  # noqa: E402
from edit_lab.viz import timeline_figure  # noqa: E402

sys.path.insert(0, str(ROOT / "benchmarks"))
from results_io import load_average, write_result  # noqa: E402


class Row(NamedTuple):
    """One method's line of the table; times in seconds, medians over the run's syncs."""

    label: str
    sync_s: float
    local_s: float
    ratio: float
    extra_s: float
    hidden: float  # sync-group communication after warm-up, each instant once
    hidden_agg: float  # the aggregate all-reduce (sync_reduce) alone
    extra_slowest_s: float


def step_times(run) -> dict[tuple[int, int], float]:
    """Per (step, replica), its duration: begin of the step to the end of its optimizer step or sync."""
    return {(m["step"], m["replica"]): m["dt"] for m in run.metrics if m["kind"] == "train"}


def sync_pairs(run, syncs: set[int]) -> tuple[list[tuple[float, float]], list[tuple[float, float]]]:
    """Per sync: (sync step, mean of its two neighbouring local steps), twice.

    First on the replica that reached the sync last, which waited for nobody: what the sync itself
    costs. Then as the slowest replica's step, which also holds the time the replica that arrived
    first waited for the other one (after τ local steps, replicas are tens of ms apart on a busy CPU:
    waiting for the slower replica, which any sync pays and the straggler benchmark is about, not a cost
    of the sync).
    Each sync step is compared with the steps around it because the machine's speed drifts over a
    run by more than the effect measured.
    """
    dt = step_times(run)
    R = run.summary["replicas"]
    own, slowest = [], []
    for s in sorted(syncs):
        if any((s + d, r) not in dt for d in (-1, 1) for r in range(R)) or {s - 1, s + 1} & syncs:
            continue
        per = [(dt[s, r], (dt[s - 1, r] + dt[s + 1, r]) / 2) for r in range(R)]
        own.append(min(per, key=lambda p: p[0] - p[1]))
        slowest.append((max(p[0] for p in per), max(max(dt[s - 1, r], dt[s + 1, r]) for r in range(R))))
    return own, slowest


def sync_steps(run) -> set[int]:
    return {e["step"] for e in run.events if e["kind"] == "sync_reduce" and e["rank"] == 0}


def calibrate(base: RunConfig, out: str) -> tuple[float, float, int]:
    """(one block's forward F, one block's real sync-group all-reduce R, bytes of one block's shard).

    F from a short `sync` run. R from a short `edit` run with prefetch and no simulated link: the
    time from issuing a block's aggregate to its completion on the loopback network, measured while
    the forward computes beside it (on a CPU the loopback transfer competes with compute for the
    cores, which is why it is measured in place, not alone).
    """
    run = launch(base.replace(method="sync", steps=12, out=f"{out}-sync"), overwrite=True)
    fwd = [e["t1"] - e["t0"] for e in run.events if e["kind"] == "compute_fwd" and (e["unit"] or 0) >= 1
           and e["step"] >= 4]
    run = launch(base.replace(method="edit", prefetch=True, steps=24, out=f"{out}-edit"), overwrite=True)
    real = [e["t1"] - e["t0"] for e in run.events if e["kind"] == "sync_reduce" and (e["unit"] or 0) >= 1]
    block_bytes = 4 * get_size(base.data.model).block_params() // base.shards  # float32 shard of one block
    return statistics.median(fwd), statistics.median(real), block_bytes


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--model", default="small")
    ap.add_argument("--steps", type=int, default=44)
    ap.add_argument("--mesh", default="1x2", help="SHARDSxREPLICAS")
    ap.add_argument("--seq-len", type=int, default=128)
    ap.add_argument("--batch-size", type=int, default=32, help="sequences per rank per step")
    ap.add_argument("--loss-steps", type=int, default=600)
    ap.add_argument("--link-ratio", type=float, default=1.0,
                    help="one block's sync over the simulated link takes this many times one block's forward")
    ap.add_argument("--out", default=str(ROOT / "runs" / "bench-edit"))
    ap.add_argument("--part", choices=("all", "overlap", "loss"), default="all")
    ap.add_argument("--analyse-only", action="store_true",
                    help="read the runs already in --out again instead of launching them (part overlap)")
    ap.add_argument("--json", default="edit_overlap.json", help="result file (a bare name: benchmarks/results/)")
    a = ap.parse_args()
    load_before = load_average()
    result: dict = {}
    shards, replicas = (int(x) for x in a.mesh.split("x"))
    base = RunConfig(model=a.model, shards=shards, replicas=replicas, steps=a.steps, warmup_steps=4, sync_interval=4,
                     seq_len=a.seq_len, batch_size=a.batch_size,
                     eval_every=0, eval_batches=2, progress=False)
    if a.part in ("all", "overlap"):
        result["overlap"] = overlap(base, a)
    if a.part in ("all", "loss"):
        result["loss"] = loss(a)
    print(f"\ncommand: python benchmarks/edit_overlap.py --part {a.part} --model {a.model} --mesh {a.mesh} "
          f"--steps {a.steps} --seq-len {a.seq_len} --batch-size {a.batch_size} --loss-steps {a.loss_steps} "
          f"--link-ratio {a.link_ratio:g}" + (" --analyse-only" if a.analyse_only else ""))
    if a.json:
        write_result(a.json, result, __file__, sys.argv[1:], load_before)
    return 0


def unit_exposure(run, steps: int) -> str:
    """Per unit, medians over the training syncs on rank 0: link-free duration, hidden and exposed ms."""
    ev = events_table(run, steps=(0, steps - 1), ranks=[0], kinds=["sync_reduce"])
    g = ev.groupby("unit")[["duration", "hidden", "exposed", "other"]].median() * 1e3
    lines = ["| unit | in flight (ms) | hidden (ms) | exposed (ms) | other (ms) |", "|---:|---:|---:|---:|---:|"]
    lines += [f"| {u} | {r.duration:.1f} | {r.hidden:.1f} | {r.exposed:.1f} | {r.other:.1f} |" for u, r in g.iterrows()]
    return "\n".join(lines)


def extra_breakdown(run, syncs: set[int]) -> str:
    """Where a sync step's extra time goes, on rank 0: per kind of span, the sync step's seconds minus the
    mean of its two neighbouring local steps, medians over the syncs (ms)."""
    ev = events_table(run, ranks=[0])
    per_step = ev.groupby(["step", "kind"])["duration"].sum().unstack(fill_value=0.0)
    rows = []
    for s in sorted(syncs):
        if s - 1 in per_step.index and s + 1 in per_step.index:
            rows.append(per_step.loc[s] - (per_step.loc[s - 1] + per_step.loc[s + 1]) / 2)
    diff = (pd.DataFrame(rows).median() * 1e3).round(1)
    keep = [k for k in ("wait", "sync_decisions", "outer_step", "compute_fwd", "compute_bwd", "optimizer") if k in diff]
    return ", ".join(f"{k} {diff[k]:+.1f}" for k in keep)


def overlap(base: RunConfig, a: argparse.Namespace) -> dict:
    """Part 1: sync step / local step for edit with and without prefetch, and diloco, over one link.

    With `--analyse-only` the runs already in `--out` are read again instead of launched (the tables of
    a run measured earlier, with this version of the analysis)."""
    cases = [("edit, prefetch on", dict(method="edit", prefetch=True)),
             ("edit, prefetch off", dict(method="edit", prefetch=False)),
             ("diloco", dict(method="diloco"))]
    link: dict = {}
    per_sync: dict[str, list] = {}
    if not a.analyse_only:
        fwd, real, block_bytes = calibrate(base, f"{a.out}/calibrate")
        # the simulated part of one block's sync, so that real + simulated ≈ link_ratio · F
        link_s = max(a.link_ratio * fwd - real, 0.25 * a.link_ratio * fwd)
        latency_ms = 0.2 * link_s * 1e3
        bandwidth = block_bytes / (0.8 * link_s) / 1e6
        print(f"# calibration: one block's forward F = {1e3 * fwd:.2f} ms; its shard {block_bytes / 1e3:.1f} kB "
              f"takes R = {1e3 * real:.2f} ms on the loopback network -> link latency {latency_ms:.2f} ms, "
              f"bandwidth {bandwidth:.1f} MB/s, so that one block's sync takes about R + {1e3 * link_s:.2f} ms "
              f"≈ {a.link_ratio:g}·F\n")
        link = dict(link_latency_ms=latency_ms, link_bandwidth_mb_s=bandwidth)
    rows = []
    for label, kw in cases:
        out = f"{a.out}/{kw['method']}-{kw.get('prefetch', '')}"
        run = Run(out) if a.analyse_only else launch(base.replace(out=out, **kw, **link), overwrite=True)
        cfg = run.config
        syncs = sync_steps(run)
        syncs.discard(cfg.steps)  # the final sync sits outside any training step
        pairs, slowest = sync_pairs(run, syncs)
        per_sync[label] = {"syncs": sorted(syncs), "sync_and_local_s": pairs, "slowest_sync_and_local_s": slowest}
        synced = [t for t, _ in pairs]
        local = [t for _, t in pairs]
        # overlap.py's definition: the share of the time with sync-group communication in flight during
        # which the same rank computed (each instant once), over the training steps after warm-up (the
        # warm-up's gradient all-reduces are synchronous training, not the method's sync)
        after_warmup = (cfg.schedule.warmup_steps, cfg.steps - 1)
        sync = comm_totals(run, steps=after_warmup, groups=["sync"])
        agg = comm_totals(run, steps=after_warmup, kinds=["sync_reduce"])
        hidden = sync["hidden_s"] / sync["total_s"] if sync["total_s"] > 0 else 0.0
        hidden_agg = agg["hidden_s"] / agg["total_s"] if agg["total_s"] > 0 else 0.0
        if label == "edit, prefetch on":
            edit_units = unit_exposure(run, cfg.steps)
            edit_extra = extra_breakdown(run, syncs)
            fig_path = Path(a.out) / "edit-prefetch-timeline.html"
            timeline_figure(run, steps=sync_window(run)).write_html(fig_path, include_plotlyjs="cdn")
        rows.append(Row(label, statistics.median(synced), statistics.median(local),
                        statistics.median(t / loc for t, loc in pairs), statistics.median(t - loc for t, loc in pairs),
                        hidden, hidden_agg, statistics.median(t - loc for t, loc in slowest)))
    print("| method | sync step (ms) | local step (ms) | sync / local | extra (ms) | sync-group comm hidden | "
          "of it, the aggregate all-reduce | extra, slowest replica's step (ms) |")
    print("|---|---:|---:|---:|---:|---:|---:|---:|")
    for r in rows:
        print(f"| {r.label} | {1e3 * r.sync_s:.1f} | {1e3 * r.local_s:.1f} | {r.ratio:.2f}× | {1e3 * r.extra_s:.1f} | "
              f"{r.hidden:.0%} | {r.hidden_agg:.0%} | {1e3 * r.extra_slowest_s:.1f} |")
    print(f"\nedit with prefetch, per unit at a sync (rank 0, medians; unit 0 = embeddings + head):\n{edit_units}")
    print(f"\nedit with prefetch, a sync step minus its neighbours, per kind of span (rank 0, ms): {edit_extra}")
    print(f"timeline of its first sync step: {fig_path}")
    edit, diloco = rows[0], rows[-1]
    print(f"\nEDiT with prefetch: {edit.ratio:.2f}× (target ≤ 1.05×), {edit.hidden:.0%} of its sync-group "
          f"communication hidden ({edit.hidden_agg:.0%} of the aggregate all-reduce; target ≥ 80%); its extra time "
          f"is {edit.extra_s / diloco.extra_s:.0%} of DiLoCo's (target < 50%)\n", flush=True)
    return {"link": link, "seed": base.seed, "rows": [r._asdict() | per_sync[r.label] for r in rows],
            "edit_units": edit_units, "edit_extra": edit_extra}


def loss(a: argparse.Namespace) -> dict:
    """Part 2: validation loss after the same tokens, no simulated link (tiny model, 2 × 2, default batch)."""
    loss_base = RunConfig(model="tiny", shards=2, replicas=2, steps=a.loss_steps, warmup_steps=a.loss_steps // 10,
                          sync_interval=10, eval_every=0, eval_batches=8, progress=False)
    print(f"| method (tiny, 2×2, {a.loss_steps} steps, same tokens) | final val loss | vs sync |\n|---|---:|---:|")
    losses = {}
    for method in ("sync", "post_local_sgd", "diloco", "edit"):
        run = launch(loss_base.replace(method=method, out=f"{a.out}/loss-{method}"), overwrite=True)
        losses[method] = run.summary["final_val_loss"]
        print(f"| {method} | {losses[method]:.4f} | {losses[method] / losses['sync'] - 1:+.1%} |", flush=True)
    return {"seed": loss_base.seed, "final_val_loss": losses}


if __name__ == "__main__":
    sys.exit(main())
