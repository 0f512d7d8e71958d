"""A-EDiT, EDiT, DiLoCo, sync and backup workers at equal virtual time: many replicas of `tiny`, a few 2x slow, a slow link.

The paper's straggler experiment on the virtual clock (edit_lab/clock/virtual.py): the lab's own trainer and
methods with real numerics, every rank a thread of one process, time advanced by a cost model, so the
race is decided by the schedule, not by how this machine's cores are shared. The cost model is measured
here first: a short real EDiT run of `tiny` on 1 shard x 2 replicas (a core per rank on 2 cores) is
calibrated (`sim.calibrate`), and every virtual run uses those compute costs. The sync group's link is
the named profile's, so that sync's per-step all-reduce matters:

    python benchmarks/virtual_race.py [--replicas 8] [--seeds 0 1 2] [--budget 2.0] [--json virtual_race.json]

Per run: the final validation loss of the agreed model, tokens trained, steps per replica. The summary
pairs A-EDiT with EDiT and with sync seed by seed.
"""

from __future__ import annotations

import argparse
import statistics
import sys
import tempfile
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))
sys.path.insert(0, str(HERE.parent))

from results_io import load_average, write_result  # noqa: E402

#: The named link profile: what separates the replicas (the sync group); the shard group is not used (1 shard).
PROFILES = {
    "slow-link": {"link_latency_ms": 5.0, "link_bandwidth_mb_s": 50.0,
                  "about": "5 ms and 50 MB/s between replicas (tiny's 0.9 MB of float32 parameters take ~19 ms "
                           "plus the latency per unit to cross once), against a ~30 ms step"},
}
METHODS = ("sync", "backup", "edit", "aedit", "diloco")
BASE = dict(model="tiny", shards=1, seq_len=64, batch_size=8, warmup_steps=2, sync_interval=4, eval_every=0,
            eval_batches=4, progress=False)


def calibrate_here(tmp: Path) -> Path:
    """A short real EDiT run of tiny, 1 x 2 (a core per rank on 2 cores): the directory the costs come from."""
    from edit_lab import RunConfig, launch

    cfg = RunConfig(method="edit", replicas=2, steps=16, out=str(tmp / "calibration"), **BASE)
    return launch(cfg, overwrite=True).path


def row_name(period_steps: float) -> str:
    """The rows of A-EDiT at a period other than the first of `--aedit-periods`: 'aedit T=8'."""
    return f"aedit T={period_steps:g}"


