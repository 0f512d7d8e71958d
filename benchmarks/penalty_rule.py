"""Which anomaly rule judges replicas: healthy ones left alone, a bad one out for as long as its data are bad?

Decision D11 of docs/edit-method.md, by measurement, in three stages:

1. **collect** the per-unit pseudo-gradient norms G and each replica's local steps k of real runs with the
   anomaly filter off and `exclude_trouble` on: a corrupted replica is left out from its first sync after
   the onset on, a spiked one at the sync after its spike, whatever a detector says (a perfect detector;
   softmax weights and clip on, as by default). So the series of a healthy run is what any rule sees up to
   its first flag, and a bad run's is what a rule that catches the bad replica sees (without the
   exclusion the bad replica's share of the anchor moves every replica's norm: nothing would be left to
   replay after the onset). The replay set (`configurations`, `--seeds` each): 1×2, 1×4 and 2×2; τ 2 to
   10; the learning rate ×0.5 and ×2; random pauses, consistent stragglers, time budgets; EDiT and A-EDiT;
   the shipped examples' and mysteries' configurations and every notebook's that runs the penalty;
   healthy, with a replica fed bad data (random bytes, shuffled rows, the byte ramp) and with a spike.

2. **replay** every series through each candidate (`candidates`) with `edit_lab.core.penalty.replay_units`,
   the engine's own `judge_replicas` (tested against the engine in tests/course/distributed/test_penalty_runs.py),
   and measure, separately on the seeds that choose and on the held-out seeds:

   - *healthy flagged*: judged (replica, sync) pairs of healthy replicas with a weight of 0 on some unit,
     over all such pairs (every replica of a healthy run; a spiked replica after its spike; the others of
     a bad run), and the same at the closing sync;
   - *bad caught*: (judged sync, unit) records of the bad replica from the second sync after the onset on
     whose weight is 0, over all such records, and the same at the closing sync;
   - *spike caught*: the spiked replica's struck units left out at the sync after the spike;
   - *shared ×2*: every replica's norm of every unit (and, separately, of the last unit only) doubled from
     the sixth sync on, the training's weather: healthy (replica, sync) pairs flagged that were not before.

   The chosen setting, with D10's α and E: on the choosing seeds, every spike caught, no flag from a
   shared rise, at most 0.5 % of healthy replica-syncs flagged, and the most of the bad replica caught
   (then the fewest flags).

3. **verify** for real (`--verify`): every bad-data and spike configuration of the replay set, on the
   held-out seeds, with the chosen defaults, the lab's former rule (D10) and the penalty off: the final
   validation loss, and what the penalty decided.

    python benchmarks/penalty_rule.py --collect --verify   # everything (about 40 min on 2 busy cores)
    python benchmarks/penalty_rule.py                      # stage 2 on the saved series, in about a minute
    python benchmarks/penalty_rule.py --verify             # stages 2 and 3

The series go to benchmarks/results/penalty_rule_series.json, the table and the real runs to
benchmarks/results/penalty_rule.json (rendered into docs/benchmarks.md by benchmarks/render.py).
"""

from __future__ import annotations

import argparse
import json
import math
import statistics
import sys
import time
from collections.abc import Callable, Sequence
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "benchmarks"))

from results_io import RESULTS, command_line, load_average, write_result  # noqa: E402

from edit_lab.core.penalty import AUTHORS_DETECTOR, PenaltyConfig, replay_units  # noqa: E402

SERIES = RESULTS / "penalty_rule_series.json"
RESULT = RESULTS / "penalty_rule.json"
CHOOSE, HELD_OUT = (0, 1), (2, 3)
SHARED, SHARED_FROM = 2.0, 5
MAX_HEALTHY = 0.005  # the largest share of healthy replica-syncs flagged a chosen setting may have


# ---------------------------------------------------------------- stage 1: the replay set and its runs


