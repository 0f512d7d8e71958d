"""What does a sync step cost? EDiT with and without prefetch against DiLoCo, over a slow link; and loss.

Part 1 (issue 3's overlap target). First a short calibration run measures one block's forward
compute time F and its shard's size B; the simulated sync link is then set so that one unit's sync
transfer takes about F (latency 0.2·F, bandwidth B / 0.8·F). Then, in one run of this script,
`edit` with prefetch, `edit` without, and `diloco` train the same model, and for each we report
the median time of a sync step divided by the median time of a local step (the step that carries
the sync: for EDiT the step whose forward syncs, for DiLoCo the step whose end syncs), the extra
time of a sync step, and the fraction of sync-group communication hidden under compute.
Targets: edit with prefetch ≤ 1.3×, and less than half of DiLoCo's extra time.

Part 2: validation loss after the same number of tokens for sync, post_local_sgd, diloco and edit
(no simulated link: this is about what the methods learn). Target: edit within 5% of sync.

    python benchmarks/edit_overlap.py [--model tiny] [--steps 60] [--loss-steps 300]
"""

from __future__ import annotations

import argparse
import statistics
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from edit_lab import RunConfig, launch  # noqa: E402
from edit_lab.analysis import comm_split  # noqa: E402


def step_times(run) -> dict[int, float]:
    """Per step, the slowest replica's duration (begin of step to end of its optimizer/sync)."""
    out: dict[int, float] = {}
    for m in run.metrics:
        if m["kind"] == "train":
            out[m["step"]] = max(out.get(m["step"], 0.0), m["dt"])
    return out


def sync_steps(run) -> set[int]:
    return {e["step"] for e in run.events if e["kind"] == "sync_reduce" and e["rank"] == 0}


def calibrate(base: RunConfig, out: str) -> tuple[float, int]:
    """(median forward seconds of one block, bytes of one block's shard) from a short sync run."""
    run = launch(base.replace(method="sync", steps=12, out=out))
    fwd = [e["t1"] - e["t0"] for e in run.events if e["kind"] == "compute_fwd" and (e["unit"] or 0) >= 1
           and e["step"] >= 4]
    block_bytes = [e["bytes"] for e in run.events if e["kind"] == "all_gather" and e["unit"] == 1][0] // base.shards
    return statistics.median(fwd), block_bytes


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--model", default="tiny")
    ap.add_argument("--steps", type=int, default=60)
    ap.add_argument("--loss-steps", type=int, default=300)
    ap.add_argument("--out", default=str(ROOT / "runs" / "bench-edit"))
    a = ap.parse_args()
    base = RunConfig(model=a.model, shards=2, replicas=2, steps=a.steps, warmup_steps=4, sync_interval=4,
                     eval_every=0, eval_batches=2, progress=False)
    fwd, block_bytes = calibrate(base, f"{a.out}/calibrate")
    latency_ms = 0.2 * fwd * 1e3
    bandwidth = block_bytes / (0.8 * fwd) / 1e6
    print(f"# calibration: one block's forward {1e3 * fwd:.2f} ms, its shard {block_bytes / 1e3:.1f} kB -> link "
          f"latency {latency_ms:.2f} ms, bandwidth {bandwidth:.1f} MB/s (one unit's sync ≈ one unit's forward)\n")
    link = dict(link_latency_ms=latency_ms, link_bandwidth_mbps=bandwidth)
    cases = [("edit, prefetch on", dict(method="edit", prefetch=True)),
             ("edit, prefetch off", dict(method="edit", prefetch=False)),
             ("diloco", dict(method="diloco"))]
    rows = []
    for label, kw in cases:
        run = launch(base.replace(out=f"{a.out}/{kw['method']}-{kw.get('prefetch', '')}", **kw, **link))
        times, syncs = step_times(run), sync_steps(run)
        syncs.discard(a.steps)  # the final sync sits outside any training step
        local = [t for s, t in times.items() if s >= base.warmup_steps + 1 and s not in syncs]
        synced = [times[s] for s in syncs if s in times]
        split = comm_split(run, by=("kind",))
        row = split[split["kind"] == "sync_reduce"]
        hidden = float(row["hidden_s"].sum() / row["total_s"].sum()) if float(row["total_s"].sum()) > 0 else 0.0
        rows.append((label, statistics.median(synced), statistics.median(local), hidden))
    print("| method | sync step (ms) | local step (ms) | sync / local | extra (ms) | sync-group comm hidden |")
    print("|---|---:|---:|---:|---:|---:|")
    for label, s, loc, hidden in rows:
        print(f"| {label} | {1e3 * s:.1f} | {1e3 * loc:.1f} | {s / loc:.2f}× | {1e3 * (s - loc):.1f} | {hidden:.0%} |")
    extra = {label: s - loc for label, s, loc, _ in rows}
    print(f"\nEDiT with prefetch: {rows[0][1] / rows[0][2]:.2f}× (target ≤ 1.3×); its extra time is "
          f"{extra['edit, prefetch on'] / extra['diloco']:.0%} of DiLoCo's (target < 50%)\n", flush=True)

    loss_base = base.replace(steps=a.loss_steps, warmup_steps=a.loss_steps // 10, sync_interval=10,
                             eval_every=0, eval_batches=8)
    print(f"| method (2×2, {a.loss_steps} steps, same tokens) | final val loss | vs sync |\n|---|---:|---:|")
    losses = {}
    for method in ("sync", "post_local_sgd", "diloco", "edit"):
        run = launch(loss_base.replace(method=method, out=f"{a.out}/loss-{method}"))
        losses[method] = run.summary["final_val_loss"]
        print(f"| {method} | {losses[method]:.4f} | {losses[method] / losses['sync'] - 1:+.1%} |", flush=True)
    print(f"\ncommand: python benchmarks/edit_overlap.py --model {a.model} --steps {a.steps} --loss-steps {a.loss_steps}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
