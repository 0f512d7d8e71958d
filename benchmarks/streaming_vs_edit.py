"""Streaming DiLoCo's wire formats against DiLoCo and EDiT: bytes per collective, peak bytes per step, loss.

Every run is on the virtual clock (edit_lab/clock/virtual.py: the lab's own methods and real numerics, time from
the shipped calibration), `tiny` on 1 shard x 2 replicas, a fixed number of steps, 3 seeds; every figure is
read from the run's own records (its `sync_reduce` events on rank 0: the bytes each pseudo-gradient
collective carried, which is what the link charged):

- bytes per collective: what one sync-group pseudo-gradient collective carried (the lab records an all-reduce
  at the tensor's size and an all-gather at R payloads: int8 / int4 travel as an all-gather, edit_lab/core/wire.py);
- peak bytes per step: the most that one training step's pseudo-gradient collectives carried (DiLoCo sends the
  whole model at once, EDiT too within one forward, Streaming DiLoCo one fragment at a time); the closing sync
  after the last step (every fragment that trained since its landing, at once) is left out of the peak;
- mean bytes per step over the run, and the final validation loss of the agreed model, with and without
  error feedback.

    python benchmarks/streaming_vs_edit.py [--seeds 0 1 2] [--steps 40] [--json streaming_vs_edit.json]
    python benchmarks/render.py streaming_vs_edit
"""

from __future__ import annotations

import argparse
import statistics
import sys
import tempfile
from collections import defaultdict
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))
sys.path.insert(0, str(HERE.parent))

from results_io import write_result  # noqa: E402

from edit_course.claims.streaming import measure  # noqa: E402  (the one reading, notebook 09's too)

BASE = dict(model="tiny", shards=1, replicas=2, seq_len=64, batch_size=8, warmup_steps=4, sync_interval=8,
            eval_every=0, eval_batches=4, progress=False, clock="virtual")
STREAM = dict(method="streaming_diloco", fragments=4, fragment_sync_delay=1, fragment_update_alpha=0.5)
#: (row name, settings): the wire formats on Streaming DiLoCo, with and without error feedback, then the
#: whole-model methods in float32 and in int4 for the peak per step.
VARIANTS: tuple[tuple[str, dict], ...] = (
    ("streaming_diloco none", dict(**STREAM)),
    ("streaming_diloco bf16", dict(**STREAM, wire_format="bf16")),
    ("streaming_diloco bf16 +EF", dict(**STREAM, wire_format="bf16", error_feedback=True)),
    ("streaming_diloco int8", dict(**STREAM, wire_format="int8")),
    ("streaming_diloco int8 +EF", dict(**STREAM, wire_format="int8", error_feedback=True)),
    ("streaming_diloco int4", dict(**STREAM, wire_format="int4")),
    ("streaming_diloco int4 +EF", dict(**STREAM, wire_format="int4", error_feedback=True)),
    ("diloco none", dict(method="diloco")),
    ("diloco int4 +EF", dict(method="diloco", wire_format="int4", error_feedback=True)),
    ("edit none", dict(method="edit")),
    ("edit int4 +EF", dict(method="edit", wire_format="int4", error_feedback=True)),
)


def bench(seeds: list[int], steps: int, tmp: Path) -> list[dict]:
    from edit_lab import RunConfig, launch

    rows = []
    for name, kw in VARIANTS:
        for seed in seeds:
            cfg = RunConfig(**{**BASE, **kw, "seed": seed, "steps": steps, "out": str(tmp / f"{name}-{seed}")})
            m = measure(launch(cfg, overwrite=True))
            rows.append({"variant": name, "seed": seed, **m})
            print(f"{name:28s} seed {seed}: {m}", flush=True)
    return rows


def _mb(x: float) -> str:
    return f"{x / 1e6:.3f}"


def table_lines(data: dict) -> list[str]:
    """The published table: one row per variant, the loss as mean ± sd over the seeds and each seed's."""
    by: dict[str, list[dict]] = defaultdict(list)
    for r in data["rows"]:
        by[r["variant"]].append(r)
    ref = statistics.mean(r["peak_step_bytes"] for r in by["diloco none"])
    out = ["| method, wire format | bytes per collective | peak MB per step | vs DiLoCo float32 | mean MB per step "
           "| val loss (mean ± sd) | per seed |", "|---|---|---|---|---|---|---|"]
    for name, _ in VARIANTS:
        rs = by[name]
        sizes = sorted({b for r in rs for b in r["collective_bytes"]})
        peak = statistics.mean(r["peak_step_bytes"] for r in rs)
        losses = [r["val_loss"] for r in rs]
        sd = statistics.stdev(losses) if len(losses) > 1 else 0.0
        out.append(f"| {name} | {', '.join(f'{b:,}' for b in sizes)} | {_mb(peak)} | {peak / ref:.2f}x | "
                   f"{_mb(statistics.mean(r['mean_step_bytes'] for r in rs))} | {statistics.mean(losses):.4f} ± "
                   f"{sd:.4f} | {', '.join(f'{x:.4f}' for x in losses)} |")
    return out


def main(argv: list[str] | None = None) -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--seeds", type=int, nargs="+", default=[0, 1, 2])
    ap.add_argument("--steps", type=int, default=40)
    ap.add_argument("--json", default="streaming_vs_edit.json")
    a = ap.parse_args(argv)
    with tempfile.TemporaryDirectory() as tmp:
        rows = bench(a.seeds, a.steps, Path(tmp))
    data = {"settings": {**BASE, **STREAM, "steps": a.steps, "seeds": a.seeds}, "rows": rows}
    print("\n".join(table_lines(data)))
    write_result(a.json, data, __file__, argv if argv is not None else sys.argv[1:])


if __name__ == "__main__":
    main()