def configurations() -> dict[str, tuple[Any, dict[str, Any]]]:
    """name → (RunConfig, trouble): trouble {} for a healthy run, else {"kind", "step", "replica"}."""
    from edit_course.lessons.capstone import base_config
    from edit_lab import RunConfig
    from edit_lab.config import default_lab_config
    from edit_lab.tools.make_examples import example_config

    def tiny(**kw: Any) -> Any:  # notebooks 02-07's runs: tiny model, 2 shards × 2 replicas
        base = dict(method="edit", shards=2, replicas=2, model="tiny", seq_len=64, batch_size=8, warmup_steps=4,
                    sync_interval=4, eval_every=0, progress=False)
        return RunConfig(**{**base, **kw})

    nb05 = tiny(steps=40, sync_interval=2, penalty_arming=4, penalty_clip_norm=1.0)  # notebook 05's `base`
    mystery = base_config()  # 1×4 nano, τ 4, random pauses on every replica (the capstone's runs)
    lab = default_lab_config().replace(eval_every=0)  # 2×2 nano, τ 4, 24 steps (the lab panel)
    quiet = mystery.replace(random_pause_prob=0.0)
    out: dict[str, tuple[Any, dict[str, Any]]] = {
        "mystery": (mystery, {}),
        "mystery-straggler": (mystery.replace(straggler_replicas=(1,), straggler_factor=2.0), {}),
        "mystery-slow-link": (mystery.replace(link_latency_ms=2.0, link_bandwidth_mb_s=1.5), {}),
        "lab-edit": (lab.replace(method="edit"), {}),
        "lab-aedit": (lab.replace(method="aedit"), {}),
        "lab-edit-long": (lab.replace(method="edit", steps=96), {}),
        "examples-edit": (example_config("edit"), {}),
        "examples-aedit": (example_config("aedit"), {}),
        "nb05": (nb05, {}),
        "nb07": (tiny(steps=20), {}),
        "nb06-straggler-edit": (tiny(steps=40, straggler_replicas=(1,), straggler_factor=2.0, time_budget=10.0), {}),
        "nb06-straggler-aedit": (tiny(method="aedit", steps=40, straggler_replicas=(1,), straggler_factor=2.0,
                                      time_budget=10.0, sync_period=0.3), {}),
        "nb06-pauses-edit": (tiny(steps=40, random_pause_prob=0.2, random_pause_ms=60.0), {}),
        "nb06-pauses-aedit": (tiny(method="aedit", steps=40, random_pause_prob=0.2, random_pause_ms=60.0,
                                   sync_period=0.3), {}),
        "nb03-1x2": (tiny(shards=1, replicas=2, steps=30, warmup_steps=5, sync_interval=5), {}),
        "nb03-2x2": (tiny(steps=30, warmup_steps=5, sync_interval=5), {}),
        "nb03-4x1": (tiny(shards=4, replicas=1, steps=30, warmup_steps=5, sync_interval=5), {}),
        "nb04": (tiny(steps=20, seq_len=128, batch_size=16, link_latency_ms=1.0, link_bandwidth_mb_s=5.0), {}),
        "nb02": (tiny(steps=50, warmup_steps=10, sync_interval=10, link_latency_ms=5.0, link_bandwidth_mb_s=20.0), {}),
        "1x4-tau2": (quiet.replace(sync_interval=2), {}),
        "1x4-tau10": (quiet.replace(sync_interval=10, steps=84), {}),
        "1x2-tau6": (quiet.replace(replicas=2, sync_interval=6, steps=58), {}),
        "1x2-tau4": (quiet.replace(replicas=2), {}),
        "1x4-lr-half": (mystery.replace(lr=0.0015), {}),
        "1x4-lr-double": (mystery.replace(lr=0.006), {}),
        "1x4-budget": (mystery.replace(time_budget=4.0), {}),
        "bench-edit": (tiny(sync_interval=10, straggler_replicas=(1,), straggler_factor=2.0, time_budget=12.0), {}),
        "bench-aedit": (tiny(method="aedit", sync_interval=10, straggler_replicas=(1,), straggler_factor=2.0,
                             time_budget=12.0, sync_period=2.4), {}),
    }
    bad = {  # name: (config, bad replica, first corrupted step, corrupt mode)
        "mystery-bad": (mystery, 2, 24, "random"),
        "nb05-bad": (nb05, 1, 21, "random"),
        "1x2-bad": (quiet.replace(replicas=2), 1, 20, "random"),
        "2x2-bad": (lab.replace(method="edit", steps=60), 1, 28, "random"),
        "1x4-tau10-bad": (quiet.replace(sync_interval=10, steps=84), 1, 34, "random"),
        "1x4-tau2-bad": (quiet.replace(sync_interval=2), 3, 24, "random"),
        "1x4-lr-double-bad": (mystery.replace(lr=0.006), 0, 24, "random"),
        "1x4-lr-half-bad": (mystery.replace(lr=0.0015), 1, 24, "random"),
        "mystery-bad-shuffle": (mystery, 1, 24, "shuffle"),
        "mystery-bad-corpus": (mystery, 3, 24, "corpus"),
        "mystery-straggler-bad": (mystery.replace(straggler_replicas=(1,), straggler_factor=2.0), 3, 24, "random"),
        "examples-aedit-bad": (example_config("aedit").replace(straggler_replicas=()), 0, 20, "random"),
        "nb07-bad": (tiny(steps=32), 1, 16, "random"),
    }
    for name, (cfg, r, step, mode) in bad.items():
        out[name] = (cfg.replace(corrupt_replica=r, corrupt_from_step=step, corrupt_mode=mode),
                     {"kind": "corrupt", "step": step, "replica": r})
    spikes = {  # name: (config, spiked replica, step, scale, units)
        "nb05-spike": (nb05, 1, 21, 10.0, ()),
        "mystery-spike": (mystery, 2, 25, 10.0, ()),
        "1x4-spike-unit": (mystery, 1, 29, 3.0, (1,)),
        "lab-spike": (lab.replace(method="edit", steps=48), 0, 29, 1.5, ()),
    }
    for name, (cfg, r, step, scale, units) in spikes.items():
        out[name] = (cfg.replace(spike_replica=r, spike_step=step, spike_scale=scale, spike_units=units),
                     {"kind": "spike", "step": step, "replica": r, "units": list(units)})
    return out


