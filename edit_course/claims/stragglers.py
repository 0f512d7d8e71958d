"""The claims of the straggler lessons (notebooks 06, 07, 08), computed from their runs.

A straggler lesson says who waits, how often and how long, who trains more steps, how close a method
comes to the capacity bound, and which loss a method reaches in the same seconds. Most of that is a
measurement of this machine's clock, so those verdicts are `timing=True`: on fewer cores than ranks the
bound itself moves with the method (a rank that waits lends its core to the others), and a busy
machine moves every number. What the schedule decides (how many stops, which replica trains more
steps, a loss that falls) is no timing. The tables the lessons read (`pace_table`, `local_rounds`) and
the benchmark comparisons their paper boxes quote (`benchmark`, `paired`) live here too, so a box
quotes one computation, not a copy per notebook.
"""

from __future__ import annotations

import json
import statistics
from collections.abc import Sequence
from pathlib import Path

import pandas as pd

from edit_course import RESULTS as COURSE_RESULTS
from edit_course.claims import (
    SEED,
    SHORT,
    blocked_ms_per_step,
    costs_measured_here,
    larger,
    on_this_machine,
    smaller,
    timing_reason,
)
from edit_course.verdict import Verdict, verdict
from edit_lab.config import cores  # noqa: F401  (the lessons import it from here)
from edit_lab.records.analysis import capacity_bound, comm_split, replica_table, rounds_table
from edit_lab.records.run import Run

RESULTS = COURSE_RESULTS
TWO_CORES = ("four ranks share two cores: a rank that waits lends its core, so under A-EDiT, where nobody waits, "
             "the slow replica computes slower")


