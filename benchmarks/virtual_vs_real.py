"""The virtual clock against real runs on 1 × 2: calibrated from one real run, does it predict another's speed?

On 1 shard × 2 replicas each rank has a core of this 2-core machine, so a real run is not decided by how the
ranks share cores, and the virtual clock's cost model (one cost per unit and kind, no contention) can be held
to it. One real EDiT run calibrates the costs (`--calibrate RUN_DIR`); each other configuration is then run
for real and on the virtual clock with those costs, and the two tokens/s (summary.json's `tokens_per_s`: over
real seconds for the one, virtual seconds for the other) are compared; target: within 10 %. The calibration
run is made again at the end: the difference between the two is the machine's own drift.

Then determinism: the same virtual run twice, the second beside a busy core (`python -c "while True: pass"`),
must write the same `events-rank*.jsonl`, byte for byte.

    python benchmarks/virtual_vs_real.py [--steps 200] [--json virtual_vs_real.json]
"""

from __future__ import annotations

import argparse
import subprocess
import sys
import tempfile
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))
sys.path.insert(0, str(HERE.parent))

from results_io import load_average, write_result  # noqa: E402

TOL = 0.10
BASE = dict(model="nano", shards=1, replicas=2, seq_len=32, batch_size=4, warmup_steps=4, sync_interval=4,
            eval_every=0, eval_batches=2, progress=False)
SLOW_LINK = {"link_latency_ms": 5.0, "link_bandwidth_mb_s": 10.0}
#: name -> the fields that differ from the calibration run (EDiT, τ 4, no straggler, the machine's own link)
CONFIGS = {
    "sync": {"method": "sync"},
    "EDiT, replica 1 2× slower": {"method": "edit", "straggler_replicas": (1,), "straggler_factor": 2.0},
    "DiLoCo τ 8 on a slow link (5 ms, 10 MB/s)": {"method": "diloco", "sync_interval": 8, **SLOW_LINK},
    "EDiT on a slow link, replica 1 1.5× slower": {"method": "edit", "straggler_replicas": (1,),
                                                    "straggler_factor": 1.5, **SLOW_LINK},
}


def events(run_dir: Path) -> dict[str, bytes]:
    return {p.name: p.read_bytes() for p in sorted(run_dir.glob("events-rank*.jsonl"))}


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--steps", type=int, default=200)
    ap.add_argument("--json", default=None, help="write the result file (a bare name lands in benchmarks/results)")
    args = ap.parse_args(argv)
    from edit_lab import RunConfig, launch

    load = load_average()
    rows = []
    with tempfile.TemporaryDirectory() as tmp:
        t = Path(tmp)
        base = RunConfig(method="edit", steps=args.steps, **BASE)
        calib = launch(base.replace(out=str(t / "calibration")), overwrite=True)
        for name, diff in CONFIGS.items():
            cfg = base.replace(**diff)
            real = launch(cfg.replace(out=str(t / f"real-{len(rows)}")), overwrite=True).summary
            virt = launch(cfg.replace(out=str(t / f"virtual-{len(rows)}"), clock="virtual",
                                      clock_costs=str(calib.path)), overwrite=True).summary
            err = virt["tokens_per_s"] / real["tokens_per_s"] - 1
            rows.append({"config": name, "real_tokens_per_s": round(real["tokens_per_s"], 1),
                         "virtual_tokens_per_s": round(virt["tokens_per_s"], 1), "error": round(err, 4)})
            print(f"{name:>44}: real {real['tokens_per_s']:8.0f} tokens/s, virtual {virt['tokens_per_s']:8.0f} "
                  f"({100 * err:+.1f} %)", flush=True)
        again = launch(base.replace(out=str(t / "calibration-again")), overwrite=True).summary
        drift = again["tokens_per_s"] / calib.summary["tokens_per_s"] - 1
        # determinism: the same virtual run, quiet and beside a busy core
        cfg = base.replace(**CONFIGS["EDiT, replica 1 2× slower"], clock="virtual", clock_costs=str(calib.path))
        quiet = launch(cfg.replace(out=str(t / "det-quiet")), overwrite=True)
        spin = subprocess.Popen([sys.executable, "-c", "while True: pass"])
        try:
            busy = launch(cfg.replace(out=str(t / "det-busy")), overwrite=True)
        finally:
            spin.kill()
        same = events(quiet.path) == events(busy.path) and len(events(quiet.path)) == 2
    data = {"steps": args.steps, "tolerance": TOL, "rows": rows,
            "calibration_tokens_per_s": round(calib.summary["tokens_per_s"], 1),
            "calibration_again_tokens_per_s": round(again["tokens_per_s"], 1), "drift": round(drift, 4),
            "events_identical_beside_a_busy_core": same}
    print("\n".join(table_lines(data)))
    if args.json:
        write_result(args.json, data, __file__, sys.argv[1:] if argv is None else argv, load_before=load)
    return 0


def table_lines(data: dict) -> list[str]:
    """The benchmarks page's table: per configuration, real and predicted tokens/s, and the error."""
    out = ["| configuration (1 × 2 nano, calibrated from a real EDiT run) | real tokens/s | virtual clock | error |",
           "|---|---:|---:|---:|"]
    for r in data["rows"]:
        mark = "" if abs(r["error"]) <= data["tolerance"] else " ✗"
        out.append(f"| {r['config']} | {r['real_tokens_per_s']:,.0f} | {r['virtual_tokens_per_s']:,.0f} | "
                   f"{100 * r['error']:+.1f} %{mark} |")
    out.append(f"| the calibration run made again (the machine's drift) | {data['calibration_again_tokens_per_s']:,.0f} | "
               f"{data['calibration_tokens_per_s']:,.0f} (first run) | {100 * data['drift']:+.1f} % |")
    return out


if __name__ == "__main__":
    sys.exit(main())
