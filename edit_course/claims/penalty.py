"""The penalty's claims about a run (notebooks 05, 07, 08), computed from the decisions it recorded.

Every sentence a lesson says about what the penalty did (who was flagged, in which units, whether a
bad replica stayed out, what the closing sync let in, what the penalty did to the final loss) is one
of these functions of the run's `penalty.jsonl` and losses, so the text stays true whatever the anomaly
rule decides: the rule changes the numbers, the functions report them. The claims print a verdict
(`edit_course.verdict`); the descriptions that are no claim (the weights at the closing sync, the flags a
capstone run recorded) return a sentence. Why a verdict went the way it did is the replay of the run's own norms
through the rule (`decisions`: the peer ratio q, the detector's z, the replica's own memory under D15, and the
reason, entering, staying, whole replica, memory, κ_e), so a ✗ names what the run measured.

None of this is a timing: the decisions of a run depend on its seed and settings only.
"""

from __future__ import annotations

import json
import math
from collections.abc import Iterable
from pathlib import Path

import pandas as pd

from edit_course.claims import SEED, SHORT, smaller
from edit_course.verdict import Verdict, verdict
from edit_lab.records.analysis import metrics_table, penalty_table
from edit_lab.records.run import Run

#: judged syncs after a corruption starts before "is it caught?" is asked: a bad replica's norm drifts
#: up over a few rounds, it does not jump (notebook 05, part 4)
MIN_JUDGED_SYNCS = 4


def judged(run: Run) -> pd.DataFrame:
    """The penalty rows whose norm was judged (a threshold recorded): the closing sync of `finalize` and a
    replica that trained no step in the round are recorded with none."""
    pt = penalty_table(run)
    return pt[pt["threshold"].notna()]


def flags(run: Run, replica: int, after: int = -1) -> pd.DataFrame:
    """Rows of `replica` at judged syncs after step `after`, one per sync and unit."""
    pt = judged(run)
    return pt[(pt["replica"] == replica) & (pt["step"] > after)]


def healthy_never_flagged(run: Run, healthy: Iterable[int]) -> Verdict:
    """A replica nothing was done to is never flagged: every (sync, unit) record of it is admitted."""
    healthy = sorted(healthy)
    pt = penalty_table(run)
    mine = pt[pt["replica"].isin(healthy)]
    n = int(mine["outlier"].sum())
    at = sorted(set(mine.loc[mine["outlier"], "step"]))
    who = ", ".join(map(str, healthy))
    many = len(healthy) > 1
    first = int(mine.loc[mine["outlier"], "replica"].iloc[0]) if n else None
    return verdict(f"the healthy replica{'s' if many else ''} {who} {'were' if many else 'was'} never flagged", n == 0,
                   f"{n} of {len(mine)} (sync, unit) records flagged" + (f", at steps {at}" if at else ""),
                   why_not=_computed(run, lambda: f"replica {first}: " + why_flagged(run, first)) if n else "")


def spike_caught(run: Run, replica: int, spike_step: int) -> Verdict:
    """A spike multiplies every parameter at once, so at the first judged sync after it every unit's norm is
    far above its history: the replica is flagged in every unit there."""
    rows = flags(run, replica, after=spike_step)
    if rows.empty:
        return verdict(f"replica {replica} is flagged in every unit at the first sync after the spike", False,
                       "no judged sync after the spike", why_not=SHORT)
    first = int(rows["step"].min())
    at = rows[rows["step"] == first]
    return verdict(f"replica {replica} is flagged in every unit at the first sync after the spike",
                   bool(at["outlier"].all()), f"step {first}: {int(at['outlier'].sum())} of {len(at)} units, "
                   f"G {at['G'].min():.3g}–{at['G'].max():.3g}",
                   why_not="the detector was not armed yet at that sync")


def max_val_after(run: Run, step: int) -> float:
    """The highest validation loss after `step` (NaN without one): how far a spike's damage went."""
    return max((v for s, v in run.val_losses() if s > step), default=math.nan)


def bounds_spike(run: Run, off: Run, spike_step: int, name: str = "the penalty") -> Verdict:
    """A defence that works keeps the validation loss after the spike below the run with no defence."""
    return smaller(f"with {name}, the highest validation loss after the spike stays below the run without any defence",
                   max_val_after(run, spike_step), max_val_after(off, spike_step), names=(name, "no defence"),
                   unit="", digits=3,
                   why_not="no validation after the spike, or the spike did no damage in this short a run")


def weight_at(run: Run, replica: int, step: int) -> pd.Series:
    """`replica`'s weight per unit at the sync of `step`."""
    pt = penalty_table(run)
    return pt[(pt["replica"] == replica) & (pt["step"] == step)].set_index("unit")["weight"]


