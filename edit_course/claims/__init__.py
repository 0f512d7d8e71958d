"""The claims the lessons make about their own runs, computed from those runs (issue 23).

A notebook says what to look for; the cell below decides whether *this* run shows it and prints a
verdict (`edit_course.verdict`): ✓ with the numbers, or ✗ with the numbers and the likely reason. The
claims several lessons share live here, each a function of one or two `Run`s (or of numbers a lesson
measured) that prints and returns its `Verdict`, so a claim is computed one way everywhere and is unit
tested (tests/course/unit/test_claims.py) on hand-built and shipped runs.

Two kinds of claim, kept apart because the tests treat them differently:

- what a run computed (losses, bytes, the schedule, which round landed when): the same on every machine
  for the same seed; a ✗ is a wrong lesson or a bug, and the tests fail on it;
- what a run's clock measured (waits, hidden time, wall clock): `timing=True`, since four ranks on two
  busy cores wait for a core as often as for each other; a ✗ says so and does not fail a test.
"""

from __future__ import annotations

import math
import statistics
from collections.abc import Sequence
from pathlib import Path

from edit_course import BENCHMARKS_PAGE
from edit_course.verdict import Verdict, verdict
from edit_lab.config import cores
from edit_lab.records.analysis import comm_split, events_table, replica_table
from edit_lab.records.examples import HERE as EXAMPLES_HERE
from edit_lab.records.run import Run

#: The page whose benchmark tables the paper boxes quote (`benchmark_rows`).
BENCHMARKS = BENCHMARKS_PAGE

#: The likely reasons a claim does not hold, as a verdict prints them. A timing's reason is computed from
#: its run instead (`timing_reason`): cores per rank, how much the run's own steps varied, the difference at stake.
SHORT = "a short run: few steps, so few syncs and evaluations to decide on"
SEED = "the seed: one run per setting, and another seed can change the order of numbers this close"


# ------------------------------------------------------------------------------------ why a timing moved
def ranks_and_cores(run: Run, n_cores: int | None = None) -> tuple[int, int]:
    """(ranks of the run, the cores they shared): `n_cores`, else the cores this process may use, since a
    lesson's runs are launched from its kernel (a run recorded elsewhere needs its own count passed in).
    A virtual run's ranks share none (the cost model times them)."""
    return run.config.world_size, n_cores if n_cores is not None else cores()


def step_times_ms(run: Run, from_step: int | None = None, replica: int | None = None) -> list[float]:
    """The run's training step times (ms) from `from_step` on (default: the end of warm-up), of one replica or
    of every replica (`replica=None`): what `step_noise_ms` and `median_step_ms` summarise."""
    start = run.config.schedule.warmup_steps if from_step is None else from_step
    return [1e3 * m["dt"] for m in run.metrics
            if m.get("kind") == "train" and m.get("step", -1) >= start and m.get("dt") is not None
            and (replica is None or m.get("replica") == replica)]


def step_noise_ms(run: Run, replica: int = 0) -> float:
    """How much one of the run's steps varies (ms): the interquartile range of `replica`'s step times after
    warm-up. Steps of the same kind on a quiet machine differ by little; a rank that waits for a core, or
    other work on the machine, spreads them. NaN without steps after warm-up."""
    dt = step_times_ms(run, replica=replica)
    if len(dt) < 4:
        return float("nan")
    q = statistics.quantiles(dt, n=4)
    return q[2] - q[0]


def costs_measured_here(run: Run) -> bool:
    """A virtual run whose costs were calibrated from a run directory of this machine (not a shipped example, not
    a costs file): its numbers carry that run's timings, so a claim on them is a timing claim too."""
    src = run.config.clock.costs
    if run.config.clock.kind != "virtual" or not src or not Path(src).is_dir():
        return False
    return EXAMPLES_HERE.resolve() not in Path(src).resolve().parents


def on_this_machine(run: Run) -> bool:
    """Whether `run`'s timings depend on this machine: a wall-clock run, or a virtual one calibrated here."""
    return run.config.clock.kind != "virtual" or costs_measured_here(run)