def series_of(records: Sequence[dict[str, Any]], replicas: int) -> dict[str, Any]:
    """One run's penalty.jsonl as series: sync steps, closing flags, k[r][i], G[r][u][i], weight[r][u][i].

    A sync writes unit 0's replicas first, so a record of (unit 0, replica 0) starts the next one (A-EDiT's
    last meetings can sync several times at one step)."""
    syncs: list[dict[str, Any]] = []
    for p in records:
        if p.get("kind", "penalty") != "penalty":
            continue
        if (p["unit"], p["replica"]) == (0, 0):
            syncs.append({"step": p["step"], "closing": bool(p.get("closing")), "rec": {}})
        syncs[-1]["rec"][(p["replica"], p["unit"])] = p
    units = 1 + max((u for s in syncs for _, u in s["rec"]), default=-1)
    return {"sync_steps": [s["step"] for s in syncs], "closing": [s["closing"] for s in syncs],
            "k": [[s["rec"][(r, 0)]["steps"] for s in syncs] for r in range(replicas)],
            "G": [[[s["rec"][(r, u)]["G"] for s in syncs] for u in range(units)] for r in range(replicas)],
            "weight": [[[s["rec"][(r, u)]["weight"] for s in syncs] for u in range(units)] for r in range(replicas)]}


