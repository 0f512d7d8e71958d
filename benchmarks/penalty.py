"""Does EDiT's pseudo-gradient penalty protect training from a replica that goes bad?

One replica is fed corrupted data (random bytes by default) from the middle of the run on. The same
run is made on clean data, for three methods:

- ``edit``            EDiT with the full penalty (anomaly elimination, weighted averaging, clipping);
- ``edit-nopenalty``  EDiT with the three parts of the penalty switched off;
- ``diloco``          DiLoCo (outer Nesterov on the plain mean pseudo-gradient; it has no penalty).

Everything else (model, data, seeds, W, τ, outer optimizer 0.7/0.8 Nesterov) is the same, so the
rows differ by the method and the data only. Reported per method:

- final validation loss, clean and corrupted, and the relative change;
- the *largest loss spike*: the largest rise of the validation loss above the best value seen so
  far, max_i (v_i − min_{j ≤ i} v_j), over the evaluation points (every ``eval_every`` steps and at
  the end). The validation loss is always measured on the anchor (the model every replica agrees on),
  so the train loss of the corrupted replica itself, which is high by construction, is not counted;
- for ``edit``: how often the detector flagged the corrupted replica and a healthy one, and how much
  larger the corrupted replica's pseudo-gradient norm G was than the healthy ones' after the onset.

Target (issue 4): with the penalty, final validation loss within 5 % of the clean run and lower than
without it. Timings do not matter here, losses do.

Why 1 shard × 4 replicas by default: even a perfect penalty can only *drop* the bad replica, so the
anchor then learns from R − 1 replicas' data. With R = 2 that halves the data of the second half of
the run, which by itself costs more than 5 % on this model (measured: every corrupted pseudo-gradient
was excluded and the final loss was still 6.8 % above clean); with R = 4 it costs a quarter. Sharding
does not change the arithmetic of the penalty (G is summed over the shard group), so S = 1 loses
nothing here and keeps the run at four processes. `--shards 2 --replicas 2` shows the R = 2 case.

    python benchmarks/penalty.py            # prints the command, one line per run, then a markdown table
"""

from __future__ import annotations

import argparse
import math
import shlex
import statistics
import sys
import time
from pathlib import Path

from edit_lab import RunConfig, launch
from edit_lab.records.run import Run

sys.path.insert(0, str(Path(__file__).resolve().parent))
from results_io import load_average, write_result  # noqa: E402

PENALTY_OFF = dict(penalty_anomaly=False, penalty_weighting=False, penalty_clip=False)
VARIANTS: dict[str, dict] = {
    "edit": dict(method="edit"),
    "edit-nopenalty": dict(method="edit", **PENALTY_OFF),
    "diloco": dict(method="diloco"),
}


def largest_spike(val: list[tuple[int, float]]) -> float:
    """max_i (v_i − min_{j ≤ i} v_j): how far the validation loss ever rose above its best so far (≥ 0)."""
    best, worst_rise = math.inf, 0.0
    for _, v in val:
        best = min(best, v)
        worst_rise = max(worst_rise, v - best)
    return worst_rise


def detector_report(run: Run, bad: int, onset: int) -> dict:
    """What the penalty saw after the corruption began: flags and norms of the bad vs the healthy replicas."""
    after = [p for p in run.penalty if p["step"] > onset]
    if not after:
        return {}
    n_units = 1 + max(p["unit"] for p in after)
    syncs = sorted({p["step"] for p in after})
    bad_rows = [p for p in after if p["replica"] == bad]
    good_rows = [p for p in after if p["replica"] != bad]
    ratios = []
    for p in bad_rows:
        healthy = [q["G"] for q in good_rows if q["step"] == p["step"] and q["unit"] == p["unit"] and q["G"]]
        if p["G"] is not None and healthy:
            ratios.append(p["G"] / statistics.fmean(healthy))
    return {
        "syncs": len(syncs), "units": n_units,
        "bad_flagged": sum(p["outlier"] for p in bad_rows), "bad_total": len(bad_rows),
        "good_flagged": sum(p["outlier"] for p in good_rows), "good_total": len(good_rows),
        "bad_weight": statistics.fmean(p["weight"] for p in bad_rows),
        "g_ratio_median": statistics.median(ratios) if ratios else math.nan,
        "g_ratio_min": min(ratios) if ratios else math.nan,
        "skipped": sum(p["skipped"] for p in after if p["replica"] == 0),
    }


def base_config(args: argparse.Namespace) -> RunConfig:
    cfg = RunConfig(model=args.model, shards=args.shards, replicas=args.replicas, steps=args.steps,
                    warmup_steps=args.warmup, sync_interval=args.sync_interval, eval_every=args.eval_every,
                    eval_batches=args.eval_batches, seed=args.seed, threads=1, progress=False)
    if args.penalty_alpha is not None:
        cfg = cfg.replace(penalty_alpha=args.penalty_alpha)
    if args.penalty_arming is not None:
        cfg = cfg.replace(penalty_arming=args.penalty_arming)
    return cfg