def timing_reason(run: Run, gap: float | None = None, unit: str = "ms", n_cores: int | None = None) -> str:
    """The likely reason a timing claim on `run` did not hold, computed from the run rather than guessed:

    - on the virtual clock, none of the machine's: the cost model decided (no core is shared, no step varies);
    - otherwise its ranks per core (with fewer cores than ranks a rank that waits for a core hides nothing and
      waits longer; with a core each, only other work on the machine moves the numbers), and how much the
      run's own steps varied (`step_noise_ms`), beside `gap`, the difference the claim turned on, when given.
    """
    if costs_measured_here(run):
        return (f"the cost model's numbers, calibrated from {Path(run.config.clock.costs).name}, a run of this "
                "machine: its measured steps and syncs decided")
    if run.config.clock.kind == "virtual":
        return "the cost model's own numbers (virtual clock: no core shared, no step varies): the schedule decided"
    ranks, n = ranks_and_cores(run, n_cores)
    per = n / ranks
    text = f"{ranks} ranks on {n} core{'s' if n != 1 else ''} ({per:.2g} per rank)"
    text += (": a rank that waits for a core hides nothing and waits longer" if per < 1 else
             ": every rank had a core, so what moved it is other work on this machine")
    noise = step_noise_ms(run)
    if math.isfinite(noise):
        text += f"; a step of this run varied by {noise:.1f} ms (interquartile range)"
    if gap is not None:
        text += f", the claim turned on {abs(gap):,.1f} {unit}"
    return text


def _compare(claim: str, x: float, y: float, holds: bool, names: tuple[str, str], unit: str, digits: int,
             timing: bool, why_not: str) -> Verdict:
    sep = " " if unit else ""
    numbers = f"{names[0]} {x:,.{digits}f}{sep}{unit} against {names[1]} {y:,.{digits}f}{sep}{unit}"
    if math.isfinite(x) and math.isfinite(y) and y > 0 and x / y < 10:  # a share; beyond 10× it says nothing more
        numbers += f" ({x / y:.0%})"
    return verdict(claim, holds, numbers, why_not=why_not, timing=timing)


def smaller(claim: str, x: float, y: float, *, names: tuple[str, str], unit: str = "ms", digits: int = 1,
            timing: bool = False, why_not: str = "") -> Verdict:
    """The claim "x < y", printed with both numbers named (`names` = x's, y's) and x as a share of y."""
    return _compare(claim, x, y, x < y, names, unit, digits, timing, why_not)


def larger(claim: str, x: float, y: float, *, names: tuple[str, str], unit: str = "ms", digits: int = 1,
           timing: bool = False, why_not: str = "") -> Verdict:
    """The claim "x > y", printed as `smaller` prints it."""
    return _compare(claim, x, y, x > y, names, unit, digits, timing, why_not)


def close(claim: str, x: float, y: float, *, names: tuple[str, str], rel_tol: float, unit: str = "",
          digits: int = 0, timing: bool = False, why_not: str = "") -> Verdict:
    """The claim "x is about y": within `rel_tol` of y, printed as `smaller` prints it."""
    return _compare(claim, x, y, abs(x - y) <= rel_tol * abs(y), names, unit, digits, timing, why_not)


def falls(claim: str, values: Sequence[float], names: Sequence[str], unit: str = "", digits: int = 3,
          timing: bool = False, why_not: str = "") -> Verdict:
    """A quantity falls at every step of a sequence (τ grows, a round lands, …): strictly, each below the last."""
    ok = len(values) >= 2 and all(a > b for a, b in zip(values, values[1:]))
    numbers = ", ".join(f"{n}: {v:,.{digits}f}{unit}" for n, v in zip(names, values))
    return verdict(claim, ok, numbers, why_not=why_not, timing=timing)


def smaller_at_each(claim: str, pairs: dict[str, tuple[float, float]], *, unit: str = "ms", digits: int = 1,
                    timing: bool = False, why_not: str = "") -> Verdict:
    """The claim "x < y" at each of several settings (`pairs`: setting -> (x, y)), one verdict for all."""
    sep = " " if unit else ""
    numbers = "; ".join(f"{k}: {x:,.{digits}f} against {y:,.{digits}f}{sep}{unit}" + (f" ({x / y:.0%})" if y > 0 and x / y < 10 else "")
                        for k, (x, y) in pairs.items())
    return verdict(claim, len(pairs) > 0 and all(x < y for x, y in pairs.values()), numbers, why_not=why_not,
                   timing=timing)