def collect(names: Sequence[str], seeds: Sequence[int], out: Path) -> list[dict[str, Any]]:
    """One real run per configuration and seed: the anomaly filter off, `exclude_trouble` on."""
    from edit_lab import launch

    confs = configurations()
    rows = []
    for seed in seeds:
        for name in names:
            cfg, trouble = confs[name]
            t = time.monotonic()
            run = launch(cfg.replace(seed=seed, penalty_anomaly=False, exclude_trouble=True,
                                     out=str(out / f"{name}-s{seed}")), overwrite=True)
            series = series_of(run.penalty, cfg.replicas)
            series.pop("weight")
            # G is a float32 norm: 9 significant digits keep its every digit (and the file small)
            series["G"] = [[[None if g is None else float(f"{g:.9g}") for g in per] for per in Gr]
                           for Gr in series["G"]]
            rows.append({"config": name, "seed": seed, "method": cfg.method, "trouble": trouble, **series,
                         "final_val_loss": run.summary["final_val_loss"]})
            print(f"  {name:>22} seed {seed}: {len(rows[-1]['sync_steps'])} syncs ({time.monotonic() - t:.0f} s)",
                  flush=True)
    return rows


# ---------------------------------------------------------------- stage 2: the candidates and their replay


@dataclass(frozen=True)
class Candidate:
    """One rule: a PenaltyConfig (its detector and D11 fields), how units are judged, what the closing sync does."""

    label: str
    penalty: PenaltyConfig = field(default_factory=PenaltyConfig)
    whole_replica: bool = True  # with peers: a replica flagged on one unit is left out of all (D11)
    closing_judged_out: bool = True  # False: the former closing sync, which let every finite norm in


def candidates() -> list[Candidate]:
    """The authors' detector, the lab's former rule (D10), D10 with the closing sync inheriting, D11 judged per
    unit, then D11's grid: how strict the detector is (δ, ε) and how long a flagged replica stays out (κ_s),
    with D10's α 0.3 and E 4 (how fast the detector learns, when it arms: what the lessons teach with E = 4);
    α 0.1 and E 3 / 5 around each setting are shown, not chosen from."""
    d10 = PenaltyConfig(peers=False)
    grid = [Candidate("authors' detector (α 0.02, E 120, G)", PenaltyConfig.authors(), closing_judged_out=False),
            Candidate("authors' detector with the lab's E 4", PenaltyConfig.authors(arming=4),
                      closing_judged_out=False),
            Candidate("D10, the lab's former rule (closing sync not judged)", d10, closing_judged_out=False),
            Candidate("D10, the closing sync inheriting", d10),
            Candidate("D11 per unit (peers, each unit alone)", PenaltyConfig(), whole_replica=False)]
    for threshold in (2.0, 2.5, 3.0):
        for eps in (0.1, 0.15, 0.2):
            for stay in (0.0, 1.2, 1.3, 1.5):
                for alpha, arming in ((0.3, 4), (0.1, 4), (0.3, 3), (0.3, 5)):
                    p = PenaltyConfig(alpha=alpha, arming=arming, threshold=threshold, min_rel_std=eps,
                                      stay_ratio=stay)
                    label = f"D11 α {alpha:g}, E {arming}, δ {threshold:g}, ε {eps:g}, κ_s {stay:g}"
                    grid.append(Candidate(label, p))
    return grid


def _norm(g: float | None) -> float:
    return math.nan if g is None else float(g)


def flags_of(c: Candidate, row: dict[str, Any], scale: Callable[[int, int], float] | None = None
             ) -> list[list[list[bool]]]:
    """outlier[r][u][i] of candidate `c` on one collected run (norms × scale(u, i) when given)."""
    G = [[[_norm(g) * (scale(u, i) if scale else 1.0) for i, g in enumerate(per)] for u, per in enumerate(Gr)]
         for Gr in row["G"]]
    got = replay_units(c.penalty, G, row["k"], row["closing"], whole_replica=c.whole_replica)
    out = [[[j.outlier for j in per] for per in Jr] for Jr in got]
    if not c.closing_judged_out:  # the former closing sync: only a non-finite norm was left out
        for r, Jr in enumerate(got):
            for u, per in enumerate(Jr):
                for i, j in enumerate(per):
                    if row["closing"][i]:
                        out[r][u][i] = not math.isfinite(G[r][u][i])
    return out


