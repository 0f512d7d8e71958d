"""What a run on the virtual clock costs this machine: wall time and memory at 2 to 64 replicas of nano or tiny.

Every rank is a thread of one process (edit_lab/clock/virtual.py), `virtual_lanes` of them computing at once, so the
wall time grows with the ranks' total compute (about linearly in the replicas) over the lanes, and the memory
with one model, one optimizer and one event log per rank. Each size runs in a fresh process, so its peak RSS is
its own; with several `--lanes`, each size runs at each, one after the other (a ratio measured side by side):

    python benchmarks/virtual_clock.py [--replicas 2 8 32 64] [--steps 20] [--model nano] [--seq-len 32]
        [--batch-size 4] [--lanes 1 2] [--json virtual_clock.json]

The configuration: EDiT, 1 shard per replica (a replica is one rank), the last replica a 2× straggler, the
default costs (the shipped example's calibration, about a second to compute, is inside `wall_s`; the imports
are not). A rank-step's wall time is mostly its real forward and backward (a profile of 16 × 30 steps of tiny:
about 85 % inside torch's forward and backward), so it grows with the model and with batch × seq_len.
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
import tempfile
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))
sys.path.insert(0, str(HERE.parent))

from results_io import load_average, write_result  # noqa: E402


def one(replicas: int, steps: int, model: str, seq_len: int, batch_size: int, lanes: int) -> dict:
    """Run one size in this process; its numbers."""
    import resource

    import torch._dynamo  # noqa: F401 — imported by the first optimizer and init (once per process, not per run)

    import edit_lab.clock.calibrate  # noqa: F401 — imports (torch's too) are not the run's time
    import edit_lab.runtime.worker  # noqa: F401
    from edit_lab import RunConfig, launch

    with tempfile.TemporaryDirectory() as tmp:
        cfg = RunConfig(method="edit", model=model, shards=1, replicas=replicas, steps=steps, seq_len=seq_len,
                        batch_size=batch_size, eval_every=0, eval_batches=2, warmup_steps=2, sync_interval=5,
                        straggler_replicas=(replicas - 1,), straggler_factor=2.0, clock="virtual", virtual_lanes=lanes,
                        progress=False,
                        out=str(Path(tmp) / "run"))
        t0 = time.perf_counter()
        run = launch(cfg)
        wall = time.perf_counter() - t0
        return {"model": model, "seq_len": seq_len, "batch_size": batch_size, "replicas": replicas, "steps": steps,
                "lanes": lanes, "wall_s": round(wall, 2),
                "wall_s_per_rank_step": round(wall / (replicas * steps), 4),
                "peak_rss_mb": round(resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024, 1),
                "virtual_wall_s": round(run.summary["wall_s"], 4),
                "final_val_loss": round(run.summary["final_val_loss"], 4)}


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--replicas", type=int, nargs="+", default=[2, 8, 32, 64])
    ap.add_argument("--steps", type=int, default=20)
    ap.add_argument("--model", default="nano")
    ap.add_argument("--seq-len", type=int, default=32)
    ap.add_argument("--batch-size", type=int, default=4)
    ap.add_argument("--lanes", type=int, nargs="+", default=[1, 2], help="virtual_lanes values (0: one per core)")
    ap.add_argument("--json", default=None, help="write the result file (a bare name lands in benchmarks/results)")
    ap.add_argument("--one", type=int, default=None, help=argparse.SUPPRESS)
    args = ap.parse_args(argv)
    if args.one is not None:
        print(json.dumps(one(args.one, args.steps, args.model, args.seq_len, args.batch_size, args.lanes[0])))
        return 0
    load = load_average()
    rows = []
    for n in args.replicas:
        for lanes in args.lanes:
            out = subprocess.run([sys.executable, __file__, "--one", str(n), "--steps", str(args.steps), "--model",
                                  args.model, "--seq-len", str(args.seq_len), "--batch-size", str(args.batch_size),
                                  "--lanes", str(lanes)], capture_output=True, text=True, check=True).stdout
            rows.append(json.loads(out.strip().splitlines()[-1]))
            r = rows[-1]
            print(f"{r['model']} {r['batch_size']}x{r['seq_len']} {r['replicas']:>4} replicas  {lanes} lanes  "
                  f"{r['wall_s']:>7.2f} s wall  {r['wall_s_per_rank_step'] * 1e3:>6.1f} ms per rank-step  "
                  f"{r['peak_rss_mb']:>7.1f} MB peak RSS  {r['virtual_wall_s']:.3f} virtual s  "
                  f"val {r['final_val_loss']}", flush=True)
    if args.json:
        write_result(args.json, {"rows": rows}, __file__, sys.argv[1:] if argv is None else argv, load_before=load)
    return 0


if __name__ == "__main__":
    sys.exit(main())
