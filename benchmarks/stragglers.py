"""Stragglers: throughput of every method against the capacity bound, and loss in equal wall-clock time.

For each mesh (4 replicas × 1 shard, then 2 × 2), in one run of this script:

0. calibration: a `sync` run without stragglers gives the step time s; A-EDiT's period is set to
   τ·s, the random pause to 5·s;
1. *consistent straggler*: replica 1 is 2× slower (each of its steps is stretched by as long as it
   computed; the straggler spins rather than sleeps, see `edit_lab/train/stragglers.py`).
   The **capacity bound** is the sum over replicas of each replica's own tokens/s, measured in the
   same script by a run in which the replicas never talk (Local SGD with no sync until the end);
2. *random stragglers*: each step, each replica pauses 5·s with probability 0.1. Compared with the
   no-straggler throughput of the same method, and with that run's own capacity bound: a pause of
   5 steps with probability 0.1 per step costs every replica a third of its time or more, whatever the
   method, so no method can pass 1/1.5 ≈ 67% of the no-straggler throughput (less here, where the
   pause is 5 `sync` steps, longer than a local step);
3. validation loss of each method at the same wall-clock time (the shortest run's), interpolated
   between its evaluations, under (1) and (2);
4. two timings the test suite leaves to this benchmark, because they depend on the machine's speed and
   load: under (1), the local steps A-EDiT's fast replica trains per step of the slow one in a round
   (about 2), and under (2), how much longer than planned a pause lasted (a loaded machine ends a
   spinning pause late).

Throughput of a run = Σ over replicas of (its tokens after warm-up / the time from the end of warm-up
to its last step). Steady state, as throughput benchmarks measure it: the W synchronous warm-up steps
run every replica at the slowest one's pace whatever the method (they are the same code in all of
them), and counting them would charge a start-up cost to the methods that the bound run, which has no
warm-up, never pays. Up to its last step: under A-EDiT a fast replica finishes its steps early, and
counting its idle tail would understate it. The whole-run figure of `summary.json` (warm-up included)
is printed too.

Two capacity bounds, because this machine is a shared VM whose speed drifts by ±10% between runs a
minute apart: the no-talk run's (above; medians over `--repeats`, each repeat's ratio printed), and
the *in-run* one of `analysis.capacity_bound`, over the same steady state: Σ over replicas of tokens
/ (time − the time blocked on sync-group communication), i.e. the share of time the replicas were
not held up by one another or by the link. Both sides of the in-run ratio come from one run, so the
drift cancels; it does not see slower compute (the outer step, CPU taken by transfers), which the
no-talk bound does.

τ = 16 by default: an A-EDiT round costs a fast replica about half a slow step of waiting at the
meeting plus the sync itself, so the round must be long against a step for the target (≥ 90% of the
bound) to be reachable at all; at τ = 8 (about 10 fast steps a round) the meeting alone costs ~10%.

    python benchmarks/stragglers.py [--steps 160] [--tau 16] [--repeats 1] [--model tiny] [--meshes 1x4,2x2]
"""

from __future__ import annotations

import argparse
import statistics
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from edit_lab import (
    RunConfig,
    launch,  # noqa: E402
)
from edit_lab.config import METHODS as ALL_METHODS  # noqa: E402
from edit_lab.records.analysis import replica_table  # noqa: E402

sys.path.insert(0, str(ROOT / "benchmarks"))
from results_io import load_average, write_result  # noqa: E402

#: config.METHODS in its order, less Post Local SGD (plain averaging: DiLoCo stands for the family here)
METHODS = tuple(m for m in ALL_METHODS if m != "post_local_sgd")


def throughput(run, from_step: int) -> float:
    """Σ over replicas of tokens/s over steps ≥ from_step (timed from the end of step from_step − 1)."""
    return float(replica_table(run, from_step)["tokens_per_s"].sum())


