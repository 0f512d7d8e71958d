"""Previews against real runs: the simulator (edit_lab/clock/sim), calibrated from one real run, predicting others.

One real run calibrates the costs (`calibrate`, the first configuration below); then every configuration
(methods × a 2× straggler or none × a slow simulated link or none) is both *run* for real and *predicted*
from those costs, and the two are compared on

- tokens/s of the whole run (summary.json's `tokens_per_s`), target: within 15%;
- the time the replicas stood waiting on the sync group (summary.json's `sync_wait_s`, summed over the
  replicas), target: within 25%, or within 0.1 s where both are that small (a few collectives' latency,
  below what a 2-core machine's scheduler lets one measure).

Every run is the lab's panel configuration (nano model, 2 shards × 2 replicas, W = 4, τ = 4) with a time
budget, so a prediction has to get the step counts right too, not only a step's time. The calibration
run is made again at the end: the difference between the two is the machine's own drift, the floor of
any comparison of timings made minutes apart. The last rows do
the same with the three runs shipped in edit_lab/records/examples (recorded on an idle 2-core machine, nothing launched):
the EDiT run calibrates, all three are predicted.

    python benchmarks/preview_vs_real.py [--budget 4] [--json preview_vs_real.json]
    python benchmarks/preview_vs_real.py --reuse       # predict again from the runs of the last measurement
    python benchmarks/preview_vs_real.py --render      # the docs/benchmarks.md table from the results file
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "benchmarks"))

from results_io import load_average, read_result, write_result  # noqa: E402

from edit_lab.config import RunConfig  # noqa: E402

TOKENS_TOL = 0.15
WAIT_TOL = 0.25
WAIT_FLOOR_S = 0.1
SLOW_LINK = {"link_bandwidth_mb_s": 10.0, "link_latency_ms": 5.0}
#: (method, straggler factor of the last replica, slow link); the first one calibrates.
CONFIGS: tuple[tuple[str, float, bool], ...] = (
    ("edit", 2.0, False),
    ("sync", 1.0, False),
    ("sync", 2.0, False),
    ("diloco", 2.0, True),
    ("edit", 2.0, True),
    ("edit", 1.0, True),
    ("aedit", 2.0, False),
    ("aedit", 2.0, True),
)


def config(method: str, factor: float, slow_link: bool, budget: float, out: Path) -> RunConfig:
    from edit_lab.config import default_lab_config

    cfg = default_lab_config().replace(method=method, time_budget=budget, sync_period=0.15, eval_every=0,
                                       eval_every_s=0.0, progress=False)
    if factor > 1.0:
        cfg = cfg.replace(straggler_replicas=(cfg.replicas - 1,), straggler_factor=factor)
    if slow_link:
        cfg = cfg.replace(**SLOW_LINK)
    name = f"{method}-x{factor:g}" + ("-slowlink" if slow_link else "")
    return cfg.replace(out=str(out / name))


def label(method: str, factor: float, slow_link: bool) -> str:
    return f"{method}, " + (f"{factor:g}× straggler" if factor > 1 else "no straggler") + \
        (", slow link" if slow_link else "")


def wait_ok(pred: float, real: float) -> bool:
    return abs(pred - real) <= max(WAIT_TOL * real, WAIT_FLOOR_S)


def compare(pred: dict[str, Any], real: dict[str, Any]) -> dict[str, Any]:
    """One configuration's row: predicted and measured tokens/s and waiting, their relative errors, the verdict."""
    pw = sum(v["sync_wait_s"] for v in pred["per_replica"].values())
    rw = sum(v["sync_wait_s"] for v in real["per_replica"].values())
    tok_err = pred["tokens_per_s"] / real["tokens_per_s"] - 1.0
    return {"predicted_tokens_per_s": pred["tokens_per_s"], "real_tokens_per_s": real["tokens_per_s"],
            "tokens_rel_err": tok_err, "predicted_sync_wait_s": pw, "real_sync_wait_s": rw,
            "sync_wait_rel_err": (pw / rw - 1.0) if rw > 0 else None,
            "predicted_steps": {r: v["steps"] for r, v in pred["per_replica"].items()},
            "real_steps": {r: v["steps"] for r, v in real["per_replica"].items()},
            "tokens_ok": abs(tok_err) <= TOKENS_TOL, "sync_wait_ok": wait_ok(pw, rw)}


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--budget", type=float, default=4.0, help="seconds of training per run")
    ap.add_argument("--out", default="runs/preview_vs_real", help="where the real runs go")
    ap.add_argument("--json", default="preview_vs_real.json", help="results file (a bare name: benchmarks/results/)")
    ap.add_argument("--render", action="store_true", help="print the docs/benchmarks.md table from the results file and stop")
    ap.add_argument("--reuse", action="store_true", help="predict again from the runs already under --out (a "
                                                         "changed simulator, the same measurements)")
    args = ap.parse_args(argv)
    if args.render:
        print(render(read_result(args.json)))
        return 0
    from edit_lab.clock.calibrate import calibrate
    from edit_lab.clock.sim import simulate
    from edit_lab.records.run import Run
    from edit_lab.runtime.launch import launch

    load_before = load_average()
    out = Path(args.out)
    runs = []
    for method, factor, link in CONFIGS:
        cfg = config(method, factor, link, args.budget, out)
        if args.reuse:
            runs.append(((method, factor, link), Run(cfg.runtime.out)))
            continue
        print(f"running {label(method, factor, link)} …", flush=True)
        runs.append(((method, factor, link), launch(cfg, overwrite=True)))  # a re-run replaces its runs
    first = runs[0][1]
    again = Run(Path(first.config.runtime.out).with_name(Path(first.config.runtime.out).name + "-again")) if args.reuse else \
        launch(first.config.replace(out=first.config.runtime.out + "-again"), overwrite=True)
    drift = again.summary["tokens_per_s"] / first.summary["tokens_per_s"] - 1.0
    print(f"the calibration run made again at the end: {100 * drift:+.1f}% tokens/s (the machine's drift)")
    costs = calibrate(first)
    rows = []
    for (method, factor, link), run in runs:
        pred = simulate(run.config, costs).summary
        row = {"config": label(method, factor, link), "method": method, "straggler_factor": factor,
               "slow_link": link, "calibration": run is runs[0][1], **compare(pred, run.summary)}
        rows.append(row)
        print(f"{row['config']:40s} tokens/s {row['predicted_tokens_per_s']:7.0f} vs {row['real_tokens_per_s']:7.0f} "
              f"({100 * row['tokens_rel_err']:+.1f}%)  waiting {row['predicted_sync_wait_s']:.2f} vs "
              f"{row['real_sync_wait_s']:.2f} s", flush=True)
    rows += example_rows()
    payload = {"budget_s": args.budget, "drift_of_the_calibration_run": drift, "slow_link": SLOW_LINK, "tolerances": {
        "tokens_per_s": TOKENS_TOL, "sync_wait": WAIT_TOL, "sync_wait_floor_s": WAIT_FLOOR_S},
        "calibrated_from": rows[0]["config"], "costs": {k: v for k, v in costs.to_dict().items() if k != "source"},
        "rows": rows}
    path = write_result(args.json, payload, __file__, sys.argv[1:] if argv is None else argv, load_before)
    print(f"wrote {path.relative_to(ROOT) if path.is_relative_to(ROOT) else path.name}")
    print(render(read_result(path)))
    return 0


