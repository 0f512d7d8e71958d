"""How long the StragglerLab's preview takes to follow a control: the "within a second" claim, on both paths.

The preview tab recomputes its prediction in the control's own callback (edit_lab/ui/preview.py), so
the time a reader waits after moving a slider is the time of that callback (predict + build the
figure + the table) plus the browser's redraw. This script measures the first part, in process, for
every method and a sweep of each slider the preview follows, on the shipped example's calibration,
for the two ways a preview can be computed (`sim.lab.PREVIEW_PATHS`), side by side at every point:

- `simulator`: sim/programs.py, the time-only copy of every method (timed through the control, `lab.set`);
- `time_only`: the virtual clock's time-only mode (edit_lab/clock/time_only.py: the methods' own code on a stand-in
  model; timed as the same callback, `PreviewTab.redraw`, right after, on the same configuration).

    python benchmarks/preview_latency.py [--repeats 3] [--json preview_latency.json]

Issue 37 (part 2): the simulator may go when the time-only path's 95th percentile over this whole grid
(A-EDiT with the panel's time budget included) is within the one-second target. The first time-only
redraw includes importing the trainer's modules (torch's distributed and optimizer code): counted, as a
reader waits for it too. The browser test (tests/ui/test_straggler_panel.py) checks that the preview does
follow a slider move, without Run, with a bound that holds on a loaded machine; this benchmark holds the
one-second target.
"""

from __future__ import annotations

import argparse
import statistics
import sys
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))
sys.path.insert(0, str(HERE.parent))

from results_io import load_average, write_result  # noqa: E402

TARGET_S = 1.0
#: control → the values it is moved through (every method at each value)
SWEEP = {"slow_factor": (1.0, 1.5, 2.0, 3.0), "sync_interval": (2, 4, 8), "latency_ms": (0.0, 10.0, 40.0),
         "pause_prob": (0.0, 0.1, 0.3)}
PATHS = ("simulator", "time_only")


def stats(times: list[float]) -> dict:
    """Median, 95th percentile (the nearest rank below, as this benchmark always took it) and slowest."""
    ts = sorted(times)
    p95 = ts[int(0.95 * (len(ts) - 1))]
    return {"redraws": len(ts), "median_s": statistics.median(ts), "p95_s": p95, "max_s": ts[-1],
            "target_met": p95 <= TARGET_S}


def measure(repeats: int) -> dict:
    """Every grid point once per repeat: the simulator's redraw through the control, then the time-only one."""
    from edit_lab.ui.lab import StragglerLab

    lab = StragglerLab(initial=[])
    rows: list[dict] = []
    for _ in range(repeats):
        for method in lab.method.options:
            lab.preview.path = "simulator"
            lab.set(method=method)
            for name, values in SWEEP.items():
                for v in values:
                    lab.preview.path = "simulator"
                    n = lab.preview.redraws
                    t0 = time.perf_counter()
                    lab.set(**{name: v})
                    dt = time.perf_counter() - t0
                    if lab.preview.redraws == n:  # a value equal to the current one triggers nothing
                        continue
                    sim_pred = lab.preview.prediction
                    lab.preview.path = "time_only"
                    t0 = time.perf_counter()
                    lab.preview.redraw()
                    dt_virtual = time.perf_counter() - t0
                    cfg, pred = lab.config(), lab.preview.prediction
                    rows.append({"method": method, "control": name, "value": v, "time_budget": cfg.time_budget,
                                 "simulator_s": round(dt, 4), "time_only_s": round(dt_virtual, 4),
                                 "steps": None if pred is None else pred.summary["steps"],
                                 "tokens_per_s": [None if p is None else round(p.summary["tokens_per_s"], 3)
                                                  for p in (sim_pred, pred)]})
    lab.preview.path = "simulator"
    paths = {p: stats([r[f"{p}_s"] for r in rows]) for p in PATHS}
    by_method = {p: {m: stats([r[f"{p}_s"] for r in rows if r["method"] == m]) for m in lab.method.options}
                 for p in PATHS}
    return {"target_s": TARGET_S, "paths": paths, "by_method": by_method, "rows": rows}


def _ms(x: float) -> str:
    return f"{x * 1e3:.0f} ms"


def table_lines(data: dict) -> list[str]:
    lines = ["| path | redraws measured | median | 95th percentile | slowest | target: 95th percentile |",
             "|---|---:|---:|---:|---:|---|"]
    for p in PATHS:
        d = data["paths"][p]
        lines.append(f"| {p} | {d['redraws']} | {_ms(d['median_s'])} | {_ms(d['p95_s'])} | {_ms(d['max_s'])} | "
                     f"≤ {data['target_s']:.0f} s: {'met' if d['target_met'] else 'missed'} |")
    return lines


def method_lines(data: dict) -> list[str]:
    """Per method, each path's median / 95th percentile / slowest (A-EDiT and, after it in the grid, Streaming
    DiLoCo carry the panel's time budget: their previews train the most steps)."""
    lines = ["| method | simulator: median / p95 / slowest | time-only: median / p95 / slowest |", "|---|---|---|"]
    for m in data["by_method"]["simulator"]:
        cells = [" / ".join(_ms(data["by_method"][p][m][k]) for k in ("median_s", "p95_s", "max_s")) for p in PATHS]
        lines.append(f"| {m} | {cells[0]} | {cells[1]} |")
    return lines


def main(argv: list[str] | None = None) -> int:
    argv = sys.argv[1:] if argv is None else argv
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--repeats", type=int, default=3)
    ap.add_argument("--json", default="preview_latency.json", help="result file (a bare name: benchmarks/results/)")
    args = ap.parse_args(argv)
    load_before = load_average()
    data = measure(args.repeats)
    path = write_result(args.json, data, __file__, argv, load_before)
    print("\n".join(table_lines(data) + [""] + method_lines(data)))
    print(f"written to {path.name}")
    return 0 if data["paths"]["simulator"]["target_met"] else 1


if __name__ == "__main__":
    raise SystemExit(main())