def softmax_silences_spike(run: Run, replica: int, spike_step: int, at_most: float = 1e-6) -> Verdict:
    """Weighting alone: softmax(−G/T) of a norm a hundred times its peer's is about e^−(G₁−G₀)/T, nothing.
    (With the anomaly filter off no norm is judged: the first sync after the spike is any recorded one.)"""
    pt = penalty_table(run)
    later = pt.loc[pt["step"] > spike_step, "step"]
    first = int(later.min()) if len(later) else -1
    w = weight_at(run, replica, first)
    return verdict(f"the softmax alone gives the spiked replica {replica} a weight of about nothing",
                   not w.empty and float(w.max()) <= at_most,
                   f"at most {float(w.max()):.1e} over the units at step {first}" if not w.empty else
                   "no sync after it",
                   why_not=SHORT)


def clip_bounds_spike(run: Run, spike_step: int) -> Verdict:
    """Clipping alone applies the spiked mean, shrunk to norm φ: a clip factor below 1 in every unit."""
    pt = penalty_table(run)
    later = pt[pt["step"] > spike_step]
    first = int(later["step"].min()) if not later.empty else -1
    clip = later[later["step"] == first].groupby("unit")["clip"].first()
    return verdict("clipping alone shrinks the spiked mean to norm φ in every unit",
                   not clip.empty and bool((clip < 1).all()),
                   f"clip factors {clip.min():.2g}–{clip.max():.2g} at step {first}" if not clip.empty else
                   "no sync after it",
                   why_not="the aggregate's norm stayed below φ")


def alone_against_all(all_three: Run, alone: dict[str, Run], spike_step: int, replica: int = 1) -> pd.DataFrame:
    """Part 3's table and verdicts: what each defence alone does differently from all three on the same spike.

    One row per run (all three first): the spiked `replica`'s largest weight at the first sync after the spike,
    the healthy replicas' weights at every other sync (lowest–highest), the (sync, unit) records whose clip factor
    is below 1, the largest |G − all three's G| over the records (0: the same trajectory, bit for bit) and the final
    validation loss. Verdicts, each from those numbers: weighting alone ends exactly where all three do when its
    softmax weight on the spike is below float rounding and the rest is the same (no other flag, no clip); anomaly
    alone gives the spike 0 as all three do but averages the others with 1/k, so where those weights differ from the
    softmax's it trains another trajectory."""
    base = penalty_table(all_three)
    after = base.loc[base["step"] > spike_step, "step"]
    first = int(after.min()) if len(after) else -1
    rows = []
    for name, run in {"all three": all_three, **{f"only {k}": r for k, r in alone.items()}}.items():
        pt = penalty_table(run)
        spiked = pt[(pt["step"] == first) & (pt["replica"] == replica)]["weight"]
        others = pt[(pt["step"] != first) & (pt["replica"] != replica) & ~pt["closing"].astype(bool)]["weight"]
        same = len(pt) == len(base) and bool((pt[["step", "unit", "replica"]].values
                                               == base[["step", "unit", "replica"]].values).all())
        dg = float((pt["G"].values - base["G"].values).__abs__().max()) if same else math.nan
        rows.append({"run": name, "spiked replica's weight at the spike": float(spiked.max()) if len(spiked) else
                     math.nan, "healthy weights elsewhere (min)": float(others.min()) if len(others) else math.nan,
                     "healthy weights elsewhere (max)": float(others.max()) if len(others) else math.nan,
                     "records clipped": int((pt["clip"] < 1).sum()), "largest |G − all three's|": dg,
                     "final val loss": float(run.summary.get("final_val_loss", math.nan))})
    table = pd.DataFrame(rows).set_index("run")
    SPIKE, DG = "spiked replica's weight at the spike", "largest |G − all three's|"
    ref = table.loc["all three"]
    if "only weighting" in table.index:
        w = table.loc["only weighting"]
        identical = w[DG] == 0 and w["final val loss"] == ref["final val loss"]
        verdict("only weighting ends exactly where all three do: its softmax weight on the spike is zero to float "
                "rounding, and at every other sync it applies the same weights", bool(identical),
                f"spike weight {w[SPIKE]:.1e}; final val loss "
                f"{w['final val loss']:.4f} against {ref['final val loss']:.4f}; largest |ΔG| "
                f"{w[DG]:.1e}; records clipped {int(w['records clipped'])} and "
                f"{int(ref['records clipped'])}",
                why_not="the anomaly filter or the clip acted somewhere else in one of the two runs (records clipped "
                        "above), so their weights or updates differ" if not identical else "")
    if "only anomaly" in table.index:
        a = table.loc["only anomaly"]
        zero = a[SPIKE] == 0 and ref[SPIKE] == 0
        plain = (a["healthy weights elsewhere (min)"], a["healthy weights elsewhere (max)"])
        soft = (ref["healthy weights elsewhere (min)"], ref["healthy weights elsewhere (max)"])
        differ = plain != soft
        verdict("only anomaly gives the spike weight 0 as all three do, but averages the other syncs with a plain "
                "1/2 where all three take the softmax's weights: another mean, so another trajectory",
                bool(zero and differ),
                f"spike weight {a[SPIKE]:g} and "
                f"{ref[SPIKE]:g}; the healthy replica's weights elsewhere "
                f"{plain[0]:.3f}–{plain[1]:.3f} against {soft[0]:.3f}–{soft[1]:.3f}; largest |ΔG| "
                f"{a[DG]:.3g}; final val loss {a['final val loss']:.4f} against "
                f"{ref['final val loss']:.4f}",
                why_not=("the spiked replica kept a weight in one of the runs (not flagged)" if not zero else
                         "the softmax's weights were the plain 1/2 too (every norm equal), so nothing tells them apart"))
    return table


