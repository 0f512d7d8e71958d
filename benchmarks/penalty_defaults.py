"""Which anomaly-detector settings never flag a healthy replica in a lab-length run, yet still catch a spike?

Decision D10 of docs/edit-method.md, by measurement, in three stages:

1. **collect** real per-unit pseudo-gradient norm series G (one per run, replica and unit, in sync order,
   read from `penalty.jsonl`) and each replica's local steps k per round, from real runs with the
   anomaly filter *off* (softmax weights and clip on, as by default). With the filter off the trajectory
   does not depend on the detector, so the series is exactly what any detector setting that flags
   nothing would see, and what any setting sees up to its first flag. Configurations (`--seeds` each):

   - ``lab-edit``, ``lab-aedit``: `edit_lab.config.default_lab_config()` with method edit / aedit (the
     StragglerLab's starting point; 24 steps, W = τ = 4);
   - ``lab-edit-long``: the same, 96 steps (the StragglerLab's step slider goes to 200);
   - ``examples-edit``, ``examples-aedit``: the shipped example runs' configuration
     (`edit_lab.tools.make_examples.example_config`: replica 1 twice as slow, A-EDiT period 0.15 s);
   - ``nb05``: notebook 05's healthy configuration, built from its parameters cell (tiny model, W = 4,
     τ = 2, 40 steps);
   - ``nb05-spike``, ``nb05-corrupt``: the same with the notebook's spike of replica 1 (θ ← 10·θ after
     SPIKE_STEP) and with replica 1 fed random bytes from CORRUPT_FROM: the failures that must be caught;
   - ``bench-edit``, ``bench-aedit``: the A-EDiT benchmark's own runs (benchmarks/aedit_loss.py: tiny
     model, 2 shards × 2 replicas, τ = 10, replica 1 twice as slow, a 20 s time budget). The longest
     training of all (8–17 syncs of τ = 10 steps): the per-step norm of a healthy replica drifts by
     10–20 % over it (later in training, and in the last, partial round of the budget), which is what
     the noise floor ε is for.

2. **replay** every series offline through candidate detectors with `edit_lab.core.penalty.replay` (the
   engine's own rules: one detector per replica and unit, G/k or G, the noise floor σ ≥ ε·μ̂, and the
   per-replica re-admission of a replica flagged K syncs in a row whose norm is in line with its
   unflagged peers'; tested against the engine in tests/course/distributed/test_penalty_runs.py). The
   candidates (`candidates`): the reference's detector, then α 0.02–0.3 × E 3–5 with no floor (ε = 0),
   then ε 0.05–0.2 × α 0.1–0.3 × E 3–4. For each, count:

   - *healthy flags*: flagged (replica, unit, sync) records of the healthy runs, of the spike runs
     (but the spiked replica's at the spike) and of the bad-data runs before the onset (after it, the
     bad replica's share of the anchor moves every replica's norms: nothing healthy is left to replay);
   - *spike caught*: the spiked replica flagged in every unit at the first sync after the spike;
   - *bad data caught first*: runs whose first flag after the onset of bad data is the bad replica's
     alone, and how many syncs after the onset (exact: the trajectory only changes after a first flag);
   - *rise caught*: over every armed sync of every healthy series, the ratio between the smallest value
     the detector would have flagged there (μ̂ + δ·factor·σ with σ = max(σ̂, ε·μ̂),
     `AnomalyDetector.flag_limit`) and the value it saw: a replica whose norm jumps by more than this is caught wherever it happens;
   - *×1.5 shift*: every value of every replica of a healthy unit from the first armed sync on is
     multiplied by 1.5 (a rise for good shared by all replicas, as after resuming with a larger lr):
     the most syncs in a row the unit is then not updated (every replica flagged); "locked": to the end
     of the run (without re-admission a flagged level is never learnt).

3. **verify** the chosen defaults for real: notebook 05's spike and bad-data runs with the penalty on
   (RunConfig's defaults, the notebook's E and φ), counting flags of the bad and the healthy records.
   (Since D11 RunConfig's defaults judge against the peers; `--no-penalty-peers` is what this measured.)

    python benchmarks/penalty_defaults.py                 # all three (5 seeds: about 12 min on 2 quiet cores)
    python benchmarks/penalty_defaults.py --replay FILE   # stages 2–3 on series collected before (stage 1's JSON)
    python benchmarks/penalty_defaults.py --replay FILE --no-verify   # the table alone, in seconds
    python benchmarks/penalty_defaults.py --configs bench-edit bench-aedit --no-verify   # recollect two, keep the rest

The series go to benchmarks/results/penalty_series.json, the table and the real runs' counts to
benchmarks/results/penalty_defaults.json.
"""

