"""A-EDiT's claim, measured: under a straggler, does it reach a lower loss in the same wall-clock time?

Every run trains for the same wall-clock budget (`time_budget`, edit-method.md §12): each replica trains
as many steps as its speed allows, and the run ends with one sync every replica takes part in. The
number compared is the validation loss of the agreed model after that final sync ("val@budget"), for
several seeds, as the mean and the spread (min–max) over the seeds.

Stragglers: *consistent* (replica 1's steps take 2× as long: it spins for as long as it computed) or
*random* (each step, each replica pauses `--pause-ms` with probability `--pause-prob`).

Besides the loss, per run (`analysis.budget_table`): tokens processed (every replica, every step) and
what the penalty did with them: the share of all steps the fast replica 0 trained, the mean aggregation
weight it got at the syncs (EDiT and A-EDiT: the penalty's softmax, mixed with the step shares when
step weighting is on), and the tokens of rounds the anomaly filter discarded. A fast replica whose
weight is far below its share of the steps does work that barely reaches the model.

    python benchmarks/aedit_loss.py --budget 30 --seeds 0,1,2 --meshes 2x2 --stragglers consistent \\
        --methods sync,diloco,edit,aedit [--set step_weighting=true --set penalty_weighting=false ...] \\
        [--json benchmarks/results/aedit_loss.json]   (results_io.py adds the command, commit, versions, date)

`--set FIELD=VALUE` changes a RunConfig field for every run (values are parsed as JSON, else as strings);
`--aedit-set` only for A-EDiT runs. A-EDiT's period defaults to the time EDiT's slow replica needs for τ
steps on this machine (calibrated by one short sync run per mesh), so both sync about equally often.
"""

from __future__ import annotations

import argparse
import json
import shlex
import statistics
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from edit_lab import (
    RunConfig,
    launch,  # noqa: E402
)
from edit_lab.config import RENAMED  # noqa: E402
from edit_lab.records.analysis import budget_table  # noqa: E402

sys.path.insert(0, str(Path(__file__).resolve().parent))
from results_io import load_average, write_result  # noqa: E402


def parse_sets(items: list[str]) -> dict[str, Any]:
    out: dict[str, Any] = {}
    for item in items:
        key, _, raw = item.partition("=")
        try:
            out[key] = json.loads(raw)
        except json.JSONDecodeError:
            out[key] = raw
    return out


def straggler_fields(kind: str, args: argparse.Namespace) -> dict[str, Any]:
    if kind == "consistent":
        return {"straggler_replicas": (1,), "straggler_factor": args.factor}
    if kind == "random":
        return {"random_pause_prob": args.pause_prob, "random_pause_ms": args.pause_ms}
    if kind == "none":
        return {}
    raise SystemExit(f"unknown straggler kind {kind!r}: consistent, random or none")


def one_run(cfg: RunConfig) -> dict[str, Any]:
    row = budget_table({"run": launch(cfg)}).iloc[0]
    nan_to_none = lambda v: None if v != v else float(v)  # noqa: E731 (JSON has no NaN)
    return {"val": float(row["val_loss"]), "tokens": int(row["tokens"]), "train_end_s": float(row["train_end_s"]),
            "steps": list(row["steps"]), "fast_step_share": float(row["fast_step_share"]),
            "fast_weight": nan_to_none(row["fast_weight"]), "discarded_tokens": float(row["discarded_tokens"])}