def per_unit_leaves_in(run: Run, replica: int, from_step: int, min_judged: int = MIN_JUDGED_SYNCS) -> Verdict | None:
    """The paper's detector judges every unit alone: a replica fed bad data is left out only of the units whose own
    norm stood out, and its Δ enters the others with its ordinary weight. The claim: after `from_step`, at some
    judged sync `replica` was flagged in at least one unit and admitted (weight > 0) in another. None (after a plain
    note) when fewer than `min_judged` syncs were judged after `from_step` and it was never flagged."""
    rows = flags(run, replica, after=from_step)
    n = judged_syncs_after(run, from_step)
    claim = (f"the paper's detector, unit by unit, leaves replica {replica}'s Δ in the units where its own norm did "
             f"not stand out")
    out = rows[rows["outlier"]]
    if out.empty and n < min_judged:
        print(f"(replica {replica} not flagged in the {n} judged sync(s) after step {from_step}: too few to tell; the "
              f"notebook's defaults give more)")
        return None
    partial = [s for s, at in rows.groupby("step") if at["outlier"].any() and not at["outlier"].all()]
    units_out = sorted(int(u) for u in out["unit"].unique())
    inside = rows[rows["step"].isin(partial) & ~rows["outlier"]]
    units_in = sorted(int(u) for u in inside["unit"].unique())
    if partial:
        numbers = (f"flagged in unit(s) {', '.join(map(str, units_out))} at {len(partial)} of {n} judged syncs after "
                   f"step {from_step}; at those syncs unit(s) {', '.join(map(str, units_in))} let its Δ in with weight "
                   f"{inside['weight'].min():.2f}–{inside['weight'].max():.2f}")
    else:
        numbers = (f"flagged in every unit at each of {out['step'].nunique()} flagged syncs" if not out.empty else
                   f"never flagged over {n} judged syncs (z at most {rows['z'].max():.2f})")
    why = ("" if partial else "its norm stood above its own history in every unit at once whenever it stood out "
           "anywhere" if not out.empty else "its G stayed under μ + δ·f·σ of its own history in every unit: the "
           "slow average (α 0.02) learnt the bad data's drift")
    return verdict(claim, bool(partial), numbers, why_not=why)


def judged_syncs_after(run: Run, step: int) -> int:
    """How many syncs after `step` judged a norm."""
    pt = judged(run)
    return int(pt.loc[pt["step"] > step, "step"].nunique())


def caught(run: Run, replica: int, from_step: int, min_judged: int = MIN_JUDGED_SYNCS) -> Verdict | None:
    """A replica fed bad data from `from_step` on is caught: flagged in at least one unit at some judged sync.
    Not caught after fewer than `min_judged` judged syncs is no verdict yet (its norm drifts, it does not jump):
    None, after a plain note."""
    n = judged_syncs_after(run, from_step)
    rows = flags(run, replica, after=from_step)
    units = sorted(rows.loc[rows["outlier"], "unit"].unique())
    if not units and n < min_judged:
        print(f"(replica {replica} not flagged in the {n} judged sync(s) after the corruption at step {from_step}: too "
              f"few to tell whether the detector catches it; the notebook's defaults give more)")
        return None
    all_units = rows["unit"].nunique()
    first = int(rows.loc[rows["outlier"], "step"].min()) if units else None
    numbers = (f"flagged in {len(units)} of {all_units} units (units {', '.join(map(str, units))}), first at step "
               f"{first}" if units else f"flagged in none of {all_units} units over {n} judged syncs")
    return verdict(f"the detector catches replica {replica}", bool(units), numbers,
                   why_not="" if units else _computed(run, lambda: why_not_caught(run, replica, from_step)))


def stays_out(run: Run, replica: int, from_step: int) -> Verdict | None:
    """Once caught in a unit, the bad replica is still flagged there at the last judged sync (it does not
    drift back under the threshold, nor is it re-admitted). None when it was never caught."""
    rows = flags(run, replica, after=from_step)
    caught_units = sorted(rows.loc[rows["outlier"], "unit"].unique())
    if not caught_units:
        return None
    last = int(rows["step"].max())
    at_last = rows[(rows["step"] == last) & rows["unit"].isin(caught_units)].set_index("unit")["outlier"]
    released = [int(u) for u, out in at_last.items() if not out]
    readmitted = sorted(rows.loc[rows["readmitted"], "unit"].unique())
    numbers = (f"at the last judged sync (step {last}) still flagged in {len(caught_units) - len(released)} of the "
               f"{len(caught_units)} units where it was caught"
               + (f"; let back in units {released}" if released else "")
               + (f" (re-admitted in units {readmitted})" if readmitted else ""))
    return verdict(f"once caught, replica {replica} stays flagged until the last judged sync", not released, numbers,
                   why_not=_computed(run, lambda: why_released(run, replica, from_step)) if released else "")