def onset_of(row: dict[str, Any]) -> int | None:
    """Index of the first sync whose round holds the trouble (a step > its step), None for a healthy run."""
    t = row["trouble"]
    return next((i for i, s in enumerate(row["sync_steps"]) if s > t["step"]), None) if t else None


@dataclass
class Tally:
    healthy: int = 0  # judged healthy replica-syncs
    healthy_flagged: int = 0
    healthy_closing: int = 0
    healthy_closing_flagged: int = 0
    bad: int = 0  # the bad replica's (judged sync, unit) records from onset + 1
    bad_caught: int = 0
    bad_closing: int = 0
    bad_closing_caught: int = 0
    spike: int = 0
    spike_caught: int = 0
    shared: int = 0  # healthy replica-syncs flagged under a shared rise that were not before
    shared_unit: int = 0
    bad_by_config: dict[str, list[int]] = field(default_factory=dict)
    healthy_by_config: dict[str, int] = field(default_factory=dict)


def tally(c: Candidate, rows: Sequence[dict[str, Any]]) -> Tally:
    t = Tally()
    for row in rows:
        flags = flags_of(c, row)
        R, U, n = len(row["G"]), len(row["G"][0]), len(row["sync_steps"])
        trouble, on = row["trouble"], onset_of(row)
        kind = trouble.get("kind")
        for r in range(R):
            for i in range(n):
                if row["k"][r][i] == 0:
                    continue  # trained no step: never judged
                closing = row["closing"][i]
                out = [flags[r][u][i] for u in range(U)]
                if kind == "corrupt" and r == trouble["replica"] and on is not None and i >= on:
                    if i > on:
                        if closing:
                            t.bad_closing += U
                            t.bad_closing_caught += sum(out)
                        else:
                            t.bad += U
                            t.bad_caught += sum(out)
                            mine = t.bad_by_config.setdefault(row["config"], [0, 0])
                            mine[0] += sum(out)
                            mine[1] += U
                    continue
                if kind == "spike" and r == trouble["replica"] and i == on:
                    struck = trouble.get("units") or range(U)
                    t.spike += len(struck)
                    t.spike_caught += sum(out[u] for u in struck)
                    continue
                if closing:
                    t.healthy_closing += 1
                    t.healthy_closing_flagged += any(out)
                else:
                    t.healthy += 1
                    t.healthy_flagged += any(out)
                    t.healthy_by_config[row["config"]] = t.healthy_by_config.get(row["config"], 0) + any(out)
        if not trouble and R > 1 and n > SHARED_FROM:
            for unit_only in (False, True):
                last = U - 1
                scaled = flags_of(c, row, lambda u, i: SHARED if i >= SHARED_FROM and (not unit_only or u == last)
                                  else 1.0)
                extra = sum(any(scaled[r][u][i] for u in range(U)) and not any(flags[r][u][i] for u in range(U))
                            for r in range(R) for i in range(SHARED_FROM, n) if row["k"][r][i])
                if unit_only:
                    t.shared_unit += extra
                else:
                    t.shared += extra
    return t