def calibrate_step_s(base: RunConfig, out: Path) -> float:
    """Median step time of a short `sync` run without stragglers (the fast replicas' pace)."""
    run = launch(base.replace(method="sync", steps=24, time_budget=0.0, eval_every_s=0.0, eval_every=0,
                              straggler_replicas=(), random_pause_prob=0.0, out=str(out)))
    dts = sorted(m["dt"] for m in run.metrics if m["kind"] == "train" and m["step"] >= 4)
    return dts[len(dts) // 2]


def spread(values: list[float]) -> str:
    m = statistics.fmean(values)
    return f"{m:.4f} ({min(values):.4f}–{max(values):.4f})" if len(values) > 1 else f"{m:.4f}"


def paired(rows: list[dict[str, Any]], against: list[dict[str, Any]]) -> str:
    """Mean over seeds of (this val − that val, same seed), and in how many seeds this one is lower.

    The seed (data order, initialisation) moves every method's loss together, by more than the methods
    differ: compared seed by seed, the difference is measured without that shared part."""
    from edit_course.claims.stragglers import seed_differences

    d = [-x for x in seed_differences({r["seed"]: r["val"] for r in rows}, {r["seed"]: r["val"] for r in against})]
    if not d or rows is against:
        return "–"
    return f"{statistics.fmean(d):+.3f} ({sum(x < 0 for x in d)}/{len(d)} lower)"


def render(results: list[dict[str, Any]]) -> list[str]:
    """The benchmarks page's table from the runs of one or several result files (each row: a mesh, straggler, method
    and `variant`, over its seeds; paired differences against EDiT and sync of the same mesh and straggler)."""
    groups: dict[tuple[str, str, str], list[dict[str, Any]]] = {}
    for r in results:
        name = r["method"] + (f" ({r['variant']})" if r.get("variant") else "")
        budget = f"{r['budget']:g} s" if r.get("budget") is not None else ""
        groups.setdefault((r["mesh"], r["straggler"] + (f", {budget}" if budget else ""), name), []).append(r)
    out = ["| mesh | straggler | method | val@budget mean (min–max) | − edit, same seed | − sync, same seed | "
           "tokens | fast replica's step share | its mean weight | tokens discarded |",
           "|---|---|---|---|---|---|---|---|---|---|"]
    for (mesh, kind, name), rows in groups.items():
        edit = groups.get((mesh, kind, "edit"), [])
        sync = groups.get((mesh, kind, "sync"), [])
        out.append(table_row(mesh, kind, name, rows, paired(rows, edit), paired(rows, sync)))
    return out


def table_row(mesh: str, kind: str, method: str, rows: list[dict[str, Any]], vs_edit: str = "–",
              vs_sync: str = "–") -> str:
    def mean_of(key: str, fmt: str) -> str:
        vals = [r[key] for r in rows if r[key] is not None]
        return format(statistics.fmean(vals), fmt) if vals else "–"

    tokens = statistics.fmean(r["tokens"] for r in rows) / 1e3
    discarded = statistics.fmean(r["discarded_tokens"] for r in rows) / 1e3
    return (f"| {mesh} | {kind} | {method} | {spread([r['val'] for r in rows])} | {vs_edit} | {vs_sync} | "
            f"{tokens:.0f}k | {mean_of('fast_step_share', '.2f')} | {mean_of('fast_weight', '.2f')} | "
            f"{discarded:.0f}k |")


def parser() -> argparse.ArgumentParser:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--budget", type=float, default=30.0, help="seconds of training per run")
    ap.add_argument("--eval-every-s", type=float, default=0.0, help="timed validations (0: only the final one)")
    ap.add_argument("--seeds", default="0,1,2")
    ap.add_argument("--meshes", default="2x2", help="SHARDSxREPLICAS, comma separated (e.g. 2x2,1x4)")
    ap.add_argument("--stragglers", default="consistent", help="consistent, random, none; comma separated")
    ap.add_argument("--methods", default="sync,diloco,edit,aedit")
    ap.add_argument("--factor", type=float, default=2.0, help="consistent straggler: k× slower")
    ap.add_argument("--pause-prob", type=float, default=0.1)
    ap.add_argument("--pause-ms", type=float, default=200.0)
    ap.add_argument("--model", default="tiny")
    ap.add_argument("--tau", type=int, default=10)
    ap.add_argument("--period-steps", type=float, default=None,
                    help="A-EDiT period in slow-replica steps (default: τ); sets sync_period from the calibration")
    ap.add_argument("--set", dest="sets", action="append", default=[], help="FIELD=VALUE for every run")
    ap.add_argument("--aedit-set", dest="aedit_sets", action="append", default=[], help="FIELD=VALUE for A-EDiT")
    ap.add_argument("--json", default=None, help="write every run and the table here")
    ap.add_argument("--render", nargs="+", default=None, metavar="JSON",
                    help="print the table of earlier result files (label each file's A-EDiT runs with its "
                         "--aedit-set/--period-steps variant) instead of running anything")
    return ap


def variant_label(args: argparse.Namespace) -> str:
    """What a result file changed for A-EDiT, from its command line: the table's label of its A-EDiT rows."""
    return ", ".join([f"{k}={v}" for k, v in parse_sets(args.aedit_sets).items()] +
                     ([f"period {args.period_steps:g} slow steps"] if args.period_steps is not None else []))


def render_files(results: list[dict[str, Any]]) -> list[str]:
    """The table of several result files (loaded), each file's A-EDiT rows labelled with the variant its
    command line asked for (`--aedit-set`, `--period-steps`) and its `--set` fields added to the straggler."""
    runs: list[dict[str, Any]] = []
    for data in results:
        made = parser().parse_args(shlex.split(data["command"])[2:])
        label = variant_label(made)
        # e.g. the link; a field renamed since the run is shown by its current name (config.RENAMED)
        extra = ", ".join(f"{RENAMED.get(k, k)}={v}" for k, v in parse_sets(made.sets).items())
        runs += [dict(r, budget=made.budget, variant=label if r["method"] == "aedit" else "",
                      straggler=r["straggler"] + (f", {extra}" if extra else "")) for r in data["runs"]]
    return render(runs)


def main(argv: list[str] | None = None) -> None:
    ap = parser()
    args = ap.parse_args(argv)
    if args.render:
        print("\n".join(render_files([json.loads(Path(p).read_text()) for p in args.render])))
        return

    load_before = load_average()
    seeds = [int(s) for s in args.seeds.split(",")]
    methods = args.methods.split(",")
    sets, aedit_sets = parse_sets(args.sets), parse_sets(args.aedit_sets)
    tmp = Path(tempfile.mkdtemp(prefix="aedit_loss-"))
    results: list[dict[str, Any]] = []
    for mesh in args.meshes.split(","):
        shards, replicas = (int(v) for v in mesh.split("x"))
        base = RunConfig(model=args.model, shards=shards, replicas=replicas, sync_interval=args.tau,
                         eval_every=0, progress=False, time_budget=args.budget, eval_every_s=args.eval_every_s,
                         **sets)
        step_s = calibrate_step_s(base, tmp / f"calib-{mesh}")
        period_steps = args.period_steps if args.period_steps is not None else args.tau
        for kind in args.stragglers.split(","):
            slow = args.factor if kind == "consistent" else 1.0
            period = period_steps * slow * step_s
            for method in methods:
                for seed in seeds:
                    extra = dict(aedit_sets) if method == "aedit" else {}
                    extra.setdefault("sync_period", period)
                    cfg = base.replace(method=method, seed=seed, out=str(tmp / f"{mesh}-{kind}-{method}-{seed}"),
                                       **straggler_fields(kind, args), **extra)
                    t0 = time.perf_counter()
                    row = {"mesh": mesh, "straggler": kind, "method": method, "seed": seed, "budget": args.budget,
                           **one_run(cfg),
                           "sync_period_s": cfg.aedit.sync_period if method == "aedit" else None,
                           "wall_s": time.perf_counter() - t0}
                    results.append(row)
                    print(json.dumps(row), flush=True)
    table = render([dict(r, variant=variant_label(args) if r["method"] == "aedit" else "") for r in results])
    print(f"\nbudget {args.budget:g} s, seeds {seeds}, τ = {args.tau}, model {args.model}, sets {sets}, "
          f"A-EDiT sets {aedit_sets}")
    print("\n".join(table))
    if args.json:
        write_result(args.json, {"runs": results, "table": table}, __file__,
                     argv if argv is not None else sys.argv[1:], load_before)


if __name__ == "__main__":
    main()