def closing_sync(run: Run, replica: int) -> str:
    """What the run's closing sync did with `replica`: judged or not, and its weights per unit there (the
    last round enters the final model with these)."""
    pt = penalty_table(run)
    if pt.empty:
        return "the run recorded no penalty decisions"
    last = int(pt["step"].max())
    rows = pt[pt["step"] == last]
    mine = rows[rows["replica"] == replica]["weight"]
    was_judged = bool(rows["threshold"].notna().any())
    entered = (f"kept replica {replica}'s last round out of the final model (weight 0 in every unit)"
               if float(mine.max()) == 0 else
               f"let replica {replica}'s last round into the final model with weight {mine.min():.2f}–{mine.max():.2f}"
               f" over the units")
    return f"the closing sync (step {last}) {'judged the norms' if was_judged else 'judged no norm'} and {entered}"


def mean_weight_unflagged(run: Run, replica: int, after: int) -> float:
    """`replica`'s mean weight over the judged (sync, unit) pairs after `after` where it was not flagged."""
    rows = flags(run, replica, after=after)
    kept = rows[~rows["outlier"]]["weight"]
    return float(kept.mean()) if len(kept) else math.nan


def smaller_than_spike(bad_on: Run, bad_off: Run, spike_on: Run, spike_off: Run) -> Verdict:
    """Against bad data in a short run the penalty moves the final loss little (either way), against a spike
    by orders of magnitude: compare |with − without| of the two."""
    b_on, b_off = bad_on.summary["final_val_loss"], bad_off.summary["final_val_loss"]
    s_on, s_off = spike_on.summary["final_val_loss"], spike_off.summary["final_val_loss"]
    return verdict("against bad data the penalty moves the final validation loss far less than against the spike",
                   abs(b_on - b_off) < abs(s_on - s_off),
                   f"bad data {b_on:.3f} with against {b_off:.3f} without ({b_on - b_off:+.3f}); spike {s_on:.3f} "
                   f"against {s_off:.3f} ({s_on - s_off:+.3f})", why_not=SEED)


def bad_flagged(run: Run, replica: int, after: int) -> tuple[int, int]:
    """(flagged, judged) (sync, unit) records of `replica` after step `after`."""
    rows = flags(run, replica, after=after)
    return int(rows["outlier"].sum()), len(rows)


# ------------------------------------------------------------------------------------ benchmarks and shipped runs
def _verify_rows(path: Path, config: str) -> list[dict]:
    """benchmarks/penalty_defaults.py's verification rows of one notebook configuration (none without the file)."""
    rows = json.loads(Path(path).read_text()).get("verify", []) if Path(path).is_file() else []
    return [v for v in rows if v["config"] == config]


def paper_box(spike_on: Run, spike_off: Run, bad_on: Run, bad_off: Run, spike_step: int, corrupt_from: int,
              path: Path) -> pd.DataFrame:
    """Notebook 05's box: the paper's claim, this notebook's runs and the benchmark's verification of the
    notebook's own configurations (`path`: penalty_defaults.json) side by side, each row labelled with whose
    numbers it holds. "With" is the lab's rules (`spike_on`, `bad_on`): the notebook also runs the paper's own
    detector, whose numbers differ, so the row says which."""
    spike_units = flags(spike_on, 1, after=spike_step)
    first = spike_units[spike_units["step"] == spike_units["step"].min()] if not spike_units.empty else spike_units
    bf, bn = bad_flagged(bad_on, 1, corrupt_from)
    healthy = sum(int(penalty_table(r).query("replica == 0")["outlier"].sum()) for r in (spike_on, bad_on))
    this = (f"highest val loss after it {max_val_after(spike_on, spike_step):.3f} with, "
            f"{max_val_after(spike_off, spike_step):.3f} without; flagged in {int(first['outlier'].sum())} of "
            f"{len(first)} units at once",
            f"flagged in {bf} of {bn} judged (sync, unit) records; final val loss "
            f"{bad_on.summary['final_val_loss']:.3f} with, {bad_off.summary['final_val_loss']:.3f} without",
            f"flagged {healthy} times")
    spike, corrupt = _verify_rows(path, "nb05-spike"), _verify_rows(path, "nb05-corrupt")
    bench = (f"flagged in every unit at once in {sum(v['bad_flagged'] == v['bad_records'] for v in spike)} of "
             f"{len(spike)} seeds",
             f"flagged in {sum(v['bad_flagged'] for v in corrupt)} of {sum(v['bad_records'] for v in corrupt)} "
             f"records over {len(corrupt)} seeds; final val loss with the penalty "
             + ", ".join(f"{v['final_val_loss']:.3f}" for v in corrupt),
             f"flagged in {sum(v['healthy_flagged'] for v in spike + corrupt)} of "
             f"{sum(v['healthy_records'] for v in spike + corrupt)} records") if spike and corrupt else \
        ("not in this checkout",) * 3
    rows = [("the paper's (Cheng et al., ICLR 2025)", "loss spikes suppressed", "low-quality data suppressed", "—"),
            ("this notebook's runs (one seed; with: the lab's rules)", *this),
            (f"the benchmark's ({Path(path).name}: this notebook's settings, the detector of its commit)", *bench)]
    return pd.DataFrame(rows, columns=["whose numbers", "a spike", "bad data", "the healthy replica"]).set_index(
        "whose numbers")