def measures(t: Tally) -> dict[str, Any]:
    share = lambda a, b: a / b if b else math.nan  # noqa: E731
    return {"healthy_flagged": t.healthy_flagged, "healthy": t.healthy,
            "healthy_share": share(t.healthy_flagged, t.healthy),
            "healthy_closing_flagged": t.healthy_closing_flagged, "healthy_closing": t.healthy_closing,
            "bad_caught": t.bad_caught, "bad": t.bad, "bad_share": share(t.bad_caught, t.bad),
            "bad_closing_caught": t.bad_closing_caught, "bad_closing": t.bad_closing,
            "bad_closing_share": share(t.bad_closing_caught, t.bad_closing),
            "spike_caught": t.spike_caught, "spike": t.spike, "shared_flagged": t.shared,
            "shared_unit_flagged": t.shared_unit,
            "bad_by_config": {k: round(share(*v), 3) for k, v in sorted(t.bad_by_config.items())},
            "healthy_by_config": {k: v for k, v in sorted(t.healthy_by_config.items()) if v}}


def evaluate(cands: Sequence[Candidate], rows: Sequence[dict[str, Any]]) -> list[dict[str, Any]]:
    """Every measure of every candidate on the choosing and on the held-out seeds."""
    parts = {"choose": [r for r in rows if r["seed"] in CHOOSE], "held_out": [r for r in rows if r["seed"] in HELD_OUT]}
    out = []
    for c in cands:
        entry = {"label": c.label, "penalty": asdict(c.penalty), "whole_replica": c.whole_replica,
                 "closing_judged_out": c.closing_judged_out}
        for part, mine in parts.items():
            entry[part] = measures(tally(c, mine))
        out.append(entry)
    return out


def choose(results: Sequence[dict[str, Any]]) -> dict[str, Any]:
    """The D11 setting chosen on the choosing seeds (module docstring)."""
    ok = [r for r in results if r["label"].startswith("D11 α 0.3, E 4,")
          and r["choose"]["spike_caught"] == r["choose"]["spike"]
          and r["choose"]["shared_flagged"] == 0 and r["choose"]["shared_unit_flagged"] == 0
          and r["choose"]["healthy_share"] <= MAX_HEALTHY]
    return max(ok, key=lambda r: (round(r["choose"]["bad_share"], 3), -r["choose"]["healthy_flagged"]))


# ---------------------------------------------------------------- stage 3: for real


def verify(chosen: PenaltyConfig, seeds: Sequence[int], out: Path) -> list[dict[str, Any]]:
    """Every bad-data and spike configuration for real: the chosen rule, the former one and no penalty."""
    from edit_lab import launch

    variants = {"D11 (chosen)": {f"penalty_{k}": v for k, v in asdict(chosen).items()},
                "D10 (former)": {"penalty_peers": False},
                "penalty off": dict(penalty_anomaly=False, penalty_weighting=False, penalty_clip=False)}
    rows = []
    for name, (cfg, trouble) in configurations().items():
        if not trouble:
            continue
        for seed in seeds:
            entry: dict[str, Any] = {"config": name, "seed": seed, "trouble": trouble}
            for label, kw in variants.items():
                t = time.monotonic()
                run = launch(cfg.replace(seed=seed, out=str(out / f"verify-{name}-s{seed}"), **kw), overwrite=True)
                s = series_of(run.penalty, cfg.replicas)
                r = trouble["replica"]  # the troubled replica's weights and steps are what `verified` reads
                entry[label] = {"final_val_loss": run.summary["final_val_loss"], "sync_steps": s["sync_steps"],
                                "closing": s["closing"], "k": s["k"][r],
                                "weight": [[round(w, 4) for w in per] for per in s["weight"][r]]}
                print(f"  {name:>22} seed {seed} {label:>13}: final val {run.summary['final_val_loss']:.4f} "
                      f"({time.monotonic() - t:.0f} s)", flush=True)
            rows.append(entry)
    return rows


