"""Backup workers against sync under a 3x straggler, 1 shard x 4 replicas (issue 48 item 3).

`backup` (m = 3 of 4) and `sync`, side by side in one run of this script, with replica 3 three times slower:
tokens trained per second (by the runs' own metrics: the tokens of every step a replica's gradient was used
in, over the run's training time) and the final validation loss at equal steps. On the virtual clock for
seeds 0, 1, 2 (the default costs: the same on any machine), then one real pair on this machine's cores
(gloo, 4 processes), sync and backup one after the other:

    python benchmarks/backup_workers.py [--seeds 0 1 2] [--steps 24] [--json backup_workers.json]
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

METHODS = ("sync", "backup")
BASE = dict(model="nano", shards=1, replicas=4, seq_len=32, batch_size=4, eval_every=0, eval_batches=4,
            progress=False, straggler_replicas=(3,), straggler_factor=3.0)


def measure(clock: str, method: str, seed: int, steps: int, out: Path) -> dict:
    from edit_lab import RunConfig, launch

    run = launch(RunConfig(method=method, seed=seed, steps=steps, clock=clock, out=str(out), **BASE), overwrite=True)
    rows = [m for m in run.metrics if m["kind"] == "train"]
    train_s = max(m["t"] for m in rows)
    tokens = sum(m["tokens"] for m in rows)
    return {"clock": clock, "method": method, "seed": seed, "tokens": tokens, "train_s": round(train_s, 4),
            "tokens_per_s": round(tokens / train_s, 1), "dropped": sum(1 for m in rows if m.get("dropped")),
            "val": round(float(run.summary["final_val_loss"]), 4)}


def table_lines(data: dict) -> list[str]:
    """Per clock and method: tokens per second (mean over seeds), backup ÷ sync, validation loss mean and spread."""
    out = ["| clock | method | seeds | tokens / s | ÷ sync | val loss mean | spread | steps dropped |",
           "|---|---|---:|---:|---:|---:|---:|---:|"]
    for clock in ("virtual", "wall"):
        mine = [r for r in data["runs"] if r["clock"] == clock]
        if not mine:
            continue
        tps = {m: statistics.mean(r["tokens_per_s"] for r in mine if r["method"] == m) for m in METHODS}
        for m in METHODS:
            rs = [r for r in mine if r["method"] == m]
            vals = [r["val"] for r in rs]
            out.append(f"| {clock} | {m} | {len(rs)} | {tps[m]:,.0f} | {tps[m] / tps['sync']:.2f} | "
                       f"{statistics.mean(vals):.3f} | {max(vals) - min(vals):.3f} | "
                       f"{statistics.mean(r['dropped'] for r in rs):.0f} |")
    return out


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--seeds", type=int, nargs="+", default=[0, 1, 2])
    ap.add_argument("--steps", type=int, default=24)
    ap.add_argument("--json", default=None, help="write the result file (a bare name lands in benchmarks/results)")
    args = ap.parse_args(argv)
    load = load_average()
    t0 = time.perf_counter()
    runs = []
    with tempfile.TemporaryDirectory() as tmp:
        for clock, seeds in (("virtual", args.seeds), ("wall", args.seeds[:1])):
            for seed in seeds:
                for method in METHODS:
                    runs.append(measure(clock, method, seed, args.steps, Path(tmp) / f"{clock}-{method}-{seed}"))
                    print(runs[-1], flush=True)
    data = {"steps": args.steps, "straggler": "replica 3 of 4, 3x", "m": 3, "runs": runs,
            "wall_s": round(time.perf_counter() - t0, 1)}
    print("\n".join(table_lines(data)))
    if args.json:
        write_result(args.json, data, __file__, sys.argv[1:] if argv is None else argv, load_before=load)
    return 0


if __name__ == "__main__":
    sys.exit(main())
