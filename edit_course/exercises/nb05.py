"""Checks for notebook 05 (the pseudo-gradient penalty): the reader's softmax weights, when the detector is armed, clipping.

The reference values are computed with the library's own pure functions (edit_lab.core.penalty), the same
ones every rank calls during a sync, and match docs/edit-method.md §8.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence
from typing import Any

from edit_course.exercises import (
    CheckResult,
    correct,
    judge_number,
    not_a_function,
    not_answered,
    not_yet,
    read_numbers,
    say,
    run_a_rule,
    short_error,
    show,
)


def first_armed_step(warmup: int, interval: int, arming: int) -> int:
    """The step whose sync is the first where the detector may call an outlier.

    Syncs at W+τ, W+2τ, … (W only creates the anchors); each one updates the detector once, and
    it is armed once it holds E values, i.e. at the (E+1)-th sync: W + (E+1)·τ.
    """
    return warmup + (arming + 1) * interval


def check_softmax_function(fn: Callable[[Sequence[float], float, Sequence[bool]], Sequence[float] | None]
                           ) -> CheckResult:
    """Test the reader's `fn(norms, temperature, anomalous)` against the library's `penalty.softmax_weights`.

    Cases: two healthy replicas, a spike (0.3 against 80), an outlier among three, every replica an
    outlier, and norms of 1000 and 1001, where exp(−G/T) underflows to 0 unless the smallest norm is
    subtracted first (as the library does). A wrong weight prints "Not yet" naming the case; never raises.
    """
    from edit_lab.core.penalty import softmax_weights

    if (refused := not_a_function(fn, "fn(norms, temperature, anomalous) -> one weight per replica")) is not None:
        return refused
    cases = [("two healthy replicas", [1.0, 2.0], 1.0, [False, False]),
             ("a temperature of 0.5", [1.0, 2.0], 0.5, [False, False]),
             ("a spiked replica", [0.3, 80.0], 1.0, [False, False]),
             ("replica 1 flagged as an outlier", [0.3, 80.0, 0.35], 1.0, [False, True, False]),
             ("every replica flagged", [1.0, 2.0], 1.0, [True, True]),
             ("large norms, 1000 and 1001", [1000.0, 1001.0], 1.0, [False, False])]
    for name, norms, t, anomalous in cases:
        hint = (" exp(−1000) underflows to 0 and 0/0 is nan: subtract the smallest non-outlier norm from every "
                "norm first (it changes no weight)." if "1000" in name else
                " An outlier gets weight 0 and the others share 1; if every replica is an outlier, every weight "
                "is 0." if any(anomalous) else " w_r = exp(−G_r/T) / Σ_s exp(−G_s/T).")
        try:
            got = fn(list(norms), t, list(anomalous))
        except ZeroDivisionError:
            return not_yet(f"{name}: your function divides by zero.{hint}")
        except Exception as exc:  # the reader's code: explain, do not crash the notebook
            return not_yet(f"{name}: your function raised {short_error(exc)}.{hint}")
        if got is None:  # the notebook's shipped body
            return not_answered("your function still returns None: return one weight per replica.")
        want = softmax_weights(norms, t, anomalous)
        weights = read_numbers(got, nan_ok=True)  # a nan weight is a wrong weight, with the hint
        if weights is None:
            return not_yet(f"{name}: {show(got)} is not a list of numbers; return one weight per replica.")
        if len(weights) != len(want):
            return not_yet(f"{name}: {len(weights)} weights for {len(want)} replicas; return one weight per replica.")
        if not all(math.isclose(g, w, rel_tol=1e-6, abs_tol=1e-9) for g, w in zip(weights, want)):
            return not_yet(f"{name}: norms {norms}, T = {t:g}, outliers {anomalous}: your weights {weights}, "
                           f"the library's {want}.{hint}")
    return correct("Your softmax weights match edit_lab.core.penalty.softmax_weights in every case, the underflow "
                   "included: the replica that moved less gets more say, an outlier gets nothing.")


def check_first_armed_step(answer: Any, warmup: int = 4, interval: int = 2, arming: int = 4) -> CheckResult:
    """First sync step at which the detector (arming period `arming` syncs) may call an outlier."""
    want = first_armed_step(warmup, interval, arming)
    return judge_number(
        answer, want, what="a step number (a whole number)", whole=True,
        hint=("list the sync steps (the first comes τ steps after W); each updates the detector once, and it "
              "needs E values before it judges one."),
        named=[(lambda got: got == warmup + arming * interval,
                "is the sync that puts the E-th value into the history: at that sync the detector is still "
                "filling, so it judges the next one."),
               (lambda got: got == warmup + (arming - 1) * interval,
                "counts step W as a sync that feeds the detector: at W the replicas only create their anchors."),
               (lambda got: got in (warmup + arming, arming * interval) and got != want,
                "counts steps (or leaves W out); the detector counts syncs, and syncs start after the warm-up.")],
        why=("The warm-up step W only creates the anchors and feeds no detector; each later sync adds one value "
             "to the history. Count the syncs that fill it, then take the one after them."),
        right=(f"Correct: step {want} = W + (E+1)·τ = {warmup} + {arming + 1}·{interval}. Before it, z is 0 and "
               f"nothing can be an outlier (a NaN or infinite norm excepted)."))


def check_clip_factor(answer: Any, norm: float = 20.0, clip_norm: float = 10.0) -> CheckResult:
    """The factor min(1, φ/(n + 1e-6)) applied to an aggregated pseudo-gradient of norm `norm`."""
    from edit_lab.core.penalty import clip_factor

    want = clip_factor(norm, clip_norm)
    return judge_number(
        answer, want, what="a factor between 0 and 1", tol=1e-4,
        hint="clipping rescales the aggregate so that its norm is at most φ: factor = min(1, φ / n).",
        why=(f"The aggregate has norm {norm:g}; after clipping it must have norm {clip_norm:g}, so it "
             f"is multiplied by {clip_norm:g}/{norm:g} (a norm below φ would be left alone: factor 1)."),
        right=(f"Correct: {clip_norm:g}/({norm:g} + 1e-6) ≈ {want:.7f}. The direction is kept, only the "
               f"length is bounded, and it is the aggregate that is clipped, not each replica's Δ."))


def weights_against_the_softmax(table: Any, temperature: float, weight_per_step: bool) -> list[dict]:
    """Per sync and unit of a run's `penalty_table`: the weights the ranks applied, and what the library's
    softmax gives for the very norms, steps and anomaly decisions that sync recorded.

    Recomputed from the run's own records, so a rule is judged on the inputs it really got, at every sync, and
    no second run is needed: a rule whose weights differ changes every later norm, which a comparison of two
    runs could not tell from a legitimate difference.
    """
    from edit_lab.core.penalty import softmax_weights, step_scaled_norms

    out = []
    for (step, unit), rows in table.groupby(["step", "unit"], sort=True):
        rows = rows.sort_values("replica")
        norms = [float(g) for g in rows["G"]]
        steps = [int(k) for k in rows["steps"]]
        judged = step_scaled_norms(norms, steps) if weight_per_step else norms
        anomalous = [bool(a) for a in rows["outlier"]]
        out.append({"step": int(step), "unit": int(unit), "norms": judged, "anomalous": anomalous,
                    "applied": [float(w) for w in rows["weight"]],
                    "softmax": softmax_weights(judged, temperature, anomalous)})
    return out


def _named_mistake(applied: list[float], softmax: list[float], norms: list[float], anomalous: list[bool]) -> str:
    """What a rule that disagrees with the softmax seems to do, read from one sync's weights."""
    kept = [i for i, a in enumerate(anomalous) if not a]
    if any(applied[i] > 0 for i, a in enumerate(anomalous) if a):
        return "A flagged replica got a weight: an outlier's must be 0."
    if len(kept) > 1 and max(applied[i] for i in kept) - min(applied[i] for i in kept) < 1e-12:
        return "Every replica got the same weight: that is weighting switched off, the norms are not used."
    order = sorted(kept, key=lambda i: norms[i])
    if len(order) > 1 and applied[order[0]] < applied[order[-1]]:
        return "The larger norm got the larger weight: the softmax is of −G/T, so the replica that moved less counts more."
    if abs(math.fsum(applied) - 1.0) > 1e-6:
        return f"The weights add up to {math.fsum(applied):.4g}, not 1."
    return "The weights are not the softmax's: w_r = exp(−G_r/T) / Σ_s exp(−G_s/T) over the replicas not flagged."