def in_run_efficiency(run, from_step: int) -> float:
    """Throughput / the same run's own capacity bound (`analysis.capacity_bound` over the same steady state).

    Both sides come from one run, so the machine's speed, which drifts by ±10% between runs a minute
    apart on a shared VM, cancels.
    """
    t = replica_table(run, from_step)
    return float(t["tokens_per_s"].sum() / t["own_tokens_per_s"].sum())


def whole_run_throughput(run) -> float:
    return sum(v["tokens_per_s"] for v in run.summary["per_replica"].values())


def loss_at(run, t: float) -> float:
    """Validation loss at wall-clock time t (linear between evaluations; the first one before it)."""
    pts = sorted((m["t"], m["val_loss"]) for m in run.metrics if m["kind"] == "eval")
    if t <= pts[0][0]:
        return pts[0][1]
    for (t0, v0), (t1, v1) in zip(pts, pts[1:]):
        if t0 <= t <= t1:
            return v0 + (v1 - v0) * (t - t0) / max(t1 - t0, 1e-9)
    return pts[-1][1]


def aedit_steps_ratio(run) -> float:
    """A-EDiT with replica 1 a consistent straggler: local steps replica 0 trained per step of replica 1, over
    the rounds before any replica had finished (about the straggler factor when the fast replica trains at
    its own pace; tests/distributed/test_aedit.py asserts only that it runs ahead, > 1.1)."""
    running = [m for m in run.summary["method_info"]["meetings"] if not any(m["done"])]
    fast, slow = (sum(m["new_steps"][r] for m in running) for r in (0, 1))
    return fast / slow if slow else float("nan")


def pause_overshoot(run) -> float:
    """Median over the run's random pauses of (measured − planned) / planned: how late this machine ended a
    pause (tests/distributed/test_stragglers.py asserts only that none is shorter than planned)."""
    over = [(e["t1"] - e["t0"]) / e["data"]["planned"] - 1.0 for e in run.events
            if e["kind"] == "straggle" and e["data"]["reason"] == "random"]
    return statistics.median(over) if over else float("nan")


def step_time(run) -> float:
    dts = [m["dt"] for m in run.metrics if m["kind"] == "train" and m["step"] >= 5]
    return statistics.median(dts)


def scenario(name: str, base: RunConfig, extra: dict, out: str, repeats: int) -> dict:
    """Every method and the no-talk bound run, `repeats` times in turn; throughputs are medians over repeats.

    The runs of a repeat follow each other, so a slow spell of the machine hits one repeat of every
    method rather than every repeat of one method.
    """
    w = base.schedule.warmup_steps
    tput: dict[str, list[float]] = {m: [] for m in (*METHODS, "bound")}
    eff: dict[str, list[float]] = {m: [] for m in METHODS}
    whole: dict[str, list[float]] = {m: [] for m in (*METHODS, "bound")}
    runs = {}
    for rep in range(repeats):
        suffix = f"-{rep}" if repeats > 1 else ""
        for m in METHODS:
            runs[m] = launch(base.replace(method=m, out=f"{out}/{name}-{m}{suffix}", **extra), overwrite=True)
            tput[m].append(throughput(runs[m], w))
            eff[m].append(in_run_efficiency(runs[m], w))
            whole[m].append(whole_run_throughput(runs[m]))
        bound_run = launch(base.replace(method="post_local_sgd", warmup_steps=0, sync_interval=base.steps + 1,
                                        out=f"{out}/{name}-no-sync{suffix}", **extra), overwrite=True)
        tput["bound"].append(throughput(bound_run, w))
        whole["bound"].append(whole_run_throughput(bound_run))
    med = {m: statistics.median(v) for m, v in tput.items()}
    return {"runs": runs, "bound": med.pop("bound"), "tput": med, "in_run": {m: statistics.median(v) for m, v in eff.items()},
            "per_repeat": tput, "in_run_per_repeat": eff, "whole_per_repeat": whole,
            "whole": {m: statistics.median(v) for m, v in whole.items() if m != "bound"},
            "whole_bound": statistics.median(whole["bound"])}