def run_all(args: argparse.Namespace) -> list[dict]:
    base = base_config(args)
    onset = args.corrupt_from if args.corrupt_from >= 0 else args.steps // 2
    corrupt = dict(corrupt_replica=args.corrupt_replica, corrupt_from_step=onset, corrupt_mode=args.corrupt_mode)
    rows = []
    for name in args.methods:
        row: dict = {"name": name}
        for data, extra in (("clean", {}), ("corrupted", corrupt)):
            cfg = base.replace(**VARIANTS[name], **extra, out=str(Path(args.out) / f"{name}-{data}"))
            t = time.monotonic()
            run = launch(cfg, overwrite=True)  # a re-run replaces the runs in --out
            val = run.val_losses()
            row[data] = {"final": run.summary["final_val_loss"], "spike": largest_spike(val), "val": val}
            if name == "edit" and data == "corrupted":
                row["detector"] = detector_report(run, args.corrupt_replica, onset)
            print(f"  {name:>15} {data:>9}: final val loss {row[data]['final']:.4f}, "
                  f"largest spike {row[data]['spike']:.4f}  ({time.monotonic() - t:.0f} s)", flush=True)
        rows.append(row)
    return rows


def table(rows: list[dict]) -> str:
    lines = ["| method | val loss, clean | val loss, corrupted | change | largest spike, clean | "
             "largest spike, corrupted |",
             "|---|---:|---:|---:|---:|---:|"]
    for r in rows:
        c, k = r["clean"], r["corrupted"]
        change = 100 * (k["final"] / c["final"] - 1)
        lines.append(f"| {r['name']} | {c['final']:.4f} | {k['final']:.4f} | {change:+.1f} % | "
                     f"{c['spike']:.4f} | {k['spike']:.4f} |")
    return "\n".join(lines)


def verdict(rows: list[dict]) -> str:
    by = {r["name"]: r for r in rows}
    if "edit" not in by:
        return ""
    e = by["edit"]
    rel = e["corrupted"]["final"] / e["clean"]["final"] - 1
    out = [f"edit with the penalty: corrupted vs clean {100 * rel:+.1f} % "
           f"({'within' if abs(rel) <= 0.05 else 'NOT within'} 5 %)"]
    if "edit-nopenalty" in by:
        lower = e["corrupted"]["final"] < by["edit-nopenalty"]["corrupted"]["final"]
        out.append(f"lower than edit without the penalty on corrupted data: {'yes' if lower else 'NO'}")
    d = e.get("detector")
    if d:
        out.append(f"detector after the onset ({d['syncs']} syncs × {d['units']} units): corrupted replica flagged "
                   f"{d['bad_flagged']}/{d['bad_total']} (mean weight {d['bad_weight']:.3f}), healthy replicas "
                   f"flagged {d['good_flagged']}/{d['good_total']}, units skipped {d['skipped']}; its G / healthy G: "
                   f"median {d['g_ratio_median']:.2f}, min {d['g_ratio_min']:.2f}")
    return "\n".join(out)


def parse(argv: list[str] | None = None) -> argparse.Namespace:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--model", default="tiny")
    ap.add_argument("--shards", type=int, default=1)
    ap.add_argument("--replicas", type=int, default=4)
    ap.add_argument("--steps", type=int, default=240)
    ap.add_argument("--warmup", type=int, default=10)
    ap.add_argument("--sync-interval", type=int, default=10)
    ap.add_argument("--eval-every", type=int, default=10, help="10 = τ: every anchor is evaluated")
    ap.add_argument("--eval-batches", type=int, default=4)
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--corrupt-replica", type=int, default=1)
    ap.add_argument("--corrupt-from", type=int, default=-1, help="first corrupted step; -1: the middle of the run")
    ap.add_argument("--corrupt-mode", default="random", choices=("random", "shuffle", "corpus"))
    ap.add_argument("--methods", nargs="+", default=list(VARIANTS), choices=list(VARIANTS))
    ap.add_argument("--penalty-alpha", type=float, default=None, help="α of the detector (default: RunConfig's)")
    ap.add_argument("--penalty-arming", type=int, default=None, help="E of the detector (default: RunConfig's)")
    ap.add_argument("--out", default="runs/bench-penalty")
    ap.add_argument("--json", default="penalty.json", help="result file (a bare name: under benchmarks/results/)")
    return ap.parse_args(argv)


def main(argv: list[str] | None = None) -> None:
    args = parse(argv)
    argv = sys.argv[1:] if argv is None else argv
    load_before = load_average()
    print("$ python benchmarks/penalty.py " + " ".join(shlex.quote(a) for a in argv))
    print(f"{args.model} model, {args.shards} shards × {args.replicas} replicas, {args.steps} steps, W={args.warmup}, "
          f"τ={args.sync_interval}; replica {args.corrupt_replica} reads {args.corrupt_mode!r} data from step "
          f"{args.corrupt_from if args.corrupt_from >= 0 else args.steps // 2}", flush=True)
    base = base_config(args)
    print(f"penalty (edit): α={base.penalty.alpha}, E={base.penalty.arming}, δ={base.penalty.threshold}, "
          f"T={base.penalty.temperature}, φ={base.penalty.clip_norm}", flush=True)
    rows = run_all(args)
    print()
    print(table(rows))
    print()
    print("largest spike = max over evaluation points of (val loss − lowest val loss so far), on the anchor")
    print(verdict(rows))
    if args.json:  # every run's validation curve, the seed and the detector's counts
        write_result(args.json, {"seed": args.seed, "rows": rows, "table": table(rows).splitlines()}, __file__, argv,
                     load_before)


if __name__ == "__main__":
    main()