def race(replicas: int, seeds: list[int], budget: float, profile: str, costs_dir: Path, tmp: Path,
         aedit_periods: tuple[float, ...] = (4.0,)) -> tuple[list[dict], dict]:
    """Every method x seed on the virtual clock for `budget` virtual seconds: one row per run, and the cost
    model's figures (a step, a whole-model collective across the link, A-EDiT's period). A-EDiT runs once per
    entry of `aedit_periods` (T_sync in a fast replica's steps; the first is the method's row `aedit`, the others
    `aedit T=<n>`): τ fast steps syncs twice as often in time as EDiT, whose τ steps go at the slow pace."""
    from edit_lab import RunConfig, launch
    from edit_lab.clock.virtual import costs_for
    from edit_lab.core.comm import LinkModel

    slow = tuple(range(replicas - max(1, replicas // 8), replicas))
    link = {k: v for k, v in PROFILES[profile].items() if k != "about"}
    cfg = RunConfig(method="edit", replicas=replicas, time_budget=budget, clock="virtual",
                    clock_costs=str(costs_dir), straggler_replicas=slow, straggler_factor=2.0, **link, **BASE)
    costs = costs_for(cfg)
    step_s = costs.step_s
    cfg = cfg.replace(sync_period=aedit_periods[0] * step_s)  # A-EDiT's T_sync: by default τ fast steps
    link_s = LinkModel.of(cfg.link.latency_ms, cfg.link.bandwidth_mb_s).transfer_time(costs.model_bytes)
    figures = {"step_ms": round(1e3 * step_s, 2), "own_compute_ms": round(1e3 * costs.stretched_s, 2),
               "model_mb": round(costs.model_bytes / 1e6, 3), "link_ms_per_model": round(1e3 * link_s, 2),
               "sync_period_s": round(cfg.aedit.sync_period, 4), "slow_replicas": list(slow),
               "aedit_period_steps": list(aedit_periods)}
    rows = []
    runs = [(m, m, cfg) for m in METHODS] + [("aedit", row_name(p), cfg.replace(sync_period=p * step_s))
                                             for p in aedit_periods[1:]]
    for method, name, mcfg in runs:
        for seed in seeds:
            t0 = time.perf_counter()
            run = launch(mcfg.replace(method=method, seed=seed, out=str(tmp / f"{name}-{seed}")), overwrite=True)
            s = run.summary
            steps = [int(v["steps"]) for _, v in sorted(s["per_replica"].items(), key=lambda kv: int(kv[0]))]
            rows.append({"method": name, "seed": seed, "val": round(float(s["final_val_loss"]), 4),
                         "tokens": int(s["tokens"]), "steps_fast": steps[0], "steps_slow": steps[-1],
                         "virtual_s": round(float(s["wall_s"]), 4), "wall_s": round(time.perf_counter() - t0, 1)})
            r = rows[-1]
            print(f"{name:>9} seed {seed}: val {r['val']:.4f}  tokens {r['tokens']:>9,}  steps fast/slow "
                  f"{r['steps_fast']}/{r['steps_slow']}  ({r['wall_s']:.0f} s wall)", flush=True)
    return rows, figures


def paired(rows: list[dict], a: str, b: str) -> dict:
    """a against b seed by seed: the mean of b − a (positive: a lower) and the seeds where a was lower."""
    from edit_course.claims.stragglers import seed_differences

    d = seed_differences(*({r["seed"]: r["val"] for r in rows if r["method"] == m} for m in (a, b)))
    return {"mean_lower": round(statistics.mean(d), 4) if d else None, "lower_in": sum(1 for x in d if x > 0),
            "seeds": len(d)}


def table_lines(data: dict) -> list[str]:
    """The benchmarks page's table: per method, val loss mean and spread over the seeds, tokens, steps of a fast and a slow replica."""
    rows = data["runs"]
    out = ["| method | seeds | val loss mean | spread (max − min) | tokens (mean) | steps fast / slow replica |",
           "|---|---:|---:|---:|---:|---|"]
    for m in dict.fromkeys([*METHODS, *(r["method"] for r in rows)]):
        mine = [r for r in rows if r["method"] == m]
        if not mine:
            continue
        vals = [r["val"] for r in mine]
        out.append(f"| {m} | {len(mine)} | {statistics.mean(vals):.3f} | {max(vals) - min(vals):.3f} | "
                   f"{statistics.mean(r['tokens'] for r in mine):,.0f} | {mine[0]['steps_fast']} / {mine[0]['steps_slow']} |")
    return out


def paired_lines(data: dict) -> list[str]:
    """The second table: A-EDiT against EDiT, sync and backup, EDiT and backup against sync, paired by seed (the mean
    of a − b: negative where a ended lower), computed from the runs (a pair whose rows a result lacks is left out)."""
    out = ["| comparison, paired by seed | mean loss difference (a − b) | a lower in |", "|---|---:|---|"]
    names = {"aedit": "A-EDiT", "edit": "EDiT", "sync": "sync", "backup": "backup"}
    others = [(row_name(p), f"A-EDiT, T_sync = {p:g} fast steps")
              for p in data.get("costs", {}).get("aedit_period_steps", [])[1:]]
    pairs = [("aedit", "edit"), ("aedit", "sync"), ("edit", "sync"), ("backup", "sync"), ("aedit", "backup")]
    pairs += [(row, b) for row, _ in others for b in ("edit", "sync", "backup")]
    names.update(others)
    present = {r["method"] for r in data["runs"]}
    for a, b in pairs:
        if not {a, b} <= present:
            continue
        p = paired(data["runs"], a, b)
        out.append(f"| {names[a]} against {names[b]} | {-p['mean_lower']:+.3f} | {p['lower_in']} of {p['seeds']} seeds |")
    return out


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--replicas", type=int, default=8)
    ap.add_argument("--seeds", type=int, nargs="+", default=[0, 1, 2])
    ap.add_argument("--budget", type=float, default=2.0, help="virtual seconds every run trains for")
    ap.add_argument("--profile", choices=sorted(PROFILES), default="slow-link")
    ap.add_argument("--aedit-periods", type=float, nargs="+", default=[4.0],
                    help="A-EDiT's T_sync in a fast replica's steps, one race row each (the first: the row 'aedit')")
    ap.add_argument("--json", default=None, help="write the result file (a bare name lands in benchmarks/results)")
    args = ap.parse_args(argv)
    load = load_average()
    t0 = time.perf_counter()
    with tempfile.TemporaryDirectory() as tmp:
        costs_dir = calibrate_here(Path(tmp))
        rows, figures = race(args.replicas, args.seeds, args.budget, args.profile, costs_dir, Path(tmp),
                             tuple(args.aedit_periods))
    data = {"replicas": args.replicas, "budget_s": args.budget, "profile": args.profile,
            "profile_about": PROFILES[args.profile]["about"], "costs": figures, "runs": rows,
            "paired": {"aedit_vs_edit": paired(rows, "aedit", "edit"), "aedit_vs_sync": paired(rows, "aedit", "sync"),
                       "edit_vs_sync": paired(rows, "edit", "sync"), "backup_vs_sync": paired(rows, "backup", "sync"),
                       "aedit_vs_backup": paired(rows, "aedit", "backup"),
                       **{f"{row_name(p)}_vs_{b}": paired(rows, row_name(p), b) for p in args.aedit_periods[1:]
                          for b in ("edit", "sync")}},
            "wall_s": round(time.perf_counter() - t0, 1)}
    print("\n".join(table_lines(data) + [""] + paired_lines(data)))
    if args.json:
        write_result(args.json, data, __file__, sys.argv[1:] if argv is None else argv, load_before=load)
    return 0


if __name__ == "__main__":
    sys.exit(main())
