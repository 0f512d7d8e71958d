"""Is our sharded engine as fast as PyTorch's own FSDP2? Step time of `sync` vs FSDP2 HSDP, like with like.

Both train the same model on the same 2×2 mesh (2 shards × 2 replicas, gloo, one thread per
rank), the same data and seeds, the same AdamW and gradient clipping; they match each other to
float tolerance (tests/distributed/test_engine.py), so the only difference left is the machinery.

Two settings, each compared with its FSDP2 counterpart:

- **re-gather** — ours with `reshard_after_forward=True` (blocks freed after their forward and
  all-gathered again in the backward, prefetched one block ahead) against FSDP2's default
  (`fully_shard(block)`, which does the same);
- **keep** — ours with `reshard_after_forward=False` against `fully_shard(block,
  reshard_after_forward=False)`: no backward all-gather in either, the whole model gathered at the peak.

- ours:  `launch(RunConfig(method="sync", ...))`; a step's time is the `dt` of the metrics rows
  (begin of the step to the end of the optimizer step), the slower replica's per step;
- FSDP2: `tests.oracles.fsdp2.fsdp2`, `fully_shard` on every block and on the root on a
  replica × shard device mesh; a step's time is the slowest rank's, measured the same way.

The first `--warmup` steps (allocator, gloo connections, first-call costs) are left out; the
table reports the median of the remaining steps and the ratio ours / FSDP2 per setting (target:
≤ 1.0 on CPU in each). With `--repeats N` the engines run alternately N times each and the medians
pool every repeat's steps: on a machine with other work running, a slow minute then hits every
engine rather than one (the per-repeat ratios are printed too, to show how noisy the machine was).

    python benchmarks/engine_vs_fsdp2.py [--steps 40] [--model tiny] [--warmup 5] [--repeats 2]
                                         [--settings regather keep]
"""

from __future__ import annotations

import argparse
import shlex
import statistics
import sys
import tempfile
from pathlib import Path

from edit_lab import RunConfig, launch

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # the oracles live with the tests
from tests.oracles.fsdp2 import fsdp2  # noqa: E402

sys.path.insert(0, str(Path(__file__).resolve().parent))
from results_io import load_average, write_result  # noqa: E402


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


SETTINGS = {  # name: (reshard_after_forward, row label)
    "regather": (True, "re-gather in the backward (`reshard_after_forward=True`; FSDP2's default)"),
    "keep": (False, "keep gathered until the backward (`reshard_after_forward=False` in both)"),
}


def table(results: dict[str, tuple[list[float], list[float], list[float]]], steps: int, warmup: int) -> str:
    """`results[setting] = (our step times, FSDP2's, per-repeat ratios)` as one markdown table."""
    repeats = max(len(r[2]) for r in results.values())
    rows = [
        f"| setting (2×2, median of steps {warmup}..{steps - 1}, {repeats} repeat(s)) | ours (ms) | FSDP2 (ms) "
        "| **ratio ours / FSDP2** | ratio per repeat |",
        "|---|---:|---:|---:|---|",
    ]
    for name, (ours, ref, ratios) in results.items():
        ours_ms, ref_ms = median_ms(ours), median_ms(ref)
        rows.append(f"| {SETTINGS[name][1]} | {ours_ms:.1f} | {ref_ms:.1f} | **{ours_ms / ref_ms:.2f}** "
                    f"| {', '.join(f'{r:.2f}' for r in ratios)} |")
    return "\n".join(rows)


def table_of_result(data: dict) -> str:
    """The table of a result file written by `main` (steps pooled over its repeats, as `main` prints it)."""
    results = {name: ([t for rep in r["ours_s"] for t in rep], [t for rep in r["fsdp2_s"] for t in rep], r["ratios"])
               for name, r in data["settings"].items()}
    return table(results, data["steps"], data["warmup"])


def parse(argv: list[str] | None = None) -> argparse.Namespace:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--steps", type=int, default=40, help="training steps of each engine")
    ap.add_argument("--model", default="tiny", help="a model size of edit_lab.sizes.SIZES")
    ap.add_argument("--warmup", type=int, default=5, help="first steps left out of the median")
    ap.add_argument("--repeats", type=int, default=2, help="run the engines alternately this many times each")
    ap.add_argument("--settings", nargs="+", choices=list(SETTINGS), default=list(SETTINGS),
                    help="regather: ours and FSDP2 re-gathering in the backward; keep: neither")
    ap.add_argument("--out", default=None, help="directory for both runs (default: a temporary one)")
    ap.add_argument("--json", default="engine_vs_fsdp2.json",
                    help="result file (a bare name: under benchmarks/results/); every repeat's step times")
    return ap.parse_args(argv)


def main(argv: list[str] | None = None) -> dict[str, float]:
    """Run the benchmark; returns the ratio ours / FSDP2 of each setting."""
    argv = sys.argv[1:] if argv is None else argv
    args = parse(argv)
    load_before = load_average()
    print("$ python benchmarks/engine_vs_fsdp2.py " + " ".join(shlex.quote(a) for a in argv))
    with tempfile.TemporaryDirectory() as tmp:
        out = Path(args.out or tmp)
        cfg = RunConfig(method="sync", shards=2, replicas=2, model=args.model, steps=args.steps, eval_every=0,
                        progress=False)
        cfg.validate()
        print(f"{args.model} model, seq_len {cfg.data.seq_len}, batch {cfg.data.batch_size} per rank, {cfg.shards} shards × "
              f"{cfg.replicas} replicas, {args.steps} steps ({args.warmup} warm-up), {args.repeats} repeat(s)",
              flush=True)
        results: dict[str, tuple[list[float], list[float], list[float]]] = {n: ([], [], []) for n in args.settings}
        repeats: dict[str, dict[str, list]] = {n: {"ours_s": [], "fsdp2_s": [], "ratios": []} for n in args.settings}
        for i in range(args.repeats):
            for name in args.settings:
                c = cfg.replace(reshard_after_forward=SETTINGS[name][0])
                o = after_warmup(our_step_times(launch(c.replace(out=str(out / f"ours-{name}-{i}")), overwrite=True)), args.warmup)
                f = after_warmup(fsdp2(c, out / f"fsdp2-{name}-{i}")["step_times"], args.warmup)
                ours, ref, ratios = results[name]
                ratios.append(statistics.median(o) / statistics.median(f))
                print(f"  repeat {i}, {name}: ours {median_ms(o):.1f} ms, FSDP2 {median_ms(f):.1f} ms", flush=True)
                ours += o
                ref += f
                repeats[name]["ours_s"].append(o)
                repeats[name]["fsdp2_s"].append(f)
                repeats[name]["ratios"].append(ratios[-1])
    print()
    print(table(results, args.steps, args.warmup))
    if args.json:
        path = write_result(args.json, {"model": args.model, "steps": args.steps, "warmup": args.warmup,
                                        "repeats": args.repeats, "settings": repeats}, __file__, argv, load_before)
        print(f"result: {path.name}")
    return {n: statistics.median(o) / statistics.median(f) for n, (o, f, _) in results.items()}


if __name__ == "__main__":
    main()