def benchmark_healthy_flags(path: Path) -> Verdict | None:
    """The claim of benchmarks/penalty_defaults.py's verification: no healthy record flagged, and the spike
    caught in every unit (recorded with the detector of that benchmark's commit). None without the file."""
    if not Path(path).is_file():
        print(f"({Path(path).name} is not in this checkout)")
        return None
    rows = json.loads(Path(path).read_text()).get("verify", [])
    healthy = sum(v["healthy_flagged"] for v in rows), sum(v["healthy_records"] for v in rows)
    spike = [v for v in rows if v["config"] == "nb05-spike"]
    caught_all = sum(v["bad_flagged"] == v["bad_records"] for v in spike)
    return verdict("the benchmark's verification flags no healthy replica and the spike in every unit",
                   healthy[0] == 0 and caught_all == len(spike),
                   f"healthy records flagged {healthy[0]} of {healthy[1]}; spike caught in every unit in {caught_all} "
                   f"of {len(spike)} seeds ({Path(path).name}, its own detector settings)",
                   why_not="the benchmark was recorded with other detector settings")


def flag_counts(runs: dict[str, Run], bad: dict[str, int | None]) -> tuple[int, int, int, int]:
    """(healthy flagged, healthy records, bad flagged, bad records) over the judged records of `runs`, where
    `bad[name]` is the run's replica fed bad data (None: every replica healthy)."""
    hf = hn = bf = bn = 0
    for name, run in runs.items():
        pt = judged(run)
        is_bad = pt["replica"] == bad.get(name)  # all False when the run has no bad replica (None)
        hf, hn = hf + int(pt.loc[~is_bad, "outlier"].sum()), hn + int((~is_bad).sum())
        bf, bn = bf + int(pt.loc[is_bad, "outlier"].sum()), bn + int(is_bad.sum())
    return hf, hn, bf, bn


def shipped_flags(runs: dict[str, Run], bad: dict[str, int | None]) -> str:
    """The flags the shipped runs recorded, as a sentence: healthy and bad replicas apart (no claim: a
    description of recorded runs, re-recorded whenever the detector changes)."""
    hf, hn, bf, bn = flag_counts(runs, bad)
    return (f"the shipped runs ({', '.join(runs)}) as recorded: healthy replicas flagged in {hf} of {hn} judged "
            f"records, the replica fed bad data in {bf} of {bn}")


def shipped_runs_flags() -> str | None:
    """`shipped_flags` over every shipped run with penalty decisions: the examples (no replica fed bad data)
    and the capstone's mysteries (the bad-data replica found through the salted answer, never printed)."""
    from edit_course.lessons.capstone import REPLICAS, is_right, mysteries
    from edit_lab.records.examples import example_runs

    runs: dict[str, Run] = {r.path.name: r for r in example_runs() if r.penalty}
    bad: dict[str, int | None] = {name: None for name in runs}
    for letter, run in mysteries().items():
        runs[f"mystery {letter}"] = run
        bad[f"mystery {letter}"] = next((r for r in range(REPLICAS) if is_right(letter, "bad_data", replica=r)), None)
    return shipped_flags(runs, bad) if runs else None


def bad_data_witnesses(run: Run, replica: int, last: int = 8) -> tuple[Verdict, str]:
    """What names a replica fed random bytes: its own training loss (it cannot beat ln 256 ≈ 5.5 on noise)
    stands out of its run; and, as a sentence, whether the detector's flags pointed at it too."""
    m = metrics_table(run)
    late = m[m["step"] >= m["step"].max() - last + 1].groupby("replica")["loss"].mean()
    others = late.drop(replica)
    v = verdict(f"replica {replica}'s own late training loss names it", float(late[replica]) > float(others.max()),
                f"{late[replica]:.2f} against at most {others.max():.2f} for the others (ln 256 = {math.log(256):.2f})",
                why_not="the corruption started too late to show in the last steps")
    f = judged(run).groupby("replica")["outlier"].sum()
    mine, top = int(f.get(replica, 0)), int(f.drop(replica, errors="ignore").max()) if len(f) > 1 else 0
    named = mine > top
    return v, (f"the flags table: replica {replica} flagged {mine} times, the others at most {top}: the flags "
               f"{'named it too' if named else 'would not have named it'}")