def verified(rows: Sequence[dict[str, Any]], series: Sequence[dict[str, Any]] = ()) -> dict[str, dict[str, Any]]:
    """Per variant, over the bad-data runs: the bad replica's weight-0 share from onset + 1 on (judged syncs, and
    the closing one), final losses against no penalty (how many lower, mean and median difference, how many
    worse by more than 1: a run the penalty wrecked), and the same losses for the perfect detector (the
    collected run with `exclude_trouble`, same configuration and seed)."""
    perfect = {(r["config"], r["seed"]): r["final_val_loss"] for r in series}
    out: dict[str, dict[str, Any]] = {}
    for label in ("D11 (chosen)", "D10 (former)", "perfect detector"):
        caught = judged = closing_caught = closing = 0
        diffs = []
        for row in rows:
            if row["trouble"]["kind"] != "corrupt":
                continue
            off = row["penalty off"]["final_val_loss"]
            if label == "perfect detector":
                if (row["config"], row["seed"]) in perfect:
                    diffs.append(perfect[(row["config"], row["seed"])] - off)
                continue
            mine = row[label]  # "k" and "weight" are the bad replica's
            diffs.append(mine["final_val_loss"] - off)
            on = next(i for i, s in enumerate(mine["sync_steps"]) if s > row["trouble"]["step"])
            for i in range(on + 1, len(mine["sync_steps"])):
                if not mine["k"][i]:
                    continue
                zero = sum(w[i] == 0.0 for w in mine["weight"])
                if mine["closing"][i]:
                    closing += len(mine["weight"])
                    closing_caught += zero
                else:
                    judged += len(mine["weight"])
                    caught += zero
        ds = sorted(diffs)
        median = statistics.median(ds) if ds else math.nan
        out[label] = {"runs": len(ds), "lower_than_off": sum(d < 0 for d in ds), "wrecked": sum(d > 1.0 for d in ds),
                      "mean_diff": sum(ds) / len(ds) if ds else math.nan, "median_diff": median,
                      "bad_share": caught / judged if judged else (1.0 if label == "perfect detector" else math.nan),
                      "bad_closing_share": closing_caught / closing if closing else
                      (1.0 if label == "perfect detector" else math.nan)}
    return out


# ---------------------------------------------------------------- the table


def _pct(a: float) -> str:
    return "—" if math.isnan(a) else f"{100 * a:.1f} %"


def table_lines(data: dict[str, Any]) -> list[str]:
    """docs/benchmarks.md's and the method page's table: the reference rows, the chosen one and its neighbours."""
    head = ("| rule | seeds | healthy replica-syncs flagged | at the closing sync | bad replica left out "
            "(from onset + 1) | at the closing sync | spike caught | shared ×2 rise: flags |")
    lines = [head, "|" + "---|" * (head.count("|") - 1)]
    shown = [r for r in data["results"] if r["label"] in data["shown"]]
    for r in sorted(shown, key=lambda r: data["shown"].index(r["label"])):
        for part, name in (("choose", "0–1 (choose)"), ("held_out", "2–3 (held out)")):
            m = r[part]
            label = f"**{r['label']}**" if r["label"] == data["chosen"] else r["label"]
            lines.append(f"| {label} | {name} | {m['healthy_flagged']}/{m['healthy']} ({_pct(m['healthy_share'])}) | "
                         f"{m['healthy_closing_flagged']}/{m['healthy_closing']} | {_pct(m['bad_share'])} | "
                         f"{_pct(m['bad_closing_share'])} | {m['spike_caught']}/{m['spike']} | "
                         f"{m['shared_flagged']} (one unit: {m['shared_unit_flagged']}) |")
    return lines


def verify_lines(data: dict[str, Any]) -> list[str]:
    v = data.get("verified") or {}
    lines = ["| rule, for real (held-out seeds, bad-data runs) | bad replica left out (from onset + 1) | "
             "at the closing sync | final loss below the penalty off | difference: median / mean | "
             "runs wrecked (> +1) |", "|---|---:|---:|---:|---:|---:|"]
    for label, m in v.items():
        lines.append(f"| {label} | {_pct(m['bad_share'])} | {_pct(m['bad_closing_share'])} | "
                     f"{m['lower_than_off']}/{m['runs']} | {m['median_diff']:+.3f} / {m['mean_diff']:+.3f} | "
                     f"{m['wrecked']} |")
    return lines


