"""Is our sharded engine as fast as PyTorch's own FSDP2? Step time of `sync` vs FSDP2 HSDP, in one run.

Both train the same model on the same 2×2 mesh (2 shards × 2 replicas, gloo, one thread per
rank), the same data and seeds, the same AdamW and gradient clipping; they match each other to
float tolerance (tests/distributed/test_engine.py), so the only difference left is the machinery.

- ours:  `launch(RunConfig(method="sync", ...))`; a step's time is the `dt` of the metrics rows
  (begin of the step to the end of the optimizer step), the slower replica's per step;
- FSDP2: `edit_lab.reference.fsdp2`, `fully_shard` on every block and on the root on a
  replica × shard device mesh; a step's time is the slowest rank's, measured the same way.

The first `--warmup` steps (allocator, gloo connections, first-call costs) are left out; the
table reports the median of the remaining steps and the ratio ours / FSDP2 (target: ≤ 1.0 on CPU).
With `--repeats N` the two engines run alternately N times each and the medians pool every
repeat's steps: on a machine with other work running, a slow minute then hits both engines rather
than one (the per-repeat ratios are printed too, to show how noisy the machine was).

    python benchmarks/engine_vs_fsdp2.py [--steps 40] [--model tiny] [--warmup 5] [--repeats 2]
"""

from __future__ import annotations

import argparse
import shlex
import statistics
import sys
import tempfile
from pathlib import Path

from edit_lab import RunConfig, launch
from edit_lab.reference import fsdp2


def our_step_times(run) -> list[float]:
    """Per step, the slower replica's `dt` (a synchronous step ends when both replicas have)."""
    by_step: dict[int, float] = {}
    for m in run.metrics:
        if m["kind"] == "train":
            by_step[m["step"]] = max(by_step.get(m["step"], 0.0), m["dt"])
    return [by_step[s] for s in sorted(by_step)]


def after_warmup(times: list[float], warmup: int) -> list[float]:
    kept = times[warmup:]
    if not kept:
        raise ValueError(f"no steps left after {warmup} warm-up steps")
    return kept


def median_ms(times: list[float]) -> float:
    return 1e3 * statistics.median(times)


def table(ours: list[float], ref: list[float], ratios: list[float], steps: int, warmup: int) -> str:
    ours_ms, ref_ms = median_ms(ours), median_ms(ref)
    rows = [
        f"| engine (2×2, median of steps {warmup}..{steps - 1}, {len(ratios)} repeat(s)) | step time (ms) |",
        "|---|---:|",
        f"| ours (`sync`, ZeRO-3 units + gradient all-reduce) | {ours_ms:.1f} |",
        f"| FSDP2 (`fully_shard`, HSDP) | {ref_ms:.1f} |",
        f"| **ratio ours / FSDP2** | **{ours_ms / ref_ms:.2f}** |",
    ]
    if len(ratios) > 1:
        rows.append(f"| ratio per repeat | {', '.join(f'{r:.2f}' for r in ratios)} |")
    return "\n".join(rows)


def parse(argv: list[str] | None = None) -> argparse.Namespace:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--steps", type=int, default=40, help="training steps of each engine")
    ap.add_argument("--model", default="tiny", help="a model size of edit_lab.model.SIZES")
    ap.add_argument("--warmup", type=int, default=5, help="first steps left out of the median")
    ap.add_argument("--repeats", type=int, default=2, help="run the two engines alternately this many times each")
    ap.add_argument("--out", default=None, help="directory for both runs (default: a temporary one)")
    return ap.parse_args(argv)


def main(argv: list[str] | None = None) -> float:
    argv = sys.argv[1:] if argv is None else argv
    args = parse(argv)
    print("$ python benchmarks/engine_vs_fsdp2.py " + " ".join(shlex.quote(a) for a in argv))
    with tempfile.TemporaryDirectory() as tmp:
        out = Path(args.out or tmp)
        cfg = RunConfig(method="sync", shards=2, replicas=2, model=args.model, steps=args.steps, eval_every=0,
                        progress=False)
        cfg.validate()
        print(f"{args.model} model, seq_len {cfg.seq_len}, batch {cfg.batch_size} per rank, {cfg.shards} shards × "
              f"{cfg.replicas} replicas, {args.steps} steps ({args.warmup} warm-up), {args.repeats} repeat(s)",
              flush=True)
        ours: list[float] = []
        ref: list[float] = []
        ratios: list[float] = []
        for i in range(args.repeats):
            o = after_warmup(our_step_times(launch(cfg.replace(out=str(out / f"ours{i}")))), args.warmup)
            f = after_warmup(fsdp2(cfg, out / f"fsdp2-{i}")["step_times"], args.warmup)
            ratios.append(statistics.median(o) / statistics.median(f))
            print(f"  repeat {i}: ours {median_ms(o):.1f} ms, FSDP2 {median_ms(f):.1f} ms", flush=True)
            ours += o
            ref += f
    print()
    print(table(ours, ref, ratios, args.steps, args.warmup))
    return statistics.median(ours) / statistics.median(ref)


if __name__ == "__main__":
    main()