# ------------------------------------------------------------------------------------ why each verdict (D15, D16)
#: The short reasons of `decisions`, one per (sync, unit, replica) record. A flagged replica is out of every unit
#: (whole replica); the reason says which test put it there, or that another unit did. With a majority of peers
#: q > κ_m puts it there too (D16, `MAJORITY_RULE`); when every replica that trained is flagged, each is let back
#: into the units it does not stand out on, and the least into a unit where all do (`RELEASED`, D16).
ENTERS, STAYS, WHOLE, NONFINITE = "enters", "stays", "whole replica", "non-finite norm"
MAJORITY_RULE, RELEASED = "q > κ_m (a majority)", "released (every replica flagged)"
IN_LINE, BELOW_ENTRY, MEMORY, BACK, UNARMED = "z ≤ δ·f", "q ≤ κ_e", "memory", "back", "not armed"


def decisions(run: Run) -> pd.DataFrame:
    """Every recorded penalty decision with the reason for it, from the replay of the run's own norms.

    The run's recorded G and local steps go through `penalty.judge_replicas` sync by sync with fresh detectors, as
    `EDiTMethod.start_sync` takes them (the replay is the engine's decisions: tests/distributed); before each sync
    the replay reads what the record does not hold: whether each detector was armed, and under D15 where fewer
    than 3 peers are judged on the unit at that sync (`penalty.needs_memory`) how many σ each replica's own G/k
    stood above its memory (`own_z`, `EDiTMethod.memory`). One row per (step, unit, replica): G, `q` (G/k over the median of the peers' G/k),
    the detector's z and threshold δ·f, own_z (NaN where the memory is not asked), `outlier` as recorded,
    `replayed` (the replay's verdict agrees), the weight, and `reason`:

    - flagged: `enters` (z > δ·f and q > κ_e, and with < 3 peers own z > δ_m: a new flag), `q > κ_m (a
      majority)` (with 3 peers or more, armed or not: D16), `stays` (flagged at its last judged sync and q > κ_s,
      with < 3 peers own z > δ_m), `whole replica` (out because another unit of it entered or stayed),
      `non-finite norm`;
    - `released (every replica flagged)`: admitted on this unit though its replica was flagged, because every
      replica that trained was (D16);
    - admitted: `back` (flagged at its last judged sync, no unit stays), `memory` (z > δ·f and q > κ_e, but its
      own G/k within δ_m σ of its memory: not the one that moved), `q ≤ κ_e` (its detector flags, its peers do
      not make it stand out), `z ≤ δ·f`, `not armed`;
    - the rest, said as it is: the closing sync not judged, a replica that trained no step, the anomaly filter
      off, the per-unit rule (peers off or one replica: `z > δ·f` or `re-admitted`).
    """
    from edit_lab.core.penalty import MAJORITY, PenaltyConfig, judge_replicas, needs_memory

    pt = penalty_table(run)
    cols = ["step", "unit", "replica", "G", "q", "z", "threshold", "own_z", "outlier", "replayed", "weight", "reason"]
    if pt.empty:
        return pd.DataFrame(columns=cols)
    cfg = run.config.penalty
    R, U = int(pt["replica"].max()) + 1, int(pt["unit"].max()) + 1
    dets = [[cfg.new_detector() for _ in range(U)] for _ in range(R)]
    memory = [[cfg.new_detector() for _ in range(U)] for _ in range(R)]
    peers = cfg.anomaly and cfg.peers and R > 1
    rows = []
    for step, at in pt.groupby("step", sort=True):
        rec = {(int(p.unit), int(p.replica)): p for p in at.itertuples()}
        norms = [[float(rec[(u, r)].G) for u in range(U)] for r in range(R)]
        k = [int(rec[(0, r)].steps) if rec[(0, r)].steps == rec[(0, r)].steps else run.config.schedule.sync_interval
             for r in range(R)]
        closing = bool(at["closing"].any())
        x = [[cfg.judged_norm(norms[r][u], k[r]) for u in range(U)] for r in range(R)]
        judged_here = [sum(1 for r in range(R) if x[r][u] is not None and math.isfinite(x[r][u])) for u in range(U)]
        ask = [needs_memory(cfg, n) for n in judged_here]
        majority = [n - 1 >= MAJORITY for n in judged_here]
        own = [[memory[r][u].z(x[r][u]) if ask[u] and memory[r][u].armed and x[r][u] is not None
                and math.isfinite(x[r][u]) else math.nan for u in range(U)] for r in range(R)]
        armed = [[dets[r][u].armed for u in range(U)] for r in range(R)]
        was = [any(d.streak > 0 for d in dets[r]) for r in range(R)]
        got = judge_replicas(cfg, dets, norms, k, judge=not closing, memory=memory)
        for r in range(R):
            units = []  # per unit: (enters, stays, non-finite, detector flags, q > κ_e, moved, q > κ_m)
            for u in range(U):
                j = got[r][u]
                bad = x[r][u] is not None and not math.isfinite(x[r][u])
                hit = (math.isfinite(j.z) and j.z > j.threshold) or (j.peer == math.inf and armed[r][u])
                above = cfg.enter_ratio == 0.0 or j.peer > cfg.enter_ratio
                moved = not ask[u] or own[r][u] > cfg.memory_threshold
                most = majority[u] and cfg.majority_ratio > 0 and math.isfinite(j.peer) and j.peer > cfg.majority_ratio
                units.append((bad or (hit and above and moved) or most,
                              was[r] and cfg.stay_ratio > 0 and j.peer > cfg.stay_ratio and moved, bad, hit, above,
                              moved, most))
            why_out = [u for u, c in enumerate(units) if c[0] or c[1]]
            for u in range(U):
                j, p = got[r][u], rec[(u, r)]
                enters, stays, bad, hit, above, moved, most = units[u]
                if closing:
                    reason = "closing sync, not judged"
                elif x[r][u] is None:
                    reason = "trained no step"
                elif not cfg.anomaly:
                    reason = "anomaly filter off"
                elif not peers:
                    reason = "re-admitted" if j.readmitted else "z > δ·f" if j.outlier else UNARMED if not \
                        dets[r][u].armed else IN_LINE
                elif j.readmitted:
                    reason = RELEASED
                elif j.outlier:
                    reason = (NONFINITE if bad else STAYS if was[r] and stays else MAJORITY_RULE if most and not (
                              hit and above and moved) else ENTERS if enters else
                              f"{WHOLE} (unit{'s' if len(why_out) > 1 else ''} {', '.join(map(str, why_out))})")
                elif was[r]:
                    reason = BACK
                elif j.threshold == math.inf and not math.isfinite(j.z if j.z == j.z else 0.0):
                    reason = UNARMED
                elif hit and above and not moved:
                    reason = MEMORY
                elif hit:
                    reason = BELOW_ENTRY
                elif j.threshold == math.inf:
                    reason = UNARMED
                else:
                    reason = IN_LINE
                rows.append({"step": int(step), "unit": u, "replica": r, "G": norms[r][u], "q": j.peer, "z": j.z,
                             "threshold": j.threshold, "own_z": own[r][u], "outlier": bool(p.outlier),
                             "replayed": bool(j.outlier) == bool(p.outlier), "weight": float(p.weight),
                             "reason": reason})
    return pd.DataFrame(rows, columns=cols)


