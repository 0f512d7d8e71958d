"""GPU benchmark: one prepared script for a machine with one or more NVIDIA GPUs (about 10 minutes).

    python benchmarks/gpu.py                 # every GPU of this machine, model base100m
    python benchmarks/gpu.py --quick         # a 2-minute smoke version (model small)
    python benchmarks/gpu.py --device cpu --model nano --steps 6   # the script's logic, on a CPU

With G ≥ 2 GPUs it launches G ranks, one per GPU, on NCCL (shards × replicas = 2 × G/2, or 1 × G
for odd G). With a single GPU it launches 2 ranks sharing it (1 shard × 2 replicas) over gloo with
CPU copies of every collective, because NCCL refuses two ranks on one GPU — it says so in the output,
and those tokens/s measure the lab's mechanics, not a cluster.

Prints, as markdown tables:
1. tokens/s per method (sync, diloco, edit, aedit) for the ~100M-parameter model;
2. the fraction of EDiT's sync-group communication hidden under compute by prefetch (on vs off);
3. peak GPU memory per rank with and without `cpu_offload` of anchor and momentum.
"""

from __future__ import annotations

import argparse
import datetime
import platform
import sys
import time
from pathlib import Path

import torch

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from edit_lab import (
    RunConfig,
    launch,  # noqa: E402
)
from edit_lab.records.analysis import comm_totals  # noqa: E402

sys.path.insert(0, str(ROOT / "benchmarks"))
from results_io import load_average, write_result  # noqa: E402


def mesh_for(n_gpus: int) -> tuple[int, int, str]:
    if n_gpus <= 1:
        return 1, 2, "1 GPU shared by 2 ranks (gloo with CPU copies; NCCL refuses two ranks on one GPU)"
    if n_gpus % 2 == 0 and n_gpus >= 4:
        return 2, n_gpus // 2, f"{n_gpus} GPUs, one rank each (NCCL), 2 shards × {n_gpus // 2} replicas"
    return 1, n_gpus, f"{n_gpus} GPUs, one rank each (NCCL), 1 shard × {n_gpus} replicas"


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--model", default="base100m")
    ap.add_argument("--steps", type=int, default=40)
    ap.add_argument("--seq-len", type=int, default=512)
    ap.add_argument("--batch-size", type=int, default=8)
    ap.add_argument("--device", default="cuda")
    ap.add_argument("--quick", action="store_true", help="model small, 20 steps")
    ap.add_argument("--out", default=str(ROOT / "runs" / "bench-gpu"))
    ap.add_argument("--json", default="gpu.json", help="result file (a bare name: under benchmarks/results/)")
    a = ap.parse_args()
    load_before = load_average()
    if a.quick:
        a.model, a.steps, a.seq_len = "small", 20, 256
    if a.device == "cuda" and not torch.cuda.is_available():
        print("no CUDA device visible: nothing to measure (use --device cpu to check the script)")
        return 1
    n_gpus = torch.cuda.device_count() if a.device == "cuda" else 1
    shards, replicas, how = mesh_for(n_gpus)
    gpu = torch.cuda.get_device_name(0) if a.device == "cuda" else platform.processor() or "cpu"
    print(f"# edit_lab GPU benchmark, {datetime.date.today()}, {gpu}, torch {torch.__version__}")
    print(f"# {how}; model {a.model}, seq_len {a.seq_len}, batch {a.batch_size} per rank, {a.steps} steps\n",
          flush=True)
    warm = max(2, a.steps // 8)
    base = RunConfig(model=a.model, shards=shards, replicas=replicas, steps=a.steps, seq_len=a.seq_len,
                     batch_size=a.batch_size, device=a.device, bf16=a.device == "cuda", eval_every=0, eval_batches=1,
                     warmup_steps=warm, sync_interval=max(2, a.steps // 8), sync_period=0.5, progress=False,
                     timeout_s=300, threads=1 if a.device == "cpu" else 4)
    runs = {}
    t_all = time.perf_counter()
    for method in ("sync", "diloco", "edit", "aedit"):
        runs[method] = launch(base.replace(method=method, out=f"{a.out}/{method}"), overwrite=True)
        print(f"  {method}: {runs[method].summary['tokens_per_s']:.0f} tokens/s", flush=True)
    runs["edit_noprefetch"] = launch(base.replace(method="edit", prefetch=False, out=f"{a.out}/edit-noprefetch"), overwrite=True)
    runs["edit_offload"] = launch(base.replace(method="edit", cpu_offload=True, out=f"{a.out}/edit-offload"), overwrite=True)

    print("\n| method | tokens/s | step time (ms) | final val loss |\n|---|---:|---:|---:|")
    for m in ("sync", "diloco", "edit", "aedit"):
        s = runs[m].summary
        print(f"| {m} | {s['tokens_per_s']:.0f} | {1e3 * s['step_time_s']:.1f} | {s['final_val_loss']:.3f} |")

    print("\n| edit | sync-group communication in flight (s) | hidden under compute (s) | exposed (s) | hidden |"
          "\n|---|---:|---:|---:|---:|")
    for label, key in (("prefetch on", "edit"), ("prefetch off", "edit_noprefetch")):
        c = comm_totals(runs[key], ranks=[0], groups=["sync"])  # overlap.py's definition, each instant once
        hidden = c["hidden_s"] / c["total_s"] if c["total_s"] > 0 else float("nan")
        print(f"| {label} | {c['total_s']:.3f} | {c['hidden_s']:.3f} | {c['exposed_s']:.3f} | {hidden:.0%} |")

    def peak(run) -> str:
        mems = run.summary["memory"].values()
        key = "peak_cuda" if "peak_cuda" in next(iter(mems)) else "peak_rss"
        return f"{max(m[key] for m in mems) / 2**20:.0f} MiB ({key})"

    print("\n| edit | peak memory per rank | method state on the device |\n|---|---:|---:|")
    print(f"| anchor and momentum on the GPU | {peak(runs['edit'])} | yes |")
    print(f"| cpu_offload | {peak(runs['edit_offload'])} | no |")
    print(f"\n(total {time.perf_counter() - t_all:.0f} s)")
    if a.json:
        keep = ("tokens_per_s", "step_time_s", "final_val_loss", "wall_s", "memory")
        write_result(a.json, {"device_name": gpu, "mesh": how, "model": a.model, "steps": a.steps,
                              "runs": {k: {f: r.summary.get(f) for f in keep} for k, r in runs.items()},
                              "sync_comm": {k: comm_totals(runs[k], ranks=[0], groups=["sync"])
                                            for k in ("edit", "edit_noprefetch")}},
                     __file__, sys.argv[1:], load_before)
    return 0


if __name__ == "__main__":
    sys.exit(main())