from __future__ import annotations

import argparse
import json
import math
import sys
import time
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from edit_lab import (
    RunConfig,
    launch,  # noqa: E402
)
from edit_lab.core.penalty import PenaltyConfig, replay  # noqa: E402

RESULTS = ROOT / "benchmarks" / "results"
sys.path.insert(0, str(ROOT / "benchmarks"))
from results_io import load_average, write_result  # noqa: E402

NB05 = ROOT / "notebooks" / "05_pseudo_gradient_penalty.ipynb"
BAD = 1  # the replica spiked or fed bad data in the nb05 variants
SHIFT = 1.5


# ---------------------------------------------------------------- stage 1: the configurations and the runs


def nb05_parameters(path: Path = NB05) -> dict[str, Any]:
    """The values of notebook 05's `parameters` cell (executed as Python; it holds only assignments)."""
    nb = json.loads(path.read_text())
    cell = next(c for c in nb["cells"] if "parameters" in c.get("metadata", {}).get("tags", []))
    values: dict[str, Any] = {}
    exec("".join(cell["source"]), {}, values)
    return values


def nb05_config(p: dict[str, Any]) -> RunConfig:
    """Notebook 05's `base` run (its third cell): E and φ from its parameters, the rest of the penalty defaults."""
    return RunConfig(method="edit", shards=2, replicas=2, steps=p["STEPS"], model=p["MODEL"], seq_len=p["SEQ_LEN"],
                     batch_size=p["BATCH"], warmup_steps=p["WARMUP"], sync_interval=p["TAU"],
                     eval_every=p["EVAL_EVERY"], penalty_arming=p["ARMING"], penalty_clip_norm=p["CLIP_NORM"],
                     progress=False)


def _bench(method: str) -> RunConfig:
    """A run of benchmarks/aedit_loss.py's consistent-straggler setting (A-EDiT period: τ slow steps here)."""
    return RunConfig(method=method, model="tiny", shards=2, replicas=2, sync_interval=10, eval_every=0,
                     progress=False, time_budget=20.0, straggler_replicas=(1,), straggler_factor=2.0,
                     sync_period=2.4)


def configurations() -> dict[str, tuple[RunConfig, dict[str, Any]]]:
    """name → (config, trouble): trouble is {} for a healthy run, else {"kind", "step"} of the failure."""
    from edit_lab.config import default_lab_config
    from edit_lab.tools.make_examples import example_config

    lab = default_lab_config()
    p = nb05_parameters()
    nb = nb05_config(p)
    return {
        "lab-edit": (lab.replace(method="edit"), {}),
        "lab-aedit": (lab.replace(method="aedit"), {}),
        "lab-edit-long": (lab.replace(method="edit", steps=96), {}),
        # benchmarks/aedit_loss.py's runs: tiny model, 2×2, τ = 10, replica 1 twice as slow, 20 s each
        "bench-edit": (_bench("edit"), {}),
        "bench-aedit": (_bench("aedit"), {}),
        "examples-edit": (example_config("edit"), {}),
        "examples-aedit": (example_config("aedit"), {}),
        "nb05": (nb, {}),
        "nb05-spike": (nb.replace(spike_replica=BAD, spike_step=p["SPIKE_STEP"], spike_scale=p["SPIKE_SCALE"]),
                       {"kind": "spike", "step": p["SPIKE_STEP"]}),
        "nb05-corrupt": (nb.replace(corrupt_replica=BAD, corrupt_from_step=p["CORRUPT_FROM"],
                                    corrupt_mode=p["CORRUPT_MODE"]), {"kind": "corrupt", "step": p["CORRUPT_FROM"]}),
    }