def _median(values: list[float]) -> float:
    return statistics.median(values)


def table_lines(data: dict, part: str = "all") -> list[str]:
    """The README's straggler tables from a result file: per mesh, throughput against the capacity bound
    (`part` "throughput:MESH"), then every mesh side by side: the in-run efficiency ("in_run"), the validation
    loss at equal wall-clock time ("loss") and the calibration and two timings ("timings"); "all": every one,
    separated by blank lines."""
    if part == "all":
        parts = [f"throughput:{mesh}" for mesh in data["meshes"]] + ["in_run", "loss", "timings"]
        return [line for p in parts for line in table_lines(data, p) + [""]][:-1]
    methods, meshes = data["methods"], data["meshes"]
    lines: list[str] = []
    if part.startswith("throughput:"):
        mesh = part.split(":", 1)[1]
        r = meshes[mesh]
        sc = r["scenarios"]
        tput = {name: {m: _median(v) for m, v in sc[name]["per_repeat"].items()} for name in ("clean", "consistent", "random")}
        repeats = len(sc["clean"]["per_repeat"][methods[0]])
        lines += [f"| {mesh}: method (medians of {repeats}) | no stragglers tok/s | 1 replica 2× slower: tok/s | "
                  "% of capacity bound | random pauses: tok/s | % of no-straggler | % of its bound |",
                  "|---|---:|---:|---:|---:|---:|---:|"]
        c, k, q = tput["clean"], tput["consistent"], tput["random"]
        for m in methods:
            lines.append(f"| {m} | {c[m]:.0f} | {k[m]:.0f} | {k[m] / k['bound']:.0%} | {q[m]:.0f} | {q[m] / c[m]:.0%} | "
                         f"{q[m] / q['bound']:.0%} |")
        return lines + [f"| capacity bound | {c['bound']:.0f} | {k['bound']:.0f} | 100% | {q['bound']:.0f} | "
                        f"{q['bound'] / c['bound']:.0%} | 100% |"]
    label = {"clean": "clean", "consistent": "2× straggler", "random": "random pauses"}
    if part in ("in_run", "loss"):
        names = ("clean", "consistent", "random") if part == "in_run" else ("consistent", "random")
        cols = [(mesh, n, meshes[mesh]["scenarios"][n]) for mesh in meshes for n in names]
        if part == "in_run":
            corner, cell = "in-run share of the bound", lambda sc, m: f"{_median(sc['in_run_per_repeat'][m]):.0%}"
            heads = [f"{mesh} {label[n]}" for mesh, n, _ in cols]
        else:
            corner, cell = "val loss at equal wall-clock time", lambda sc, m: f"{sc['val_loss_at_equal_time'][m]:.4f}"
            heads = [f"{mesh} {label[n]} ({sc['equal_time_s']:.0f} s)" for mesh, n, sc in cols]
        lines += [f"| {corner} | " + " | ".join(heads) + " |", "|---|" + "---:|" * len(cols)]
        return lines + [f"| {m} | " + " | ".join(cell(sc, m) for _, _, sc in cols) + " |" for m in methods]
    if part == "timings":
        lines += ["| mesh | sync step | A-EDiT period | A-EDiT fast steps per slow step | random pauses beyond plan |",
                  "|---|---:|---:|---:|---:|"]
        for mesh, r in meshes.items():
            lines.append(f"| {mesh} | {1e3 * r['step_s']:.0f} ms | {1e3 * r['sync_period_s']:.0f} ms | "
                         f"{r['aedit_steps_ratio']:.2f} | {100 * r['random_pause_overshoot']:+.1f}% |")
        return lines
    raise ValueError(f"unknown part {part!r}: throughput:MESH, in_run, loss, timings or all")


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--model", default="tiny")
    ap.add_argument("--steps", type=int, default=160)
    ap.add_argument("--tau", type=int, default=16, help="τ of the step-based methods; A-EDiT's period is τ step times")
    ap.add_argument("--repeats", type=int, default=1, help="runs of each method per scenario (medians)")
    ap.add_argument("--meshes", default="1x4,2x2", help="shards x replicas, comma separated")
    ap.add_argument("--out", default=str(ROOT / "runs" / "bench-stragglers"))
    ap.add_argument("--json", default="stragglers.json",
                    help="result file (a bare name: under benchmarks/results/); every repeat's throughputs")
    a = ap.parse_args()
    load_before = load_average()
    result: dict[str, dict] = {}
    for mesh in a.meshes.split(","):
        shards, replicas = (int(x) for x in mesh.split("x"))
        tau = a.tau
        base = RunConfig(model=a.model, shards=shards, replicas=replicas, steps=a.steps, warmup_steps=8,
                         sync_interval=tau, eval_every=10, eval_batches=2, progress=False, min_sync_steps=1)
        out = f"{a.out}/{mesh}"
        cal = launch(base.replace(method="sync", steps=20, eval_every=0, out=f"{out}/calibrate"), overwrite=True)
        s = step_time(cal)
        base = base.replace(sync_period=tau * s)
        print(f"\n## {shards} shard(s) × {replicas} replicas, model {a.model}, {a.steps} steps, τ={tau}: "
              f"step {1e3 * s:.1f} ms, A-EDiT period {1e3 * tau * s:.0f} ms\n", flush=True)
        clean = scenario("clean", base, {}, out, a.repeats)
        consistent = scenario("consistent", base, dict(straggler_replicas=(1,), straggler_factor=2.0), out, a.repeats)
        random_ = scenario("random", base, dict(random_pause_prob=0.1, random_pause_ms=5e3 * s), out, a.repeats)

        print(f"\nWhole runs, warm-up included (summary.json), 1 replica 2× slower: "
              + ", ".join(f"{m} {consistent['whole'][m] / consistent['whole_bound']:.0%}" for m in METHODS)
              + " of the bound's whole run")
        t1 = min(max(m["t"] for m in r.metrics if m["kind"] == "eval") for r in consistent["runs"].values())
        t2 = min(max(m["t"] for m in r.metrics if m["kind"] == "eval") for r in random_["runs"].values())
        ratio = aedit_steps_ratio(consistent["runs"]["aedit"])
        overshoot = statistics.median(pause_overshoot(r) for r in random_["runs"].values())
        print(f"A-EDiT, 1 replica 2× slower: the fast replica trained {ratio:.2f} local steps per slow one, per round "
              f"(target about 2); random pauses lasted {100 * overshoot:+.1f}% beyond plan (median)", flush=True)
        result[mesh] = {"step_s": s, "sync_period_s": tau * s, "aedit_steps_ratio": ratio,
                        "random_pause_overshoot": overshoot, "scenarios": {
            name: {k: sc[k] for k in ("per_repeat", "in_run_per_repeat", "whole_per_repeat")}
            | {"val_loss_at_equal_time": {m: loss_at(sc["runs"][m], t) for m in METHODS}, "equal_time_s": t}
            for name, sc, t in (("consistent", consistent, t1), ("random", random_, t2))}
            | {"clean": {k: clean[k] for k in ("per_repeat", "in_run_per_repeat", "whole_per_repeat")}}}
        print("\n".join(table_lines({"methods": list(METHODS), "meshes": {mesh: result[mesh]}}, f"throughput:{mesh}")),
              flush=True)
    print("\n" + "\n".join(table_lines({"methods": list(METHODS), "meshes": result}, "all")))
    print(f"\ncommand: python benchmarks/stragglers.py --steps {a.steps} --tau {a.tau} --repeats {a.repeats} --model {a.model} "
          f"--meshes {a.meshes}")
    if a.json:
        write_result(a.json, {"methods": list(METHODS), "meshes": result}, __file__, sys.argv[1:], load_before)
    return 0


if __name__ == "__main__":
    sys.exit(main())