def benchmark_rows(heading: str, readme: Path = BENCHMARKS) -> list[dict[str, str]]:
    """The first table under the heading of docs/benchmarks.md that starts with `heading`, one dict per row
    (bold marks dropped): the benchmark's numbers a "paper says / lab measures" box sets beside the run's.
    Empty when this checkout has no such page or no such table."""
    if not readme.exists():
        return []
    lines = readme.read_text(encoding="utf-8").splitlines()
    start = next((i for i, line in enumerate(lines) if line.lstrip("#").strip().startswith(heading)
                  and line.startswith("#")), None)
    if start is None:
        return []
    table = []
    for line in lines[start + 1:]:
        if line.startswith("#"):
            break
        if line.startswith("|"):
            table.append([cell.strip().replace("**", "") for cell in line.strip().strip("|").split("|")])
        elif table:
            break
    if len(table) < 3:
        return []
    header, rows = table[0], table[2:]  # table[1] is the |---| line
    return [dict(zip(header, row)) for row in rows]


# ------------------------------------------------------------------------------------ what a run computed
def same_losses(run: Run, other: Run, what: str) -> Verdict:
    """Two runs that differ only in *when* things happen (a straggler, a slower link, prefetch) train on
    the same floats: every training loss equal, bit for bit. `what` names the difference."""
    a, b = run.train_losses(), other.train_losses()
    equal = sum(1 for x, y in zip(a, b) if x == y)
    return verdict(f"{what} changes when things happen, never what is computed: the same training loss at every "
                   f"step", a == b and len(a) > 0, f"{equal} of {max(len(a), len(b))} steps bit-for-bit equal",
                   why_not="the two runs differ in more than timing (a seed, the data, a knob that changes the "
                           "arithmetic)")


def loss_fell(run: Run, vocab: int = 256) -> Verdict:
    """The model learnt something: the last training loss is below the first, which starts near ln(vocab)
    (an untrained model guesses every byte alike)."""
    losses = run.train_losses()
    first, last = losses[0][1], losses[-1][1]
    near = abs(first - math.log(vocab)) <= 0.1 * math.log(vocab)
    return verdict(f"the model learnt: its training loss fell from about ln {vocab}", near and last < first,
                   f"step {losses[0][0]}: {first:.3f} (ln {vocab} = {math.log(vocab):.3f}), step {losses[-1][0]}: "
                   f"{last:.3f}", why_not="very few steps, or a learning rate too high for this model")


def never_hidden(run: Run, kind: str, steps: int | tuple[int, int] | None = None, rank: int = 0,
                 unit: int | None = None) -> Verdict:
    """A collective the rank issues when nothing is left to compute and waits for before computing again
    (DiLoCo's whole-model sync, the root unit's forward all-gather at the start of a step: `unit`=0; sync's
    gradient all-reduce was one until it started each unit's during the backward, `partly_hidden`) is never
    hidden: 0 ms of it under compute."""
    by = ("kind",) if unit is None else ("kind", "unit")
    t = comm_split(run, by=by, steps=steps, ranks=[rank]).set_index(list(by))
    key = kind if unit is None else (kind, unit)
    found = key in t.index
    hidden = 1e3 * float(t.loc[key, "hidden_s"]) if found else 0.0
    total = 1e3 * float(t.loc[key, "total_s"]) if found else 0.0
    what = kind if unit is None else f"unit {unit}'s {kind}"
    return verdict(f"nothing computes while {what} travels: none of it is hidden", found and hidden == 0.0,
                   f"rank {rank}{'' if steps is None else f', steps {steps}'}: {hidden:.2f} ms hidden of "
                   f"{total:.1f} ms",
                   why_not="a compute span overlapped it: the method's schedule is not what the lesson says")


