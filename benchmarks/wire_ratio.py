"""Bytes of the sync group's pseudo-gradients against float32's, by the runs' own events, and what each format
costs in loss (issue 48 item 2).

DiLoCo, nano, 24 steps, H = 4, on the virtual clock; R = 64 in its time-only mode (`virtual_compute="charged"`:
the collectives and charges of the real schedule on tiny stand-in tensors, declared at the real model's bytes,
so no loss). The loss: the agreed model's final validation loss, every format at R = 2, 4, 8 for each seed
(`--seeds`), against float32's seed by seed.

Usage: python -m benchmarks.wire_ratio [R ...] [--seeds 0 1 2] [--json wire_ratio.json]"""

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

FORMATS = ("none", "bf16", "int8", "int4")


def sync_bytes(run) -> int:
    """Bytes rank 0 sent for pseudo-gradients (warm-up gradient all-reduces left out)."""
    from edit_lab.core.wire import PSEUDO_GRADIENT_KINDS

    return sum(int(e["bytes"]) for e in run.events
               if e["rank"] == 0 and e.get("group") == "sync" and e["kind"] in PSEUDO_GRADIENT_KINDS)


def measure(R: int, fmt: str, seed: int, out: str) -> dict:
    from edit_lab import launch
    from edit_lab.config import RunConfig

    charged = R > 8
    cfg = RunConfig(model="nano", method="diloco", shards=1, replicas=R, steps=24, warmup_steps=2, sync_interval=4,
                    seq_len=32, batch_size=4, eval_every=0, progress=False, clock="virtual", seed=seed,
                    virtual_compute="charged" if charged else "real", wire_format=fmt, timeout_s=600,
                    out=f"{out}/R{R}-{fmt}-{seed}")
    run = launch(cfg, overwrite=True)
    return {"replicas": R, "format": fmt, "seed": seed, "bytes": sync_bytes(run),
            "val": None if charged else round(float(run.summary["final_val_loss"]), 4)}


def table_lines(data: dict) -> list[str]:
    """Per R: each format's bytes ÷ float32's; and per format the mean loss difference against float32 (paired by
    seed) beside float32's own spread over the seeds."""
    rows = data["runs"]
    out = ["| replicas | " + " | ".join(f"{f} ÷ none (bytes)" for f in FORMATS[1:]) + " | "
           + " | ".join(f"{f} − none (loss)" for f in FORMATS[1:]) + " | none's spread over seeds |",
           "|---:|" + "---:|" * (2 * (len(FORMATS) - 1) + 1)]
    for R in sorted({r["replicas"] for r in rows}):
        mine = [r for r in rows if r["replicas"] == R]
        by = {(r["format"], r["seed"]): r for r in mine}
        seeds = sorted({r["seed"] for r in mine})
        ratio = [by[(f, seeds[0])]["bytes"] / by[("none", seeds[0])]["bytes"] for f in FORMATS[1:]]
        if by[("none", seeds[0])]["val"] is None:
            diffs = ["–"] * (len(FORMATS) - 1)
            spread = "–"
        else:
            diffs = [f"{statistics.mean(by[(f, s)]['val'] - by[('none', s)]['val'] for s in seeds):+.4f}"
                     for f in FORMATS[1:]]
            vals = [by[("none", s)]["val"] for s in seeds]
            spread = f"{max(vals) - min(vals):.4f}"
        out.append(f"| {R} | " + " | ".join(f"{x:.3f}" for x in ratio) + " | " + " | ".join(diffs)
                   + f" | {spread} |")
    return out


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("replicas", type=int, nargs="*", default=[2, 4, 8, 64])
    ap.add_argument("--seeds", type=int, nargs="+", default=[0, 1, 2])
    ap.add_argument("--json", default=None, help="write the result file (a bare name lands in benchmarks/results)")
    args = ap.parse_args(argv)
    load = load_average()
    t0 = time.perf_counter()
    runs = []
    with tempfile.TemporaryDirectory() as d:
        for R in args.replicas:
            for seed in (args.seeds if R <= 8 else args.seeds[:1]):  # R = 64 counts bytes only
                for fmt in FORMATS:
                    runs.append(measure(R, fmt, seed, d))
                    print(runs[-1], flush=True)
    data = {"steps": 24, "sync_interval": 4, "model": "nano", "method": "diloco", "runs": runs,
            "wall_s": round(time.perf_counter() - t0, 1)}
    print("\n".join(table_lines(data)))
    if args.json:
        write_result(args.json, data, __file__, sys.argv[1:] if argv is None else argv, load_before=load)
    return 0


if __name__ == "__main__":
    sys.exit(main())