def example_rows() -> list[dict[str, Any]]:
    """The same comparison on the runs shipped in edit_lab/records/examples (recorded on an idle 2-core machine): the
    EDiT run calibrates, all three are predicted. No run is launched, so these rows do not depend on how
    busy this machine is."""
    from edit_lab.clock.calibrate import calibrate
    from edit_lab.clock.sim import simulate
    from edit_lab.records.examples import example_runs

    runs = {r.path.name: r for r in example_runs()}
    if "edit-straggler" not in runs:
        return []
    costs = calibrate(runs["edit-straggler"])
    rows = []
    for name, run in runs.items():
        c = run.config
        pred = simulate(c, costs).summary
        rows.append({"config": f"shipped example: {c.method}, {c.stragglers.factor:g}× straggler", "method": c.method,
                     "straggler_factor": c.stragglers.factor, "slow_link": False, "shipped_example": True,
                     "calibration": name == "edit-straggler", **compare(pred, run.summary)})
    return rows


def render(res: dict[str, Any]) -> str:
    """How the table was made (one line), then the table."""
    head = (f"Calibrated from one real run ({res['calibrated_from']}, {res['budget_s']:g} s budget), then every "
            f"configuration run for real and predicted; {res['cpu_count']} cores, load average "
            f"{res['load_avg_before']} before, {res['load_avg_after']} after; torch {res['torch']}, commit "
            f"{str(res['git_commit'])[:10]}{' (uncommitted changes)' if res.get('git_dirty') else ''}; the "
            f"calibration run made again at the end differed by {100 * res.get('drift_of_the_calibration_run', 0):+.1f}% "
            "in tokens/s (the machine's own drift).")
    return "\n".join([head, "", *table_lines(res)])


def table_lines(res: dict[str, Any]) -> list[str]:
    """The benchmarks page's table (benchmarks/render.py renders it under its marker): predicted against measured."""
    lines = ["| configuration | tokens/s predicted | measured | error | waiting (s) predicted | measured "
             "| within target |", "|---|---:|---:|---:|---:|---:|:---:|"]
    for r in res["rows"]:
        ok = "yes" if r["tokens_ok"] and r["sync_wait_ok"] else (
            "tokens/s only" if r["tokens_ok"] else ("waiting only" if r["sync_wait_ok"] else "no"))
        cal = " (calibrates the examples)" if r["calibration"] and r.get("shipped_example") else (
            " (calibration run)" if r["calibration"] else "")
        lines.append(f"| {r['config']}{cal} | {r['predicted_tokens_per_s']:.0f} | {r['real_tokens_per_s']:.0f} | "
                     f"{100 * r['tokens_rel_err']:+.1f}% | {r['predicted_sync_wait_s']:.2f} | "
                     f"{r['real_sync_wait_s']:.2f} | {ok} |")
    return lines


if __name__ == "__main__":
    sys.exit(main())