def partly_hidden(run: Run, kind: str, steps: int | tuple[int, int] | None = None, rank: int = 0) -> Verdict:
    """A collective issued while the rank still has compute ahead (sync's gradient all-reduce of unit l, started
    when unit l's backward ends, as DDP's buckets are: edit-method.md §5) travels partly under that compute:
    more than 0 ms of it hidden (`comm_split`'s one definition)."""
    t = comm_split(run, by=("kind",), steps=steps, ranks=[rank]).set_index("kind")
    found = kind in t.index
    hidden = 1e3 * float(t.loc[kind, "hidden_s"]) if found else 0.0
    total = 1e3 * float(t.loc[kind, "total_s"]) if found else 0.0
    return verdict(f"part of {kind} travels under the backward still to compute", found and hidden > 0.0,
                   f"rank {rank}{'' if steps is None else f', steps {steps}'}: {hidden:.2f} ms hidden of "
                   f"{total:.1f} ms",
                   why_not="no compute span overlapped it: the all-reduces were issued after the backward")


def sync_group_bytes_per_step(run: Run, rank: int = 0) -> tuple[float, float]:
    """Sync-group bytes the rank's collectives carried per step: (warm-up, after warm-up, final sync included)."""
    c = run.config
    ev = events_table(run, ranks=[rank])
    ev = ev[(ev["group"] == "sync") & ev["comm"]]  # collectives only: a `wait` is the rank blocked on one
    warm = float(ev[ev["step"] < c.schedule.warmup_steps]["bytes"].sum())
    local = float(ev[ev["step"] >= c.schedule.warmup_steps]["bytes"].sum())
    return warm / max(c.schedule.warmup_steps, 1), local / max(c.steps - c.schedule.warmup_steps, 1)


def n_syncs(run: Run) -> int:
    """The syncs a run recorded (syncs.jsonl's `sync` rows: the anchor creation and CO2's landings are not)."""
    return sum(1 for s in run.syncs if s.get("kind") == "sync")


def bytes_ratio(sync_run: Run, local_run: Run) -> Verdict:
    """After warm-up `sync` all-reduces one gradient shard every step, a Local-SGD method one parameter shard
    (the same bytes) per sync: sync sends (steps − W) / syncs times the bytes per step, about τ."""
    c = local_run.config
    ratio = sync_group_bytes_per_step(sync_run)[1] / sync_group_bytes_per_step(local_run)[1]
    want = (c.steps - c.schedule.warmup_steps) / n_syncs(local_run)
    return verdict(f"after warm-up sync sends about τ = {c.schedule.sync_interval} times {c.method}'s sync-group bytes per step",
                   math.isclose(ratio, want, rel_tol=1e-9),
                   f"{ratio:.3f}× = {c.steps - c.schedule.warmup_steps} local steps / {n_syncs(local_run)} syncs (the "
                   f"final one included)", why_not="a sync sent other bytes than one parameter shard")


def bytes_fall_with_tau(runs_by_tau: dict[int, Run]) -> Verdict:
    """Bytes per step after warm-up fall like 1/τ: one parameter shard per sync, ⌈(steps − W)/τ⌉ syncs."""
    per = {tau: sync_group_bytes_per_step(r)[1] for tau, r in sorted(runs_by_tau.items())}
    shard = {tau: per[tau] * (r.config.steps - r.config.schedule.warmup_steps) / n_syncs(r) for tau, r in runs_by_tau.items()}
    falls = all(a > b for a, b in zip(per.values(), list(per.values())[1:]))
    one_shard = max(shard.values()) - min(shard.values()) <= 1e-9 * max(shard.values())
    return verdict("bytes per step after warm-up fall as τ grows: one parameter shard per sync", falls and one_shard,
                   ", ".join(f"τ {tau}: {b:,.0f} B" for tau, b in per.items()),
                   why_not="two τ values give the same number of syncs in this short a run")


def moves_less(what: str, values: Sequence[float], than: str, others: Sequence[float]) -> Verdict:
    """One quantity spreads less than another over the same runs: max/min − 1 of each."""
    spread = max(values) / min(values) - 1
    other = max(others) / min(others) - 1
    return verdict(f"{what} moves much less than {than}", spread < other,
                   f"{what} spans {spread:.1%} (max/min − 1), {than} {other:.0%}", why_not=SEED)


# ------------------------------------------------------------------------------------ CO2, one round late
def first_landing(run: Run) -> int | None:
    """The boundary at which CO2's first round mean landed (syncs.jsonl's `applied_round` not None)."""
    return next((int(s["step"]) for s in run.syncs if s.get("kind") == "sync" and s.get("applied_round") is not None),
                None)


