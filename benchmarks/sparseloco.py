"""SparseLoCo's wire format beside DiLoCo in float32 and in int4: bytes of the sync group and validation loss.

DiLoCo on the virtual clock (the lab's own numerics, time from the shipped calibration), `tiny` on 1 shard × 4
replicas, a fixed number of steps, 3 seeds. Bytes are the runs' own events: rank 0's sync-group pseudo-gradient
collectives (`PSEUDO_GRADIENT_KINDS`), what one rank sends on a ring (`wire.ring_bytes`); the warm-up gradient
all-reduces are left out. Loss: the final validation loss of the agreed model. Every run trains the same tokens.

- DiLoCo float32 and int4 (with error feedback) at H = 8, DiLoCo's outer Nesterov (lr 0.7, momentum 0.8);
- sparseloco at H = 8: chunked top-k (64 of 4096) in 2 bits, error feedback β = 0.95, outer SGD lr 1, momentum 0;
- **at equal bytes**: sparseloco synced after every step (44 syncs against 6), and sparseloco at H = 8 keeping 12.5 % of
  each chunk; each spends about int4's bytes (the table gives each row's measured bytes against int4's).

    python benchmarks/sparseloco.py [--seeds 0 1 2] [--steps 48] [--json sparseloco.json]
    python benchmarks/render.py --update docs/benchmarks.md
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

from results_io import load_average, write_result  # noqa: E402

BASE = dict(model="tiny", method="diloco", shards=1, replicas=4, seq_len=64, batch_size=8, warmup_steps=4,
            eval_every=0, eval_batches=4, progress=False, clock="virtual")
SPARSE = dict(wire_format="sparseloco", error_feedback=True, outer_momentum=0.0, outer_lr=1.0)
#: (row name, settings)
VARIANTS: list[tuple[str, dict]] = [
    ("DiLoCo float32, H 8", dict(sync_interval=8)),
    ("DiLoCo int4 + EF, H 8", dict(sync_interval=8, wire_format="int4", error_feedback=True)),
    ("sparseloco 1.56 %, H 8", dict(sync_interval=8, **SPARSE)),
    ("sparseloco 1.56 %, H 1 (equal bytes)", dict(sync_interval=1, **SPARSE)),
    ("sparseloco 12.5 %, H 8 (equal bytes)", dict(sync_interval=8, sparseloco_topk=0.125, **SPARSE)),
]


def measure(cfg) -> dict:
    from edit_lab import launch
    from edit_lab.core.wire import PSEUDO_GRADIENT_KINDS

    run = launch(cfg)
    events = [e for e in run.events
              if e["rank"] == 0 and e.get("group") == "sync" and e["kind"] in PSEUDO_GRADIENT_KINDS]
    return {"sync_bytes": sum(int(e["bytes"]) for e in events), "syncs": len(events),
            "val_loss": float(run.summary["final_val_loss"])}


def table_lines(data: dict) -> list[str]:
    """One row per variant: bytes (MB, and against int4's), syncs, loss mean ± sd and per seed."""
    by: dict[str, list[dict]] = defaultdict(list)
    for r in data["rows"]:
        by[r["variant"]].append(r)
    ref = statistics.mean(r["sync_bytes"] for r in by[VARIANTS[1][0]])
    f32 = statistics.mean(r["sync_bytes"] for r in by[VARIANTS[0][0]])
    out = ["| DiLoCo, wire format | syncs | MB sent per rank | vs float32 | vs int4 | val loss (mean ± sd) "
           "| per seed |",
           "|---|---|---|---|---|---|---|"]
    for name, _ in VARIANTS:
        rs = by[name]
        b = statistics.mean(r["sync_bytes"] for r in rs)
        losses = [r["val_loss"] for r in rs]
        sd = statistics.stdev(losses) if len(losses) > 1 else 0.0
        out.append(f"| {name} | {rs[0]['syncs']} | {b / 1e6:.3f} | {b / f32:.4f} | {b / ref:.2f}x | "
                   f"{statistics.mean(losses):.4f} ± {sd:.4f} | {', '.join(f'{x:.4f}' for x in losses)} |")
    return out


def main(argv: list[str] | None = None) -> None:
    from edit_lab.config import RunConfig

    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--seeds", type=int, nargs="+", default=[0, 1, 2])
    ap.add_argument("--steps", type=int, default=48)
    ap.add_argument("--json", default="sparseloco.json")
    a = ap.parse_args(argv)
    load = load_average()
    rows = []
    with tempfile.TemporaryDirectory() as d:
        for seed in a.seeds:
            for i, (name, kw) in enumerate(VARIANTS):
                cfg = RunConfig(**{**BASE, **kw}, steps=a.steps, seed=seed, out=f"{d}/{seed}-{i}")
                rows.append({"variant": name, "seed": seed, **measure(cfg)})
                print(rows[-1], flush=True)
    data = {"settings": {**BASE, "steps": a.steps, "seeds": a.seeds}, "rows": rows}
    write_result(a.json, data, __file__, argv, load)
    print("\n".join(table_lines(data)))


if __name__ == "__main__":
    main()