def check_weighting_in_a_run(fn: Any, base: Any, out: Any) -> CheckResult:
    """Run the reader's weighting rule on every rank of a real EDiT run, and judge it by that run's records.

    `fn(norms, temperature, anomalous)` is shipped to the ranks as source (`edit_lab.rules`, the RunConfig field
    `penalty_weighting_rule`) and replaces `softmax_weights` at every sync of a run of `base` written to `out`
    (overwritten). Right: at every sync and unit the weights the ranks applied equal the softmax of that sync's
    recorded norms within 1e-9. Wrong: the first sync where they differ, both weight vectors and what the rule
    seems to do. A rule that cannot run is refused before any process starts, or ends the run with the rank that
    failed; either is said, never raised.
    """
    from edit_lab.rules import rule_source
    from edit_lab.records.analysis import penalty_table
    from edit_lab.runtime.launch import launch

    if (refused := not_a_function(fn, "fn(norms, temperature, anomalous) -> one weight per replica")) is not None:
        return refused
    try:
        if fn([1.0, 2.0], 1.0, [False, False]) is None:
            return not_answered("write the function of exercise 1 first (it still returns None); this check then "
                                "runs it on every rank of a real run.")
    except Exception:  # noqa: BLE001 - a rule that raises is refused below, with its reason
        pass
    cfg = base.replace(out=str(out))
    run, failed = run_a_rule(lambda: launch(cfg.replace(penalty_weighting_rule=rule_source(fn)), overwrite=True))
    if failed is not None:
        return failed
    table = penalty_table(run)
    if table.empty:
        return not_yet("the run recorded no sync, so nothing judged your rule: give `base` a few syncs "
                       "(steps > warmup_steps + sync_interval) and the penalty on.")
    syncs = weights_against_the_softmax(table, cfg.penalty.temperature, cfg.penalty.weight_per_step)
    worst = max(max(abs(a - b) for a, b in zip(s["applied"], s["softmax"])) for s in syncs)
    for s in syncs:
        if max(abs(a - b) for a, b in zip(s["applied"], s["softmax"])) > 1e-9:
            fmt = lambda ws: "[" + ", ".join(f"{w:.4f}" for w in ws) + "]"  # noqa: E731
            return not_yet(f"at step {s['step']}, unit {s['unit']}, with norms {fmt(s['norms'])} (flagged "
                           f"{s['anomalous']}), the ranks applied your weights {fmt(s['applied'])}; the softmax "
                           f"gives {fmt(s['softmax'])}. {_named_mistake(s['applied'], s['softmax'], s['norms'], s['anomalous'])}")
    loss = run.summary.get("final_val_loss")
    trained = f"; the run trained to a validation loss of {loss:.3f}" if isinstance(loss, float) else ""
    return correct(f"Correct: your rule ran on all {cfg.world_size} ranks and weighted {len(syncs)} unit syncs "
                   f"({table['step'].nunique()} syncs × {table['unit'].nunique()} units) exactly as the softmax "
                   f"(largest difference {worst:.1e}){trained}.")