def co2_waits_a_round(run: Run) -> Verdict:
    """CO2 applies each round's mean one boundary late: nothing lands at the first boundary (W + τ), the first
    mean lands at the second (W + 2τ), and until then the anchor is the warm-up model, so every validation
    from W until then scores the same model. (A validation at step s runs after training step s − 1, and a
    boundary's mean lands at the end of that step: the validation at the landing step already scores it.)"""
    c = run.config
    landing, want = first_landing(run), c.schedule.warmup_steps + 2 * c.schedule.sync_interval
    before = [(s, v) for s, v in run.val_losses() if c.schedule.warmup_steps <= s < (landing or c.steps + 1)]
    same = len({v for _, v in before}) <= 1
    shown = ", ".join(f"step {s}: {v:.4f}" for s, v in before) or "no validation before it"
    return verdict(f"CO2's first mean lands at the second boundary (step {want}); until then it validates the "
                   f"warm-up model", landing == want and same,
                   f"first landing at step {landing}; validations before it {shown}",
                   why_not="the run ends before its second boundary" if landing is None else "")


def loss_falls_after(run: Run, step: int | None) -> Verdict | None:
    """Every validation from `step` on (the first one already scores what landed at `step`) is below the one
    before it. None, after a plain note, when the run has no validation on one side of `step`."""
    vals = run.val_losses()
    if step is None or not any(s >= step for s, _ in vals) or not any(s < step for s, _ in vals):
        print(f"(too few validations around step {step} to tell whether the loss falls after it: {vals})")
        return None
    after = [(s, v) for s, v in vals if s >= step]
    last_before = [(s, v) for s, v in vals if s < step][-1]
    seq = [last_before, *after]
    return falls(f"from the landing at step {step} on, the validation loss falls", [v for _, v in seq],
                 [f"step {s}" for s, _ in seq], why_not=SEED)


def co2_counts_its_syncs(co2: Run, diloco: Run) -> Verdict:
    """CO2 syncs at the same boundaries as DiLoCo; a run ending on a boundary records the landing of its last
    round as `co2_landing`, not as one more sync."""
    landings = [int(s["step"]) for s in co2.syncs if s.get("kind") == "co2_landing"]
    ends_on_boundary = (co2.config.steps - co2.config.schedule.warmup_steps) % co2.config.schedule.sync_interval == 0
    ok = n_syncs(co2) == n_syncs(diloco) and (landings == [co2.config.steps] if ends_on_boundary else not landings)
    return verdict("CO2 counts as many syncs as DiLoCo; its last landing is no extra sync", ok,
                   f"CO2 {n_syncs(co2)} syncs, DiLoCo {n_syncs(diloco)}; co2_landing at steps {landings}",
                   why_not="a landing was recorded as a sync")


# ------------------------------------------------------------------------------------ what a run's clock measured
def median_step_ms(run: Run, from_step: int | None = None) -> float:
    """The median time of one training step (ms) over every replica's steps from `from_step` on (default: the end
    of warm-up): what a run's compute costs on this machine, sync waits included in the steps that sync."""
    dt = step_times_ms(run, from_step)
    return statistics.median(dt) if dt else float("nan")


def wall_against_blocked(a: Run, b: Run, names: tuple[str, str]) -> str:
    """One line that sets two runs' wall time against what their sync group blocked them after warm-up (the most
    blocked replica of each: the run ends when it does), and puts the
    rest where it belongs: a run can be blocked less and still take longer, when its steps computed slower on this
    machine (the median step time of each says by how much). Numbers only, no verdict: the machine decides it."""
    wa, wb = float(a.summary["wall_s"]), float(b.summary["wall_s"])
    ba = float(replica_table(a, from_step=a.config.schedule.warmup_steps)["blocked_s"].max())
    bb = float(replica_table(b, from_step=b.config.schedule.warmup_steps)["blocked_s"].max())
    sa, sb = median_step_ms(a), median_step_ms(b)
    rest = (wa - wb) - (ba - bb)
    return (f"{names[0]} took {wa:.2f} s against {names[1]}'s {wb:.2f} s ({wa - wb:+.2f} s), its most blocked replica "
            f"stood blocked on the sync group after warm-up {ba:.2f} s against {bb:.2f} s ({ba - bb:+.2f} s): the other "
            f"{rest:+.2f} s is compute, "
            f"a median step of {sa:.1f} against {sb:.1f} ms on this machine")