def series_of(records: Iterable[dict[str, Any]]) -> tuple[list[int], list[list[list[float | None]]]]:
    """(sync steps, G[replica][unit][sync]) from penalty.jsonl's records, in the order they were written.

    A sync writes unit 0's replicas first, so a record of (unit 0, replica 0) starts the next sync (A-EDiT's
    last meetings can sync several times at the same step, so the step alone does not tell syncs apart).
    """
    steps: list[int] = []
    per_sync: list[dict[tuple[int, int], float | None]] = []
    for p in records:
        if p.get("kind", "penalty") != "penalty":
            continue
        if (p["unit"], p["replica"]) == (0, 0):
            steps.append(p["step"])
            per_sync.append({})
        per_sync[-1][(p["replica"], p["unit"])] = p["G"]
    keys = set().union(*per_sync) if per_sync else set()
    R = 1 + max(r for r, _ in keys)
    U = 1 + max(u for _, u in keys)
    return steps, [[[s[(r, u)] for s in per_sync] for u in range(U)] for r in range(R)]


def round_steps(records: Sequence[dict[str, Any]], syncs: Sequence[dict[str, Any]], sync_steps: Sequence[int],
                warmup: int, replicas: int) -> list[list[int]]:
    """k[replica][sync]: each replica's local steps in each round (what the detector divides G by).

    From the penalty records' `steps` where the engine wrote them; otherwise from A-EDiT's round records
    (the steps of each replica at every meeting that synced) or, for EDiT, from the sync steps.
    """
    if records and all("steps" in p for p in records):
        per_sync: list[dict[int, int]] = []
        for p in records:
            if (p["unit"], p["replica"]) == (0, 0):
                per_sync.append({})
            per_sync[-1][p["replica"]] = p["steps"]
        return [[s[r] for s in per_sync] for r in range(replicas)]
    rounds = [m["steps"] for m in syncs if m.get("kind") == "round" and m.get("synced")]
    if rounds:
        assert len(rounds) == len(sync_steps), (len(rounds), len(sync_steps))
        return [[k[r] for k in rounds] for r in range(replicas)]
    k = [b - a for a, b in zip([warmup, *sync_steps], sync_steps)]
    return [list(k) for _ in range(replicas)]


def collect(names: Sequence[str], seeds: Sequence[int], out: Path) -> list[dict[str, Any]]:
    """One real run per configuration and seed, anomaly filter off; the G series of each."""
    confs = configurations()
    rows = []
    for name in names:
        cfg, trouble = confs[name]
        for seed in seeds:
            t = time.monotonic()
            run = launch(cfg.replace(seed=seed, penalty_anomaly=False, out=str(out / f"{name}-s{seed}")), overwrite=True)
            steps, G = series_of(run.penalty)
            k = round_steps(run.penalty, run.syncs, steps, cfg.schedule.warmup_steps, cfg.replicas)
            rows.append({"config": name, "seed": seed, "method": cfg.method, "trouble": trouble,
                         "sync_steps": steps, "k": k, "G": G})
            print(f"  {name:>14} seed {seed}: {len(steps)} syncs × {len(G[0])} units × {len(G)} replicas "
                  f"({time.monotonic() - t:.0f} s)", flush=True)
    return rows


# ---------------------------------------------------------------- stage 2: replay through candidate detectors


@dataclass(frozen=True)
class Setting:
    """One candidate detector (δ stays the reference's 3)."""

    bias_correction: bool
    alpha: float
    arming: int
    readmit_after: int
    per_step: bool = True
    threshold: float = 3.0
    min_rel_std: float = 0.0

    @property
    def label(self) -> str:
        mode = "corrected" if self.bias_correction else "exact"
        return (f"{mode}{', G/k' if self.per_step else ', G'} α={self.alpha:g} E={self.arming} "
                f"K={self.readmit_after} ε={self.min_rel_std:g}")

    def penalty(self) -> PenaltyConfig:
        """D10's candidates judge each unit alone on its own norm (`peers` off; D11 and its judging against the
        peers are benchmarks/penalty_rule.py's)."""
        return PenaltyConfig(alpha=self.alpha, arming=self.arming, threshold=self.threshold,
                             bias_correction=self.bias_correction, readmit_after=self.readmit_after,
                             per_step=self.per_step, min_rel_std=self.min_rel_std, peers=False)


def _norm(g: float | None) -> float:
    return math.nan if g is None else float(g)  # JSON null: a non-finite norm