def shown_labels(results: Sequence[dict[str, Any]], chosen: str) -> list[str]:
    """The rows the table shows: the references, the chosen setting and the settings next to it."""
    refs = [r["label"] for r in results if not r["label"].startswith("D11 α")]
    c = next(r for r in results if r["label"] == chosen)["penalty"]
    keys = ("alpha", "arming", "threshold", "min_rel_std", "stay_ratio")
    near = [r["label"] for r in results if r["label"].startswith("D11 α") and r["label"] != chosen
            and sum(r["penalty"][k] != c[k] for k in keys) == 1]
    return refs + [chosen] + near


def _trimmed(results: Sequence[dict[str, Any]], chosen: str) -> list[dict[str, Any]]:
    """The results as saved: every measure of every candidate, the per-configuration breakdowns of the rows the
    table shows only."""
    shown = set(shown_labels(results, chosen))
    out = []
    for r in results:
        if r["label"] not in shown:
            r = {**r, **{part: {k: v for k, v in r[part].items() if not k.endswith("_by_config")}
                         for part in ("choose", "held_out")}}
        out.append(r)
    return out


def parse(argv: list[str] | None = None) -> argparse.Namespace:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--collect", action="store_true", help="run stage 1 (else replay the saved series)")
    ap.add_argument("--configs", nargs="+", default=None, help="configurations to (re)collect; the rest are kept")
    ap.add_argument("--seeds", type=int, default=4, help="seeds 0 … N−1 (0–1 choose, 2–3 are held out)")
    ap.add_argument("--verify", action="store_true", help="run stage 3 on the held-out seeds")
    ap.add_argument("--out", type=Path, default=Path("runs") / "bench-penalty-rule")
    return ap.parse_args(argv)


def main(argv: list[str] | None = None) -> None:
    args = parse(argv)
    argv = sys.argv[1:] if argv is None else argv
    load_before = load_average()
    print("$ python benchmarks/penalty_rule.py " + " ".join(argv), flush=True)
    if args.collect:
        names = args.configs or list(configurations())
        rows = collect(names, range(args.seeds), args.out)
        if args.configs and SERIES.exists():
            rows = [r for r in json.loads(SERIES.read_text()) if r["config"] not in names] + rows
        SERIES.write_text(json.dumps(rows, separators=(",", ":")))
    rows = json.loads(SERIES.read_text())
    results = evaluate(candidates(), rows)
    chosen = choose(results)
    previous = json.loads(RESULT.read_text()) if RESULT.exists() else {}
    data = {"choose_seeds": list(CHOOSE), "held_out_seeds": list(HELD_OUT), "max_healthy": MAX_HEALTHY,
            "configs": sorted({r["config"] for r in rows}), "runs": len(rows), "chosen": chosen["label"],
            "shown": shown_labels(results, chosen["label"]), "results": _trimmed(results, chosen["label"]),
            "verify": previous.get("verify", []), "verified": previous.get("verified", {}),
            "series_note": previous.get("series_note", "") if not args.collect else ""}
    data["verify_command"] = previous.get("verify_command", "")  # stage 3 is kept from the run that made it
    if args.verify:
        p = PenaltyConfig(**chosen["penalty"])
        data["verify"] = verify(p, HELD_OUT, args.out)
        data["verify_command"] = command_line(__file__, argv)
    if data["verify"]:
        data["verified"] = verified(data["verify"], rows)
    print("\n".join(table_lines(data)))
    if data["verified"]:
        print()
        print("\n".join(verify_lines(data)))
    print(f"\nchosen: {chosen['label']}; bad replica left out by configuration (held out): "
          f"{chosen['held_out']['bad_by_config']}")
    write_result(RESULT, data, __file__, argv, load_before)


if __name__ == "__main__":
    main()