def playground_answers(predicted: Any = None, config: Any = None) -> list[str]:
    """The answers to the playground's predictions, computed by the library's rule (`detector_series.decide`, i.e.
    `penalty.replay`) on the playground's own series (its defaults: 30 syncs, 5 % noise, seed 0, the event at
    sync 12): a lasting rise ×1.6 on replica 1 (with α 0.3, 0.05 and 0.6), a rise ×1.6 on both, and a fall ÷2 on
    replica 1 with the memory (δ_m of `config`) and without it (δ_m 0); and the paper's detector
    (`PenaltyConfig.authors`, armed after the same E) on the shared rise. Printed, and returned as lines.

    Locked (`exercises.unlocked`): while `predicted` (the reader's answers, in any form: they are not graded) is
    None or empty, it prints "Not answered yet" and returns no line."""
    from dataclasses import replace

    if predicted is None or (hasattr(predicted, "__len__") and len(predicted) == 0):
        say("Not answered yet. Write your answers in `my_playground_answers` (a string or a list, in your words) and "
            "run this cell again: the library's answers stay hidden until you commit yours.")
        return []

    from edit_course.panels.detector_series import NormSeries, decide
    from edit_lab.core.penalty import PenaltyConfig

    c = config or PenaltyConfig()

    def flagged(series: NormSeries, cfg: Any) -> str:
        r = decide(series.norms(), cfg)
        who = [f"replica {rep} at syncs {_ranges(r.flagged(rep))}" for rep in range(len(r.norms)) if r.flagged(rep)]
        return "; ".join(who) or "nobody"

    rise = NormSeries(event="rise", at=12, size=1.6)
    at17 = decide(rise.norms(), c).judged[1][17].outlier
    lines = [f"lasting rise ×1.6 on replica 1 at sync 12: {flagged(rise, c)} (at sync 17: "
             f"{'flagged' if at17 else 'not flagged'}); with α 0.05: {flagged(rise, replace(c, alpha=0.05))}; "
             f"with α 0.6: {flagged(rise, replace(c, alpha=0.6))}",
             f"the same rise on both replicas: flagged: {flagged(NormSeries(event='rise-both', at=12, size=1.6), c)}",
             f"replica 1's norm falls to half at sync 12 (replica 0's q doubles): flagged: "
             f"{flagged(NormSeries(event='fall', at=12, size=2.0), c)} with the memory (δ_m {c.memory_threshold:g}); "
             f"without it (δ_m 0): {flagged(NormSeries(event='fall', at=12, size=2.0), replace(c, memory_threshold=0.0))}",
             f"the paper's detector (each unit on its own G, E {c.arming}) on the same shared rise: flagged: "
             f"{flagged(NormSeries(event='rise-both', at=12, size=1.6), PenaltyConfig.authors(arming=c.arming))}"]
    print("Computed by the library's rule on the playground's series (its defaults, seed 0):")
    for line in lines:
        print("- " + line)
    return lines


def _ranges(xs: list[int]) -> str:
    """[3, 4, 5, 9] → '3–5, 9'."""
    from edit_course.panels.playground import _ranges as ranges

    return ranges(xs)