def replay_unit(setting: Setting, G: Sequence[Sequence[float | None]], k: Sequence[Sequence[int]]
                ) -> list[list[tuple[bool, bool, float]]]:
    """One unit of one run, every replica, sync by sync, through `edit_lab.core.penalty.replay` (the engine's rules).

    `G[r][i]` and `k[r][i]`: replica r's norm and local steps at sync i. Returns per replica and sync
    (outlier, readmitted, rise) where rise = (the smallest value the armed detector would have flagged) /
    (the value it judged): how much larger this norm would have had to be to be caught (NaN: not armed).
    """
    judged = replay(setting.penalty(), [[_norm(g) for g in Gr] for Gr in G], k)
    return [[(j.outlier, j.readmitted, j.limit / j.judged if j.judged and math.isfinite(j.limit) else math.nan)
             for j in per_sync] for per_sync in judged]


def first_after(steps: Sequence[int], step: int) -> int:
    """Index of the first sync at a step > `step` (where a failure after `step`'s update is first seen)."""
    return next(i for i, s in enumerate(steps) if s > step)


def longest_run(flags: Sequence[bool]) -> int:
    best = cur = 0
    for f in flags:
        cur = cur + 1 if f else 0
        best = max(best, cur)
    return best


def evaluate(setting: Setting, rows: Sequence[dict[str, Any]]) -> dict[str, Any]:
    """Every measure of the module docstring for one setting, over the collected rows."""
    healthy_flags: dict[str, int] = {}
    judged = total = readmitted_healthy = 0
    rises: list[float] = []
    spike = spike_runs = corrupt_runs = corrupt_first = 0
    delays: list[int] = []
    shift_lost, locked = 0, False
    for row in rows:
        name, trouble, steps, k = row["config"], row["trouble"], row["sync_steps"], row["k"]
        kind = trouble.get("kind")
        onset = first_after(steps, trouble["step"]) if trouble else len(steps)
        healthy_flags.setdefault(name, 0)
        spiked = kind == "spike"
        first: tuple[int, set[int]] | None = None  # the first sync after a corrupt onset with a flag, who
        for u in range(len(row["G"][0])):
            G = [row["G"][r][u] for r in range(len(row["G"]))]
            replayed = replay_unit(setting, G, k)
            if kind == "corrupt":
                i = next((i for i in range(onset, len(steps)) if any(d[i][0] for d in replayed)), None)
                if i is not None and (first is None or i <= first[0]):
                    who = {r for r, d in enumerate(replayed) if d[i][0]}
                    first = (i, who | first[1]) if first is not None and i == first[0] else (i, who)
            for r, decisions in enumerate(replayed):
                for i, (outlier, readmitted, rise) in enumerate(decisions):
                    if kind == "corrupt" and i >= onset:
                        # without the filter the bad replica's Δ reaches the anchor and every replica's norm
                        # follows: from the onset on a replay says nothing (the real runs of `verify` do)
                        continue
                    if kind == "spike" and i == onset and r == BAD:
                        spiked = spiked and outlier  # every unit is struck (spike_units = ())
                        continue  # after it, θ ← a: the spiked replica is healthy again
                    total += 1
                    healthy_flags[name] += outlier
                    readmitted_healthy += readmitted
                    if not math.isnan(rise):
                        judged += 1
                        rises.append(rise)
            if not trouble and len(steps) > setting.arming:  # the ×1.5 shift of every replica, from sync E on
                shifted = [[_norm(g) * (SHIFT if i >= setting.arming else 1.0) for i, g in enumerate(Gr)] for Gr in G]
                per_replica = replay_unit(setting, shifted, k)
                skipped = [all(per_replica[r][i][0] for r in range(len(G))) for i in range(setting.arming, len(steps))]
                shift_lost = max(shift_lost, longest_run(skipped))
                # locked: skipped to the end of the run, though the run was long enough for re-admission
                locked = locked or (all(skipped) and len(skipped) >= max(2, setting.readmit_after))
        spike_runs += kind == "spike"
        spike += spiked
        if kind == "corrupt":
            corrupt_runs += 1
            if first is not None and first[1] == {BAD}:
                corrupt_first += 1
                delays.append(first[0] - onset)
    return {"setting": setting.label, "bias_correction": setting.bias_correction, "per_step": setting.per_step,
            "alpha": setting.alpha, "arming": setting.arming, "readmit_after": setting.readmit_after,
            "healthy_flags": sum(healthy_flags.values()), "healthy_flags_by_config": healthy_flags,
            "healthy_records": total, "judged": judged, "readmitted_healthy": readmitted_healthy,
            "rise_caught_max": max(rises, default=math.nan),
            "rise_caught_median": sorted(rises)[len(rises) // 2] if rises else math.nan,
            "spike_caught": spike, "spike_runs": spike_runs, "corrupt_first": corrupt_first,
            "corrupt_runs": corrupt_runs, "corrupt_delay": sum(delays) / len(delays) if delays else math.nan,
            "shift_lost": shift_lost, "shift_locked": locked}


def candidates(readmit_after: int) -> list[Setting]:
    """The reference's detector (judging G) with the lab's old E = 10 and the lab's E = 3, then the grid of D10."""
    grid = [Setting(False, 0.02, 10, 0, per_step=False), Setting(False, 0.02, 3, 0, per_step=False),
            Setting(True, 0.02, 3, 0, per_step=False), Setting(False, 0.02, 3, 0)]
    for alpha in (0.02, 0.05, 0.1, 0.15, 0.2, 0.25, 0.3):
        for arming in (3, 4, 5):
            grid.append(Setting(True, alpha, arming, readmit_after))
    for eps in (0.05, 0.1, 0.15, 0.2):  # the noise floor σ ≥ ε·μ̂
        for alpha in (0.1, 0.2, 0.3):
            for arming in (3, 4):
                grid.append(Setting(True, alpha, arming, readmit_after, min_rel_std=eps))
    return grid


def _short(name: str) -> str:
    return name.replace("examples-", "ex-").replace("lab-edit-long", "lab-long")


def table(results: Sequence[dict[str, Any]]) -> str:
    """The markdown table of docs/benchmarks.md (one row per setting)."""
    configs = list(results[0]["healthy_flags_by_config"])
    head = ("| detector | healthy flags | " + " | ".join(_short(c) for c in configs) +
            " | judged | spike caught | bad data caught first | rise caught (max / median) | ×1.5 shift lost |")
    lines = [head, "|" + "---|" * (head.count("|") - 1)]
    for r in results:
        by = r["healthy_flags_by_config"]
        shift = "locked" if r["shift_locked"] else str(r["shift_lost"])
        lines.append(
            f"| {r['setting']} | **{r['healthy_flags']}** | " + " | ".join(str(by[c]) for c in configs) +
            f" | {r['judged']}/{r['healthy_records']} | {r['spike_caught']}/{r['spike_runs']} | "
            f"{r['corrupt_first']}/{r['corrupt_runs']} (+{r['corrupt_delay']:.1f}) | "
            f"×{r['rise_caught_max']:.2f} / ×{r['rise_caught_median']:.2f} | {shift} |")
    return "\n".join(lines)


# ---------------------------------------------------------------- stage 3: the chosen defaults, for real


def verify(seeds: Sequence[int], out: Path) -> list[dict[str, Any]]:
    """nb05's spike and bad-data runs with the penalty on, as the notebook runs them (RunConfig's defaults).

    The replay cannot judge bad data (see `evaluate`); these real runs can: per seed, the syncs × units at
    which the bad replica was flagged after the onset, any flag of a healthy record, and re-admissions.
    """
    confs = configurations()
    rows = []
    for name in ("nb05-spike", "nb05-corrupt"):
        cfg, trouble = confs[name]
        for seed in seeds:
            run = launch(cfg.replace(seed=seed, out=str(out / f"verify-{name}-s{seed}")), overwrite=True)
            steps, _ = series_of(run.penalty)
            onset_step = steps[first_after(steps, trouble["step"])]
            recs = [p for p in run.penalty if p.get("kind", "penalty") == "penalty"]
            bad = [p for p in recs if p["replica"] == BAD and p["step"] >= onset_step]
            if trouble["kind"] == "spike":
                bad = [p for p in bad if p["step"] == onset_step]
            healthy = [p for p in recs if p not in bad and not (trouble["kind"] == "corrupt" and p["step"] >= onset_step
                                                                and p["replica"] == BAD)]
            rows.append({"config": name, "seed": seed, "bad_flagged": sum(p["outlier"] for p in bad),
                         "bad_records": len(bad), "first_bad_flag": min((p["step"] for p in bad if p["outlier"]),
                                                                        default=None),
                         "onset_step": onset_step, "healthy_flagged": sum(p["outlier"] for p in healthy),
                         "healthy_records": len(healthy), "readmitted": sum(p.get("readmitted", False) for p in recs),
                         "final_val_loss": run.summary["final_val_loss"]})
            print(f"  {name:>14} seed {seed}: bad replica flagged {rows[-1]['bad_flagged']}/{len(bad)} from step "
                  f"{rows[-1]['first_bad_flag']} (onset {onset_step}), healthy flagged {rows[-1]['healthy_flagged']}/"
                  f"{len(healthy)}, re-admitted {rows[-1]['readmitted']}", flush=True)
    return rows


def parse(argv: list[str] | None = None) -> argparse.Namespace:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--seeds", type=int, default=5, help="seeds 0 … N−1 of every configuration")
    ap.add_argument("--configs", nargs="+", default=None,
                    help="configurations to collect (default: all); the series of the others are kept")
    ap.add_argument("--replay", type=Path, default=None, help="replay this series file instead of collecting")
    ap.add_argument("--readmit-after", type=int, default=3, help="K of the candidates that re-admit")
    ap.add_argument("--no-verify", action="store_true",
                    help="skip the real runs with the chosen defaults (and write no results file)")
    ap.add_argument("--out", type=Path, default=Path("runs") / "bench-penalty-defaults")
    return ap.parse_args(argv)


def main(argv: list[str] | None = None) -> None:
    args = parse(argv)
    load_before = load_average()
    print("$ python benchmarks/penalty_defaults.py " + " ".join(sys.argv[1:] if argv is None else argv))
    RESULTS.mkdir(parents=True, exist_ok=True)
    if args.replay is None:
        names = args.configs or list(configurations())
        rows = collect(names, range(args.seeds), args.out)
        series = RESULTS / "penalty_series.json"
        if args.configs and series.exists():  # a few configurations (re)collected: keep the others' series
            rows = [r for r in json.loads(series.read_text()) if r["config"] not in names] + rows
        series.write_text(json.dumps(rows))
    else:
        rows = json.loads(args.replay.read_text())
    results = [evaluate(s, rows) for s in candidates(args.readmit_after)]
    checks = [] if args.no_verify else verify(range(args.seeds), args.out)
    print()
    print(table(results))
    print()
    print("healthy flags: flagged healthy (replica, unit, sync) records, per configuration after the total; judged: of "
          "those records, how many an armed detector judged; spike caught: runs whose spiked replica was flagged in "
          "every unit at the first sync after the spike; bad data caught first: runs in which the first flag after "
          "the onset of bad data is the bad replica's alone (+ mean syncs after the onset; exact, since the trajectory "
          "only changes after a first flag); rise caught: the rise of a healthy norm "
          "that is flagged at any armed sync (largest / median over the syncs); ×1.5 shift lost: the most syncs in a "
          "row a unit is discarded after every norm rises by half for good (locked: to the end of the run).")
    if checks:
        d = PenaltyConfig()
        print(f"\nthe defaults for real (corrected={d.bias_correction}, per step={d.per_step}, α={d.alpha}, "
              f"E={d.arming}, K={d.readmit_after}, δ={d.threshold}), notebook 05 with E={nb05_parameters()['ARMING']}:")
        print("| run | bad replica flagged (sync × unit) | healthy flagged | re-admitted |\n|---|---:|---:|---:|")
        for name in ("nb05-spike", "nb05-corrupt"):
            mine = [c for c in checks if c["config"] == name]
            print(f"| {name} ({len(mine)} seeds) | {sum(c['bad_flagged'] for c in mine)}/"
                  f"{sum(c['bad_records'] for c in mine)} (every seed: {all(c['bad_flagged'] for c in mine)}) | "
                  f"{sum(c['healthy_flagged'] for c in mine)}/{sum(c['healthy_records'] for c in mine)} | "
                  f"{sum(c['readmitted'] for c in mine)} |")
    if args.no_verify:
        return  # the table only: the results file keeps the last complete measurement
    seeds = sorted({r["seed"] for r in rows})
    write_result(RESULTS / "penalty_defaults.json",
                 {"seeds": seeds, "configs": sorted({r["config"] for r in rows}), "results": results, "verify": checks},
                 __file__, sys.argv[1:] if argv is None else argv, load_before)


if __name__ == "__main__":
    main()