def replica_reasons(run: Run, replica: int, after: int = -1) -> pd.DataFrame:
    """One row per sync after `after` for `replica`: q over its units (lowest–highest), its largest own z (the
    memory, where asked), flagged or not, and the verdict's reason in words (`decisions`), which a student reads
    against the rule: which unit entered or stayed, or what kept it in."""
    d = decisions(run)
    d = d[(d["replica"] == replica) & (d["step"] > after)]
    cfg = run.config
    kappa_e, kappa_s, delta_m = cfg.penalty.enter_ratio, cfg.penalty.stay_ratio, cfg.penalty.memory_threshold
    out = []
    for step, at in d.groupby("step", sort=True):
        reasons = list(at["reason"])
        units = lambda name: ", ".join(str(u) for u, why in zip(at["unit"], reasons) if why == name)  # noqa: E731
        mem = " and own G/k > δ_m σ above its memory" if at["own_z"].notna().any() else ""
        if at["outlier"].any():
            if units(ENTERS):
                why = f"enters on unit(s) {units(ENTERS)}: z > δ·f, q > κ_e {kappa_e:g}{mem}; out of every unit"
            elif units(MAJORITY_RULE):
                why = (f"enters on unit(s) {units(MAJORITY_RULE)}: q > κ_m {cfg.penalty.majority_ratio:g} times the "
                       f"median of a majority of peers, its detector armed or not; out of every unit")
            elif units(STAYS):
                why = f"stays: q > κ_s {kappa_s:g} on unit(s) {units(STAYS)}{mem}; out of every unit"
            else:
                why = reasons[0]
        elif RELEASED in reasons:
            why = (f"released on unit(s) {units(RELEASED)}: every replica that trained was flagged, so each is out "
                   f"only of the units it stands out on (D16)")
        elif BACK in reasons:
            why = f"back: no unit stays (q ≤ κ_s {kappa_s:g}{' or own z ≤ δ_m' if mem else ''})"
        elif units(MEMORY):
            why = (f"in: unit(s) {units(MEMORY)} stand above κ_e, but its own G/k is within δ_m {delta_m:g} σ of its "
                   f"memory (not the one that moved)")
        elif units(BELOW_ENTRY):
            why = f"in: its detector flags unit(s) {units(BELOW_ENTRY)}, but q ≤ κ_e {kappa_e:g} (in line with its peers)"
        else:
            why = f"in: {max(set(reasons), key=reasons.count)}"
        q = at["q"]
        lo, hi = f"{q.min():.3g}", f"{q.max():.3g}"
        out.append({"step": int(step), "q": ("–" if not q.notna().any() else lo if lo == hi else f"{lo}–{hi}"),
                    "own z (max)": round(float(at["own_z"].max()), 2) if at["own_z"].notna().any() else math.nan,
                    "flagged": bool(at["outlier"].any()), "reason": why})
    return pd.DataFrame(out, columns=["step", "q", "own z (max)", "flagged", "reason"])


