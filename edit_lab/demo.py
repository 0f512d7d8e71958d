"""`make demo`: a short, real comparison of the methods from the command line.

Same model, data, seed and number of tokens for every method on 2 shards × 2 replicas, with a
simulated slow sync link so that the price of talking across replicas is visible on one laptop.
"""

from __future__ import annotations

from pathlib import Path

from edit_lab.config import METHODS, ConfigError, RunConfig
from edit_lab.records.events import sync_group_bytes
from edit_lab.runtime.launch import launch


def demo(steps: int = 60, out: str = "runs/demo", methods: tuple[str, ...] = METHODS) -> list[dict]:
    unknown = [m for m in methods if m not in METHODS]
    if unknown:
        raise ConfigError(f"method={unknown[0]!r} is not allowed: one of {', '.join(METHODS)}")
    rows = []
    for m in methods:
        cfg = RunConfig(method=m, steps=steps, shards=2, replicas=2, warmup_steps=min(10, steps // 4),
                        sync_interval=10, eval_every=0, link_latency_ms=2.0, link_bandwidth_mb_s=50.0,
                        out=str(Path(out) / m), progress=False)
        run = launch(cfg, overwrite=True)  # the demo's own directory: a second demo replaces the first
        s = run.summary
        rows.append({"method": m, "val_loss": s["final_val_loss"], "tokens_per_s": s["tokens_per_s"],
                     "wall_s": s["wall_s"], "sync_bytes": sync_group_bytes(run.events, rank=0)})
        print(f"  {m:>15}: val loss {s['final_val_loss']:.4f}, {s['tokens_per_s']:.0f} tokens/s", flush=True)
    print()
    print(f"{'method':>15} | {'val loss':>8} | {'tokens/s':>8} | {'wall s':>6} | {'sync-group MB':>13}")
    print("-" * 64)
    for r in rows:
        print(f"{r['method']:>15} | {r['val_loss']:8.4f} | {r['tokens_per_s']:8.0f} | {r['wall_s']:6.1f} | "
              f"{r['sync_bytes'] / 1e6:13.2f}")
    return rows
