"""What pinning MKL to its AVX2 path costs: a training step of `tiny` with and without `MKL_CBWR=AVX2,STRICT`.

`import edit_lab` sets MKL_CBWR=AVX2,STRICT so that a run's numbers are the same bits on every x86 machine
(docs/edit-method.md §14, "The same bits on every machine"); on a CPU with AVX-512 MKL would otherwise take
its AVX-512 kernels. Each sample is a fresh process (MKL reads the setting once, at its first computation),
one torch thread as every rank has, the two settings alternated so that both see the same machine:

    python benchmarks/mkl_pin.py [--model tiny] [--batch-size 8] [--seq-len 64] [--steps 40] [--repeats 5] [--json mkl_pin.json]

Per sample: the median seconds of a forward, backward and AdamW step, after warm-up steps.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))

from results_io import load_average, write_result  # noqa: E402

SETTINGS = {"pinned (AVX2,STRICT, the lab's)": "AVX2,STRICT", "MKL's own choice (AUTO)": "AUTO"}

STEP = """
import json, statistics, sys, time
import torch
from edit_lab.core.model import build_model
torch.set_num_threads(1)
model, batch, seq, steps = sys.argv[1], int(sys.argv[2]), int(sys.argv[3]), int(sys.argv[4])
m = build_model(model, seed=0)
opt = torch.optim.AdamW(m.parameters(), lr=1e-3)
g = torch.Generator().manual_seed(0)
x = torch.randint(0, 256, (batch, seq), generator=g)
y = torch.randint(0, 256, (batch, seq), generator=g)
times = []
for i in range(steps + 5):
    t0 = time.perf_counter()
    opt.zero_grad(set_to_none=True)
    m(x, y).backward()
    opt.step()
    if i >= 5:
        times.append(time.perf_counter() - t0)
print(json.dumps({"median_s": statistics.median(times), "loss": float(m(x, y))}))
"""


def sample(cbwr: str, model: str, batch: int, seq: int, steps: int) -> dict:
    env = {**os.environ, "MKL_CBWR": cbwr}
    done = subprocess.run([sys.executable, "-c", STEP, model, str(batch), str(seq), str(steps)], env=env,
                          capture_output=True, text=True, check=True)
    return json.loads(done.stdout)


def table_lines(data: dict) -> list[str]:
    """The benchmarks page's table: per setting, the median step over the samples, and the ratio."""
    rows = data["samples"]
    med = {name: statistics.median(r["median_s"] for r in rows[name]) for name in SETTINGS}
    base = med["MKL's own choice (AUTO)"]
    out = ["| MKL setting | a step of " + data["model"] + f" ({data['batch_size']} × {data['seq_len']}, one thread), "
           "median of the samples | against AUTO | final loss |", "|---|---:|---:|---:|"]
    for name in SETTINGS:
        out.append(f"| {name} | {1e3 * med[name]:.2f} ms | {med[name] / base:.2f}× | {rows[name][0]['loss']:.6f} |")
    return out


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--model", default="tiny")
    ap.add_argument("--batch-size", type=int, default=8)
    ap.add_argument("--seq-len", type=int, default=64)
    ap.add_argument("--steps", type=int, default=40)
    ap.add_argument("--repeats", type=int, default=5)
    ap.add_argument("--json", default=None, help="write the result file (a bare name lands in benchmarks/results)")
    args = ap.parse_args(argv)
    load = load_average()
    samples: dict[str, list[dict]] = {name: [] for name in SETTINGS}
    for _ in range(args.repeats):
        for name, cbwr in SETTINGS.items():  # alternated: both settings see the same moments of the machine
            samples[name].append(sample(cbwr, args.model, args.batch_size, args.seq_len, args.steps))
    data = {"model": args.model, "batch_size": args.batch_size, "seq_len": args.seq_len, "steps": args.steps,
            "samples": samples}
    print("\n".join(table_lines(data)))
    if args.json:
        write_result(args.json, data, __file__, sys.argv[1:] if argv is None else argv, load_before=load)
    return 0


if __name__ == "__main__":
    sys.exit(main())