def why_flagged(run: Run, replica: int, after: int = -1) -> str:
    """The reason `replica` was first flagged after step `after`, in words (no flag: says so)."""
    r = replica_reasons(run, replica, after)
    hit = r[r["flagged"]]
    return (f"at step {int(hit['step'].iloc[0])} (q {hit['q'].iloc[0]}) it {hit['reason'].iloc[0]}" if not hit.empty
            else f"replica {replica} was never flagged")


def why_released(run: Run, replica: int, after: int) -> str:
    """Why a flagged `replica` was let back in after `after`: the reason at the first sync it was admitted after a
    flag (`replica_reasons`)."""
    r = replica_reasons(run, replica, after)
    flagged = list(r["flagged"])
    for i in range(1, len(flagged)):
        if flagged[i - 1] and not flagged[i]:
            return f"at step {int(r['step'].iloc[i])} (q {r['q'].iloc[i]}) {r['reason'].iloc[i]}"
    return "it was let back in on some unit only (the per-unit rule)"


def _computed(run: Run, reason) -> str:
    """A verdict's reason from the replay of the run's norms (`decisions`), or, where the run's records are not
    what the replay decides (recorded under another rule), that."""
    d = decisions(run)
    if not d.empty and not d["replayed"].all():
        return ("the recorded flags are not what the replay of the run's norms decides (recorded under another "
                "rule, or records edited)")
    return reason()


def why_not_caught(run: Run, replica: int, after: int) -> str:
    """Why `replica` was never flagged after `after`, from the reasons of its records: the memory (with fewer than 3
    peers), its q under κ_e, or its detector's z under δ·f."""
    d = decisions(run)
    d = d[(d["replica"] == replica) & (d["step"] > after)]
    if d.empty:
        return SHORT
    cfg = run.config
    if (d["reason"] == MEMORY).any():
        return (f"its q rose above κ_e {cfg.penalty.enter_ratio:g} (up to {d['q'].max():.2f}) and its detector's z "
                f"above δ·f, but its own G/k never stood δ_m {cfg.penalty.memory_threshold:g} σ above its memory (own "
                f"z at most {d['own_z'].max():.2f}): with two or three replicas D15 blames no replica whose own norm "
                f"did not rise")
    if (d["reason"] == BELOW_ENTRY).any():
        return f"its q stayed at most {d['q'].max():.2f}, not above κ_e {cfg.penalty.enter_ratio:g}"
    return (f"its detector's z stayed under δ·f (q at most {d['q'].max():.2f}): the detector learnt the slow "
            f"drift of its q")


def two_replicas(run: Run, bad: int, after: int) -> tuple[Verdict | None, str]:
    """With two replicas the median of the peers is the other replica: q₀ = x₀/x₁ = 1/q₁ at every sync, so the peer
    ratios cannot say which replica moved; the memory can (D15). The verdict checks q₀·q₁ = 1 on every judged
    (sync, unit); the sentence says what each replica's own memory said after `after` (largest own z against δ_m).
    (None, a sentence) with more than two replicas: there the peers' median is a majority's."""
    d = decisions(run)
    R = int(d["replica"].max()) + 1 if not d.empty else 0
    if R != 2:
        return None, (f"with {R} replicas the median of a replica's peers is the median of {R - 1} others: one bad "
                      f"replica does not move it" if R > 3 else f"{R} replica(s): no pair to compare")
    d = d[d["q"].notna() & (d["q"] > 0) & d["q"].apply(math.isfinite)]
    both = d.pivot_table(index=["step", "unit"], columns="replica", values="q").dropna()
    dev = float((both[0] * both[1] - 1.0).abs().max()) if not both.empty else math.nan
    v = verdict("with two replicas the peer ratios are reciprocal, q₀·q₁ = 1: they cannot say which replica moved",
                dev < 1e-9, f"largest |q₀·q₁ − 1| {dev:.1e} over {len(both)} (sync, unit) pairs",
                why_not="a replica trained no step in some round, or its norm was not finite")
    late = decisions(run)
    late = late[late["step"] > after]
    healthy = 1 - bad
    own = late.groupby("replica")["own_z"].max()
    qmax = late.groupby("replica")["q"].max()
    delta_m = run.config.penalty.memory_threshold
    if own.isna().all():
        return v, "the memory was not asked (δ_m = 0, or the anomaly filter off)"
    named = own.get(bad, math.nan) > delta_m
    return v, (f"after step {after}: replica {bad}'s q up to {qmax.get(bad, math.nan):.2f}, replica {healthy}'s up to "
               f"{qmax.get(healthy, math.nan):.2f}; replica {bad}'s own G/k stood up to {own.get(bad, math.nan):.2f} σ "
               f"above its memory, replica {healthy}'s up to {own.get(healthy, math.nan):.2f} σ (δ_m = {delta_m:g}): "
               + (f"the memory names replica {bad}" if named else
                  f"the memory names neither, so neither is flagged"))