# ------------------------------------------------------------------------------------ cores and ranks
def own_core_shards(replicas: int, n_cores: int, most: int = 2) -> int:
    """Shards per replica that give every rank a core of its own (at least 1, at most `most`): with fewer
    cores than ranks a waiting rank lends its core to the others and the capacity bound moves (06)."""
    return max(1, min(most, n_cores // max(replicas, 1)))


def cores_line(shards: int, replicas: int, n_cores: int) -> str:
    """What the equal-time comparison runs on, said once: ranks, cores, cores per rank."""
    ranks = shards * replicas
    return (f"{shards}×{replicas} = {ranks} ranks on {n_cores} core{'s' if n_cores != 1 else ''}: "
            f"{n_cores / ranks:.2g} core{'s' if n_cores / ranks != 1 else ''} per rank")


# ------------------------------------------------------------------------------------ tables
def pace_table(runs: dict[str, Run]) -> pd.DataFrame:
    """Per run, after warm-up: wall time, seconds each replica stood blocked, Σ of the replicas' tokens/s vs
    the capacity bound, the final loss (the W warm-up steps are synchronous in every method: left out)."""
    rows = []
    for name, run in runs.items():
        rt = replica_table(run, from_step=run.config.schedule.warmup_steps)
        cap = capacity_bound(run, from_step=run.config.schedule.warmup_steps)
        total = float(rt["tokens_per_s"].sum())
        rows.append({"run": name, "wall_s": run.summary["wall_s"],
                     "fast replica blocked s after warm-up": rt["blocked_s"].iloc[0],
                     "slow replica blocked s after warm-up": rt["blocked_s"].iloc[-1],
                     "Σ replicas' tokens/s": total, "capacity bound tokens/s": cap,
                     "share of the bound after warm-up": total / cap if cap > 0 else float("nan"),
                     "val loss at the end": run.summary["final_val_loss"]})
    return pd.DataFrame(rows).set_index("run")


def local_rounds(run: Run) -> pd.DataFrame:
    """Local steps per round and replica, the rounds that start at or after the end of warm-up (warm-up's
    are rounds of one step each in every method), renumbered from 0: one column per replica."""
    t = rounds_table(run)
    t = t[t["start_step"] >= run.config.schedule.warmup_steps].copy()
    t["round"] = t.groupby("replica").cumcount()
    return t.pivot(index="round", columns="replica", values="local_steps")


def steps_of(run: Run) -> list[int]:
    """Each replica's trained steps (summary.json's per-replica `steps`)."""
    per = run.summary["per_replica"]
    return [int(per[k]["steps"]) for k in sorted(per, key=int)]


# ------------------------------------------------------------------------------------ who waits, who trains
def steps_text(steps: list[int]) -> str:
    """Steps per replica as a reader takes them in: the list for a few replicas, runs of equal counts for many
    ('replicas 0–62: 18, replica 63: 14' rather than 64 numbers)."""
    if len(steps) <= 8:
        return str(steps)
    parts, start = [], 0
    for i in range(1, len(steps) + 1):
        if i == len(steps) or steps[i] != steps[start]:
            who = f"replica {start}" if i - 1 == start else f"replicas {start}–{i - 1}"
            parts.append(f"{who}: {steps[start]}")
            start = i
    return ", ".join(parts)


def stops(run: Run, replica: int = 0) -> int:
    """The replica's meetings with the others after warm-up: one per round (sync: one per step)."""
    t = rounds_table(run)
    return int(((t["replica"] == replica) & (t["start_step"] >= run.config.schedule.warmup_steps)).sum())


def fewer_stops(edit: Run, sync: Run) -> Verdict:
    """EDiT's fast replica meets the slow one once per round of τ steps, sync's once per step."""
    a, b = stops(edit), stops(sync)
    return smaller(f"EDiT's fast replica stops to wait fewer times than sync's: once per τ = "
                   f"{edit.config.schedule.sync_interval} steps, not every step", a, b, names=("EDiT", "sync"), unit="stops", digits=0,
                   why_not=SHORT)


def longer_stops(edit: Run, sync: Run) -> Verdict:
    """… and each of EDiT's stops is longer: it waits out the slow replica's τ extra steps at once."""
    per = {name: replica_table(r, from_step=r.config.schedule.warmup_steps)["blocked_s"].iloc[0] / max(stops(r), 1)
           for name, r in (("edit", edit), ("sync", sync))}
    return larger("each of EDiT's stops is longer than sync's", 1e3 * per["edit"], 1e3 * per["sync"],
                  names=("EDiT", "sync"), unit="ms per stop", timing=True,
                  why_not=timing_reason(edit, 1e3 * (per["edit"] - per["sync"]), "ms per stop"))


def fast_trains_more(aedit: Run, factor: float) -> Verdict:
    """A-EDiT's rounds last the same seconds for every replica: the fast one fits more steps into them.

    More than one step more: in a time-budget run every replica stops on its own clock after the last
    sync point, so even a lockstep method's replicas may end a step apart.

    How many steps fit in a round follows from the replicas' own paces, so on a run whose seconds are this
    machine's (`on_this_machine`) it is a timing: beside a busy core, 06's wall-clock run gave paces only 1.15×
    apart for a 2× straggler, and the two replicas trained 94 and 97 steps."""
    steps = steps_of(aedit)
    ratio = steps[0] / max(steps[-1], 1)
    here, paces = on_this_machine(aedit), pace_ratio(aedit)
    return verdict("under A-EDiT the fast replica trains more steps than the slow one", steps[0] > steps[-1] + 1,
                   f"steps {steps_text(steps)}: {ratio:.2f}×, {local_step_ratio(aedit):.2f}× after the "
                   f"W = {aedit.config.schedule.warmup_steps} lockstep warm-up steps; their own paces {paces:.2f}× "
                   f"apart (the straggler stretches its own compute {factor:g}×, not the rest of a step)",
                   timing=here, why_not=(f"the replicas' own paces were {paces:.2f}× apart, not "
                                         f"{factor:g}×: {timing_reason(aedit)}") if here else SHORT)


def pace_ratio(run: Run) -> float:
    """The fast replica's own pace over the slow one's after warm-up (`own_paces`): how many of its steps fit in
    the time of one slow step. A straggler stretches its forward, backward and optimizer (stragglers.py), not the
    collectives and bookkeeping of a step, so this is below the straggler factor, the more so the less of a step
    is compute; under A-EDiT the fast replica's steps per slow step come out close to it."""
    p = own_paces(run)
    return p[0] / p[-1] if p and p[-1] > 0 else float("nan")


def local_step_ratio(run: Run) -> float:
    """The fast replica's steps over the slow one's after the W warm-up steps, which every method trains in lockstep:
    the ratio the clock decides. The whole run's ratio is pulled towards 1 by those W shared steps, the more so the
    shorter the run, so A-EDiT's fast replica trains "SLOW×" the slow one's steps only after warm-up, and less still
    where a meeting waits for the slow replica's step in progress. NaN when the slow replica trained no local step."""
    steps, w = steps_of(run), run.config.schedule.warmup_steps
    return (steps[0] - w) / (steps[-1] - w) if steps[-1] > w else float("nan")


def waits_less(aedit: Run, edit: Run) -> Verdict:
    """A-EDiT's fast replica stands blocked less per step than EDiT's: it trains on instead of waiting."""
    a = blocked_ms_per_step(aedit, from_step=aedit.config.schedule.warmup_steps)[0]
    e = blocked_ms_per_step(edit, from_step=edit.config.schedule.warmup_steps)[0]
    return smaller("A-EDiT's fast replica waits less per step than EDiT's", a, e, names=("A-EDiT", "EDiT"),
                   unit="ms per step", timing=True, why_not=timing_reason(aedit, a - e, "ms per step"))


def tokens_per_s(run: Run) -> float:
    """Σ of the replicas' tokens/s after warm-up."""
    return float(replica_table(run, from_step=run.config.schedule.warmup_steps)["tokens_per_s"].sum())


def more_tokens(aedit: Run, edit: Run) -> Verdict:
    """In the same seconds A-EDiT trains more tokens than EDiT: the fast replica's waits became steps."""
    a, e = tokens_per_s(aedit), tokens_per_s(edit)
    return larger("A-EDiT trains more tokens per second than EDiT", a, e, names=("A-EDiT", "EDiT"), unit="tokens/s",
                  digits=0, timing=on_this_machine(aedit),
                  why_not=f"{timing_reason(aedit)}; {pace_moves(edit, aedit)}")


def bound(run: Run) -> float:
    """The capacity bound after warm-up: the sum of the replicas' own paces."""
    return capacity_bound(run, from_step=run.config.schedule.warmup_steps)


def own_paces(run: Run) -> list[float]:
    """Each replica's own pace after warm-up (tokens/s had it never waited)."""
    return replica_table(run, from_step=run.config.schedule.warmup_steps)["own_tokens_per_s"].tolist()


def bound_moves(edit: Run, aedit: Run, tolerance: float = 0.05) -> Verdict:
    """With fewer cores than ranks the capacity bound is not the machine's: it moves with the method (a
    waiting rank lends its core), so a share of it cannot rank the methods."""
    b0, b1 = bound(edit), bound(aedit)
    move = b1 / b0 - 1
    gain = tokens_per_s(aedit) / tokens_per_s(edit) - 1
    slow0, slow1 = own_paces(edit)[-1], own_paces(aedit)[-1]
    return verdict(f"on {edit.config.shards}×{edit.config.replicas} the capacity bound moves with the method",
                   abs(move) > tolerance,
                   f"EDiT's bound {b0:,.0f}, A-EDiT's {b1:,.0f} tokens/s ({move:+.0%}; A-EDiT's Σ tokens/s "
                   f"{gain:+.0%} over EDiT's); the slow replica's own pace {slow0:,.0f} → {slow1:,.0f}", timing=True,
                   why_not="as many cores as ranks: no rank lends its core")


def all_working_share(run: Run) -> float:
    """The share of the time after warm-up during which every replica was working at once (a compute span, the
    optimizer, an outer step, a validation or the straggler's busy-wait on any of its ranks): under EDiT the fast
    replica stops to wait once a round, under A-EDiT nobody does, so every core is busy more of the time. NaN
    without events after warm-up."""
    from edit_lab.records.overlap import WORK_KINDS, merge

    w = run.config.schedule.warmup_steps
    spans: dict[int, list[tuple[float, float]]] = {}
    for e in run.events:
        if e["kind"] in WORK_KINDS and e["step"] >= w:
            spans.setdefault(int(e["replica"]), []).append((float(e["t0"]), float(e["t1"])))
    if len(spans) < run.config.replicas:
        return float("nan")
    start = min(t0 for s in spans.values() for t0, _ in s)
    end = max(t1 for s in spans.values() for _, t1 in s)
    if end <= start:
        return float("nan")
    # sweep over every replica's span edges: count how many replicas are inside a span of their own
    edges = []
    for s in spans.values():
        merged = merge(s)  # overlap.py's union: a replica inside two spans at once counts once
        edges += [(t0, 1) for t0, _ in merged] + [(t1, -1) for _, t1 in merged]
    inside, last, together = 0, start, 0.0
    for t, d in sorted(edges, key=lambda x: (x[0], x[1])):
        if inside == len(spans):
            together += t - last
        inside, last = inside + d, t
    return together / (end - start)


def pace_moves(edit: Run, aedit: Run) -> str:
    """What moved a capacity bound between EDiT and A-EDiT, in the runs' own numbers: each replica's own pace under
    both, and how much of the time every replica worked at once (`all_working_share`)."""
    p0, p1 = own_paces(edit), own_paces(aedit)
    paces = ", ".join(f"replica {i} {a:,.0f} → {b:,.0f} ({b / a - 1:+.0%})" for i, (a, b) in enumerate(zip(p0, p1)))
    return (f"own paces EDiT → A-EDiT: {paces}; every replica worked at once {all_working_share(aedit):.0%} of "
            f"A-EDiT's time against {all_working_share(edit):.0%} of EDiT's (cores working together share the "
            f"machine's caches, memory and clock)")


def bound_holds(edit: Run, aedit: Run, tolerance: float = 0.15) -> Verdict:
    """With a core per rank the bound is the replicas' own: about the same under EDiT and A-EDiT (on the virtual
    clock, where no core is lent, no timing: the cost model decides). When it moves anyway, the reason printed is
    measured: the ranks per core, each replica's own pace under both methods and
    how much of the time every replica worked at once (`pace_moves`)."""
    b0, b1 = bound(edit), bound(aedit)
    return verdict("the capacity bound stays put between EDiT and A-EDiT (so a share of it ranks them)",
                   abs(b1 / b0 - 1) <= tolerance, f"EDiT's {b0:,.0f}, A-EDiT's {b1:,.0f} tokens/s ({b1 / b0 - 1:+.0%})",
                   timing=on_this_machine(aedit), why_not=f"{timing_reason(aedit)}; {pace_moves(edit, aedit)}")


# ------------------------------------------------------------------------------------ CO2
def co2_hides(co2: Run, at_most: float = 0.1) -> Verdict:
    """CO2 issues each round's all-reduce and trains the next round while it travels: it waits for at most a
    small part of it (`co2_reduce`'s exposed time against its time in flight)."""
    t = comm_split(co2, by=("kind",)).set_index("kind")
    total = float(t.loc["co2_reduce", "total_s"]) if "co2_reduce" in t.index else 0.0
    exposed = float(t.loc["co2_reduce", "exposed_s"]) if "co2_reduce" in t.index else 0.0
    return verdict("CO2 hides its all-reduce behind the next round", total > 0 and exposed <= at_most * total,
                   f"waited for {1e3 * exposed:.0f} ms of {1e3 * total:.0f} ms in flight", timing=True,
                   why_not=timing_reason(co2, 1e3 * (exposed - at_most * total)))


def falls_over_the_budget(run: Run, name: str) -> Verdict:
    """The validation loss of the agreed model never rises from one timed validation to the next, and ends
    below where it started (two validations of the same model are equal: not a rise)."""
    vals = [v for _, v in run.val_losses()]
    ok = len(vals) >= 2 and all(b <= a for a, b in zip(vals, vals[1:])) and vals[-1] < vals[0]
    return verdict(f"{name}'s validation loss falls over the whole budget", ok, " → ".join(f"{v:.3f}" for v in vals),
                   why_not=SHORT if len(vals) < 2 else "the outer step overshoots (CO2's used to: git show 87dd330)")


def final(run: Run) -> float:
    return float(run.summary["final_val_loss"])


def co2_lags(co2: Run) -> Verdict:
    """CO2 steps its anchor with the mean of the round before: every sync after the first applied the mean
    issued at the sync before it (syncs.jsonl's `applied_round`), so its anchor is always one round behind
    what its replicas trained. The schedule decides it, not the clock; whether the lag costs more loss than
    the steps its hidden all-reduce buys is a measurement (the lesson prints the losses beside it)."""
    syncs = [x for x in co2.syncs if x.get("kind") == "sync"]
    pairs = list(zip(syncs, syncs[1:]))
    late = sum(1 for a, b in pairs if b.get("applied_round") == a["step"])
    first = syncs[0].get("applied_round") if syncs else None
    return verdict("CO2's anchor lags one round: each sync applies the mean issued at the sync before",
                   bool(pairs) and first is None and late == len(pairs),
                   f"{late} of {len(pairs)} syncs after the first applied the round before"
                   + ("" if first is None else f"; the first applied round {first}"),
                   why_not="the sync records are not CO2's one-round-late schedule")


def lower_loss(a: Run, b: Run, names: tuple[str, str]) -> Verdict:
    """The paper's claim on this run: `a` ends with the lower validation loss in the same seconds."""
    return smaller(f"this run: {names[0]} ends below {names[1]} at equal time", final(a), final(b), names=names,
                   unit="", digits=3, timing=True, why_not=f"{SEED}; and the seconds decide the steps")


def local_beats_sync(runs: dict[str, Run]) -> list[Verdict]:
    """Under random pauses sync pays for every pause of any replica, a local method for what does not cancel
    within a round: each local method's share of the bound is above sync's."""
    if "sync" not in runs:
        return []
    share = {n: tokens_per_s(r) / bound(r) for n, r in runs.items()}
    return [larger(f"under random pauses {n} reaches a larger share of the bound than sync", share[n], share["sync"],
                   names=(n, "sync"), unit="", digits=3, timing=True, why_not=timing_reason(runs[n]))
            for n in runs if n != "sync"]


# ------------------------------------------------------------------------------------ the benchmark's numbers
def benchmark(name: str, method: str, key: str = "val", mesh: str = "2x2", straggler: str = "consistent",
              root: Path = RESULTS) -> dict[int, float]:
    """seed -> `key` of `method`'s runs in benchmarks/results/`name` (empty without the file)."""
    path = Path(root) / name
    rows = json.loads(path.read_text())["runs"] if path.is_file() else []
    return {r["seed"]: r[key] for r in rows
            if r["mesh"] == mesh and r["straggler"] == straggler and r["method"] == method}


def seed_differences(a: dict[int, float], b: dict[int, float]) -> list[float]:
    """b − a for every seed both have (seed -> loss), in a's order: positive where a ended lower. The seed moves
    every method's loss together, by more than the methods differ, so losses are compared seed by seed."""
    return [b[s] - a[s] for s in a if s in b]


def paired(a: dict[int, float], b: dict[int, float]) -> str:
    """How far a's loss is below b's, seed by seed: the mean difference and in how many seeds a was lower."""
    d = seed_differences(a, b)
    if not d:
        return "not in this checkout"
    m = statistics.mean(d)
    lower = sum(x > 0 for x in d)
    return f"{abs(m):.3f} nats {'lower' if m > 0 else 'higher'} on average (lower in {lower} of {len(d)} seeds)"


def paper_box(here: dict[str, Run], budget_s: float, mesh: str, root: Path = RESULTS) -> pd.DataFrame:
    """The paper's claim, this run's numbers and the benchmark's side by side, each row labelled with whose
    numbers they are: A-EDiT's final loss against EDiT's and sync's at equal time."""
    def this(other: str) -> str:
        if "aedit" not in here or other not in here:
            return "not run"
        a, b = final(here["aedit"]), final(here[other])
        return f"{abs(a - b):.3f} nats {'lower' if a < b else 'higher'} ({a:.3f} against {b:.3f})"

    def bench(name: str, method: str) -> dict[int, float]:
        return benchmark(name, method, root=root)

    # the lab's defaults as they are now, and an earlier measurement with the paper's weights (it ran with the
    # old straggler model, which also stretched the layer-wise sync: docs/benchmarks.md, "A-EDiT at equal wall-clock time")
    lab, raw = "aedit_loss.json", "aedit_loss_raw_weights.json"
    rows = [("the paper's (Cheng et al., ICLR 2025)", "lower loss in the same wall-clock time", "—"),
            (f"this run's ({mesh}, {budget_s:g} s, one seed)", this("edit"), this("sync")),
            ("the benchmark's, lab defaults (2×2 on 2 cores, 20 s, 3 seeds)",
             paired(bench(lab, "aedit"), bench(lab, "edit")), paired(bench(lab, "aedit"), bench(lab, "sync"))),
            ("the benchmark's, the paper's weights (raw softmax, no step weighting; an earlier measurement)",
             paired(bench(raw, "aedit"), bench(raw, "edit")), paired(bench(raw, "aedit"), bench(raw, "sync")))]
    return pd.DataFrame(rows, columns=["whose numbers", "A-EDiT against EDiT", "A-EDiT against sync"]).set_index(
        "whose numbers")


# ------------------------------------------------------------------------------------ the cluster preview (07)
def _share(table: pd.DataFrame, setting: str, link: float, method: str) -> float:
    t = table[(table["setting"] == setting) & (table["link GB/s"] == link) & (table["method"] == method)]
    return float(t["share of capacity"].iloc[0])


def cluster_verdicts(table: pd.DataFrame, alike: str, straggling: str,
                     local: Sequence[str] = ("diloco", "edit", "aedit"), close: float = 0.95) -> list[Verdict]:
    """What notebook 07 reads off its simulated cluster (`table`: setting, link GB/s, method, share of
    capacity): on the fastest link with nodes alike every local method is close to the capacity; sync
    loses the most as the link slows; on the slowest link EDiT hides part of each transfer that DiLoCo
    waits for, and A-EDiT, whose period includes the sync, falls below EDiT; with a straggling node A-EDiT
    is above EDiT wherever the link is not the bottleneck. Simulated, so no timing."""
    links = sorted(table["link GB/s"].unique())
    slow, fast = links[0], links[-1]

    def s(setting: str, link: float, method: str) -> float:
        return _share(table, setting, link, method)

    shares = {m: s(alike, fast, m) for m in local}
    loss = {m: s(alike, fast, m) - s(alike, slow, m) for m in ("sync", *local)}
    out = [verdict(f"nodes alike, {fast:g} GB/s: every Local-SGD method is close to the capacity",
                   min(shares.values()) >= close, ", ".join(f"{m} {v:.3f}" for m, v in shares.items()),
                   why_not="the sync every τ steps takes more than a few percent of a round"),
           verdict(f"nodes alike: sync loses the most of its share from {fast:g} to {slow:g} GB/s",
                   max(loss, key=loss.get) == "sync", ", ".join(f"{m} −{v:.3f}" for m, v in loss.items()),
                   why_not="a local method's sync grew longer than sync's per-step all-reduces"),
           larger(f"nodes alike, {slow:g} GB/s: EDiT hides part of each transfer DiLoCo waits for",
                  s(alike, slow, "edit"), s(alike, slow, "diloco"), names=("EDiT", "DiLoCo"), unit="", digits=3),
           smaller(f"nodes alike, {slow:g} GB/s: A-EDiT, whose period includes the sync, falls below EDiT",
                   s(alike, slow, "aedit"), s(alike, slow, "edit"), names=("A-EDiT", "EDiT"), unit="", digits=3)]
    for link in links[1:]:
        out.append(larger(f"one node slower and pauses, {link:g} GB/s: A-EDiT's clock keeps the other nodes training",
                          s(straggling, link, "aedit"), s(straggling, link, "edit"), names=("A-EDiT", "EDiT"), unit="",
                          digits=3))
    return out


# ------------------------------------------------------------------------------------ the capstone (08)
def straggler_witness(run: Run, replica: int) -> Verdict:
    """A straggler is the replica whose steps were stretched and the one that waits least: its peers wait
    for it (`replica_table`'s straggle_s and blocked_s after warm-up)."""
    t = replica_table(run, from_step=run.config.schedule.warmup_steps).set_index("replica")
    others = t.drop(replica)
    ok = (t.loc[replica, "straggle_s"] > others["straggle_s"].max()
          and t.loc[replica, "blocked_s"] < others["blocked_s"].min())
    return verdict(f"replica {replica} was stretched most and waited least: its peers waited for it", bool(ok),
                   f"straggle {t.loc[replica, 'straggle_s']:.2f} s against at most {others['straggle_s'].max():.2f} s; "
                   f"blocked {t.loc[replica, 'blocked_s']:.2f} s against at least {others['blocked_s'].min():.2f} s",
                   why_not="random pauses of the others as long as its stretch")


def slow_link_witness(runs: dict[str, Run], letter: str) -> Verdict:
    """A slow link holds up every replica alike: each replica of that run stood blocked longer than any
    replica of the other runs."""
    blocked = {n: replica_table(r, from_step=r.config.schedule.warmup_steps)["blocked_s"] for n, r in runs.items()}
    mine = float(blocked[letter].min())
    rest = max(float(b.max()) for n, b in blocked.items() if n != letter)
    return larger(f"run {letter}'s slow link held up every replica: each waited longer than any replica of the "
                  f"other runs", mine, rest, names=(f"run {letter}'s least", "the others' most"), unit="s", digits=2,
                  why_not="the link was fast enough to wait less than a straggler's peers")


# ------------------------------------------------------------------------------------ the virtual clock (06)
# On the virtual clock (edit_lab/clock/virtual.py) time is a cost model's: no rank shares a core, no step varies, so
# nothing here is a timing of this machine. The same config and seed give the same numbers on any machine.
def seeds_of(runs: Sequence[Run]) -> list[int]:
    return [int(r.config.seed) for r in runs]


def seed_table(runs: dict[str, Sequence[Run]]) -> pd.DataFrame:
    """Per method, over its seeds (one run each, all for the same time budget): the validation loss of the agreed
    model at the budget and the tokens/s (mean and spread = max − min), then the first seed's steps per replica,
    capacity bound and share of it (on the virtual clock the same in every seed: `same_steps_every_seed`)."""
    rows = []
    for name, rs in runs.items():
        vals = [final(r) for r in rs]
        tps = [float(r.summary["tokens_per_s"]) for r in rs]
        total, cap, _ = share_of_bound(rs[0])
        rows.append({"method": name, "seeds": len(rs), "val loss mean": statistics.mean(vals),
                     "val loss spread": max(vals) - min(vals), "tokens/s mean": statistics.mean(tps),
                     "tokens/s spread": max(tps) - min(tps), "steps per replica": steps_of(rs[0]),
                     "capacity bound tokens/s": cap, "share of the bound after warm-up": total / cap if cap > 0 else float("nan")})
    return pd.DataFrame(rows).set_index("method")


def share_of_bound(run: Run) -> tuple[float, float, float]:
    """(Σ replicas' tokens/s, the capacity bound, the slow replica's own pace) after warm-up, one table read."""
    rt = replica_table(run, from_step=run.config.schedule.warmup_steps)
    return float(rt["tokens_per_s"].sum()), float(rt["own_tokens_per_s"].sum()), float(rt["own_tokens_per_s"].iloc[-1])


def more_tokens_every_seed(aedit: Sequence[Run], edit: Sequence[Run]) -> Verdict:
    """In the same virtual seconds A-EDiT trains more tokens than EDiT, seed by seed: its fast replicas' waits
    became steps. On the virtual clock no rank lends a core to another, so this is the schedule's doing alone."""
    pairs = [(int(a.summary["tokens"]), int(e.summary["tokens"])) for a, e in zip(aedit, edit)]
    shown = "; ".join(f"seed {s}: {a:,} against {e:,}" for s, (a, e) in zip(seeds_of(aedit), pairs))
    return verdict("A-EDiT trains more tokens than EDiT at equal virtual time in every seed",
                   len(pairs) > 0 and all(a > e for a, e in pairs), f"tokens trained, A-EDiT against EDiT, {shown}",
                   why_not=SHORT)


def backup_outpaces_sync(backup: Sequence[Run], sync: Sequence[Run]) -> Verdict:
    """Backup workers (each step the first m of R replicas' gradients, the straggler's step abandoned) train more
    tokens per virtual second than `sync`, seed by seed: a step no longer waits for the slow replica. Tokens are
    the runs' own: a dropped step of the late replica counts none."""
    pairs = [(int(b.summary["tokens"]), int(s.summary["tokens"])) for b, s in zip(backup, sync)]
    dropped = sum(1 for m in backup[0].metrics if m.get("dropped")) if backup else 0
    shown = "; ".join(f"seed {s}: {b:,} against {y:,}" for s, (b, y) in zip(seeds_of(backup), pairs))
    return verdict("backup workers train more tokens than sync at equal virtual time in every seed",
                   len(pairs) > 0 and all(b > y for b, y in pairs),
                   f"tokens trained, backup against sync, {shown} (seed 0: {dropped} replica-steps dropped)",
                   why_not=SHORT)


def same_steps_every_seed(runs: dict[str, Sequence[Run]]) -> Verdict:
    """On the virtual clock a step costs what the cost model says whatever the data: every seed of a method
    trains the same steps on every replica, and only the loss moves with the seed."""
    differ = [name for name, rs in runs.items() if any(steps_of(r) != steps_of(rs[0]) for r in rs)]
    return verdict("on the virtual clock every seed of a method trains the same steps per replica", not differ,
                   "; ".join(f"{n} {steps_text(steps_of(rs[0]))}" for n, rs in runs.items()) + (
                       f" (differ: {', '.join(differ)})" if differ else ""),
                   why_not="a step whose cost depends on the data (random pauses are seeded per seed)")


def slow_pace_stays(edit: Run, aedit: Run, tolerance: float = 0.05) -> Verdict:
    """On the virtual clock a replica's pace is the cost model's, not a share of cores: the slow replica keeps its
    own pace under A-EDiT (within `tolerance` of EDiT's), where on 2 × 2 on two cores it computes slower because
    nobody waits and so nobody lends it a core (`bound_moves`). The capacity bound, the sum of the own paces, is
    shown beside it."""
    _, b0, slow0 = share_of_bound(edit)
    _, b1, slow1 = share_of_bound(aedit)
    return verdict("on the virtual clock the slow replica keeps its own pace under A-EDiT (no core to lend or borrow)",
                   abs(slow1 / slow0 - 1) <= tolerance,
                   f"its own pace under EDiT {slow0:,.0f}, under A-EDiT {slow1:,.0f} tokens/s "
                   f"({slow1 / slow0 - 1:+.0%}); "
                   f"the capacity bound {b0:,.0f} and {b1:,.0f} tokens/s ({b1 / b0 - 1:+.0%})", timing=on_this_machine(aedit),
                   why_not="a cost the virtual clock charges by schedule (a sync's own compute) counted in its pace"
                   + (f"; {timing_reason(aedit)}" if costs_measured_here(aedit) else ""))