def blocked_ms_per_step(run: Run, from_step: int = 0) -> dict[int, float]:
    """{replica: ms it stood blocked on the sync group per training step} (`replica_table`)."""
    t = replica_table(run, from_step=from_step)
    return {int(r.replica): 1e3 * r.blocked_s / max(r.steps, 1) for r in t.itertuples()}


def fast_replica_waits(run: Run, fast: int = 0, slow: int = 1) -> Verdict:
    """With a consistent straggler the fast replica is the one that stands blocked in every meeting."""
    b = blocked_ms_per_step(run)
    return smaller(f"the fast replica {fast} is the one that waits", b[slow], b[fast],
                   names=(f"replica {slow} blocked", f"replica {fast}"), unit="ms per step", timing=True,
                   why_not=timing_reason(run, b[fast] - b[slow], "ms per step"))


def straggler_pauses_s(run: Run, slow: int = 1) -> float:
    """Seconds the slow replica paused (mean over its ranks) before its last step: each of those pauses is
    waited out by the others at the next meeting. (The last step's pause comes after the last meeting, so
    nobody waits it out: it is left out.)"""
    cfg = run.config
    return sum(e["t1"] - e["t0"] for e in run.events
               if e["kind"] == "straggle" and e["replica"] == slow and e["step"] < cfg.steps - 1) / cfg.shards


def blocked_about_pause(run: Run, fast: int = 0, slow: int = 1, rel_tol: float = 0.35, base: Run | None = None) -> Verdict:
    """The fast replica's blocked time is about the straggler's pauses: each step it waits out the pause the
    slow replica took after the step before. With `base` (the same run without the straggler) the claim is
    what the straggler *added*: the blocked time beyond the baseline's (the all-reduce itself, which the
    fast replica waits for anyway). It holds where every rank has a core of its own; with fewer cores the
    fast replica computes while the straggler spins, and the straggler then computes alone, faster, so the
    wait is shorter than the pause. On the virtual clock (no core is shared) it is no timing, unless its costs were
    measured on this machine (`on_this_machine`)."""
    def blocked_s(r: Run) -> float:
        return float(replica_table(r).set_index("replica").loc[fast, "blocked_s"])

    blocked = blocked_s(run) - (blocked_s(base) if base is not None else 0.0)
    pause = straggler_pauses_s(run, slow)
    what = "blocked time" if base is None else "blocked time beyond the baseline's"
    virtual = run.config.clock.kind == "virtual"
    return verdict(f"replica {fast}'s {what} is about replica {slow}'s pauses",
                   pause > 0 and abs(blocked - pause) <= rel_tol * pause,
                   f"{blocked:.3f} s against {pause:.3f} s of pauses before its last step ({blocked / pause:.0%})"
                   if pause else "no pause recorded",
                   why_not=("the cost model's steps differ between the runs"
                            + (f"; {timing_reason(run)}" if costs_measured_here(run) else "")) if virtual else
                   timing_reason(run, blocked - pause, "s"), timing=on_this_machine(run))


def capacity_share(run: Run) -> float:
    """Achieved tokens/s over the capacity bound (the sum of the replicas' own paces, `replica_table`)."""
    t = replica_table(run)
    return float(t["tokens_per_s"].sum() / t["own_tokens_per_s"].sum())


def slowdown_ratio(slow: Run, base: Run, factor: float) -> Verdict:
    """A k× straggler stretches only compute, so tokens/s falls to between 1/k and 1 of the baseline's."""
    ratio = slow.summary["tokens_per_s"] / base.summary["tokens_per_s"]
    return verdict(f"tokens/s with the straggler stays above 1/{factor:g} of the baseline's (collectives are not "
                   f"stretched)", 1 / factor < ratio < 1, f"{ratio:.2f} against 1/{factor:g} = {1 / factor:.2f}",
                   why_not=timing_reason(slow), timing=True)
