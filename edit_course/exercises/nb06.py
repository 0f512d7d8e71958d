"""Checks for notebook 06 (stragglers and A-EDiT): what waiting costs under step-based and time-based sync.

Idealised arithmetic (no communication time, steady step times) of what the notebook measures:
step-based methods hold every replica to the same number of steps per round, so the fast one waits
for the slow one's extra time; A-EDiT gives every replica the same *time* per round instead. And one
straggler kind written by the reader (`straggler_rule`, edit_lab/rules/), run on every rank of a real
run and judged by that run's own pause events.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from typing import Any

from edit_course.exercises import (
    CheckResult,
    correct,
    judge_number,
    judge_numbers,
    not_a_function,
    not_answered,
    not_yet,
    run_a_rule,
    short_error,
)

THROTTLED = 1  # the replica of the exercise whose GPU throttles on odd steps


def edit_wait_ms(interval: int, fast_ms: float, slow_ms: float) -> float:
    """Blocked ms per round of the fast replica in EDiT: both train τ steps, the fast one then waits."""
    return interval * max(0.0, slow_ms - fast_ms)


def sync_share(paces: Sequence[float]) -> float:
    """Fraction of the capacity bound (Σ own paces) that lockstep training reaches: R × slowest / Σ paces."""
    return len(paces) * min(paces) / sum(paces)


def aedit_round_steps(period_s: float, step_ms: Sequence[float]) -> list[int]:
    """Local steps per A-EDiT round of each replica: about T_sync / its step time."""
    return [round(period_s * 1e3 / ms) for ms in step_ms]


def check_edit_wait_ms(answer: Any, interval: int = 4, fast_ms: float = 100.0, slow_ms: float = 200.0) -> CheckResult:
    """The fast replica's blocked ms per EDiT round (τ = `interval`)."""
    want = edit_wait_ms(interval, fast_ms, slow_ms)
    return judge_number(
        answer, want, what="milliseconds", tol=0.5, unit="ms",
        hint=("both replicas train τ steps per round; the fast one is done first and waits at the sync until the "
              "slow one arrives."),
        why=(f"The fast replica needs {interval}·{fast_ms:g} = {interval * fast_ms:g} ms for its round, the slow "
             f"one {interval}·{slow_ms:g} = {interval * slow_ms:g} ms; the fast one waits for the difference."),
        right=(f"Correct: {interval}·({slow_ms:g} − {fast_ms:g}) = {want:g} ms per round — exactly what "
               f"synchronous training makes it wait, only in one stop instead of {interval}."))


def check_sync_share(answer: Any, paces: Sequence[float] = (4000.0, 2000.0)) -> CheckResult:
    """Fraction of the capacity bound reached when every replica runs at the slowest pace."""
    want = sync_share(paces)
    return judge_number(
        answer, want, what="a fraction between 0 and 1", tol=0.01, unit="fraction",
        hint=("the capacity bound is the sum of the replicas' own paces; lockstep training runs every replica at "
              "the slowest pace."),
        why=(f"Capacity bound: {' + '.join(f'{p:g}' for p in paces)} = {sum(paces):g} tokens/s. In lockstep each "
             f"of the {len(paces)} replicas runs at {min(paces):g} tokens/s."),
        right=(f"Correct: {len(paces)}·{min(paces):g} / {sum(paces):g} = {want:.3f}. The missing "
               f"{1 - want:.0%} is the fast replica standing blocked; A-EDiT gets it back."))


def check_aedit_round_steps(answer: Any, period_s: float = 0.8,
                            step_ms: Sequence[float] = (100.0, 200.0)) -> CheckResult:
    """About how many local steps each replica trains per A-EDiT round of `period_s` seconds."""
    want = aedit_round_steps(period_s, step_ms)
    why = (f"A round lasts about {period_s * 1e3:g} ms for everyone; the fast replica fits "
           f"{period_s * 1e3:g}/{step_ms[0]:g} steps into it, the slow one {period_s * 1e3:g}/{step_ms[1]:g}.")
    return judge_numbers(
        answer, want, what="one number per replica ([fast, slow])", tol=1,
        labels=("fast replica's count", "slow replica's count"),
        hint="a round lasts about T_sync seconds for every replica; divide by each one's step time.",
        named=[(lambda got: len(set(got)) == 1,
                f"gives both replicas the same step count, as step-based sync does; A-EDiT gives them the same "
                f"time instead. {why}")],
        why=why,
        right=(f"Correct: about {want} (±1: a meeting waits for the step in progress). The replicas no longer "
               f"agree on a step count, only on a time; weights by steps (`step_weighting`) can account for it."))


def throttle_pause_s(step: int, replica: int, compute_s: float) -> float:
    """The exercise's straggler: replica 1 pauses after each odd step for as long as the step's own compute."""
    return compute_s if replica == THROTTLED and step % 2 == 1 else 0.0


def _steps(xs: Any) -> str:
    xs = sorted(xs)
    return ", ".join(str(x) for x in xs[:6]) + (", …" if len(xs) > 6 else "")


def judge_throttle(pauses: dict[tuple[int, int], dict], steps_run: dict[int, set[int]]) -> str | None:
    """What is wrong with a run's pauses against the throttle (None: nothing).

    `pauses`: (replica, step) -> the data of that step's `straggle` event (`planned`, `compute`);
    `steps_run`: replica -> the steps it trained. Judged by structure: who paused after which step, and the
    requested seconds against the step's own compute the rule was given (never the wall clock's seconds)."""
    hint = ("Replica 1 throttles: after each odd step (step % 2 == 1) it pauses for compute_s, so that step "
            "takes 2× its compute; on even steps, and on every other replica, return 0.")
    wrong_replica = sorted({r for r, _ in pauses if r != THROTTLED})
    if wrong_replica:
        steps = {s for r, s in pauses if r == wrong_replica[0]}
        only = "" if any(r == THROTTLED for r, _ in pauses) else f", and replica {THROTTLED} never did"
        return (f"replica {wrong_replica[0]} paused (after steps {_steps(steps)}){only}: you paused the wrong "
                f"replica; only replica {THROTTLED} is the throttling GPU. {hint}")
    mine = {s for r, s in pauses if r == THROTTLED}
    odd = {s for s in steps_run.get(THROTTLED, set()) if s % 2 == 1}
    even_paused = sorted(s for s in mine if s % 2 == 0)
    if even_paused and mine >= odd and odd:
        return (f"replica {THROTTLED} paused after every step (even ones too: {_steps(even_paused)}): it throttles "
                f"only every other step. {hint}")
    if even_paused:
        return (f"replica {THROTTLED} paused after even steps ({_steps(even_paused)}): the throttled steps are the "
                f"odd ones, step % 2 == 1. {hint}")
    missing = sorted(odd - mine)
    if missing:
        return f"replica {THROTTLED} did not pause after odd step(s) {_steps(missing)}. {hint}"
    for (r, s), data in sorted(pauses.items()):
        planned, compute = float(data.get("planned", math.nan)), float(data.get("compute", math.nan))
        if not math.isclose(planned, compute, rel_tol=1e-9, abs_tol=0.0):
            ratio = planned / compute if compute > 0 else math.inf
            k = f"; that makes the step {ratio + 1:.3g}× as slow, not 2×" if math.isfinite(ratio) else ""
            return (f"after step {s} replica {r} paused {1e3 * planned:.3f} ms for a step whose own compute took "
                    f"{1e3 * compute:.3f} ms ({ratio:.3g}× its compute){k}. Twice as slow is compute + a pause "
                    f"of (2 − 1)·compute: return compute_s itself.")
    return None


def check_straggler_in_a_run(fn: Any, base: Any, out: Any) -> CheckResult:
    """Run the reader's straggler rule on every rank of a real run, and judge it by that run's pause events.

    `fn(step, replica, compute_s)` is shipped to the ranks as source (`edit_lab.rules`, the RunConfig field
    `straggler_rule`) and called after every step of a run of `base` written to `out` (overwritten), with the
    other stragglers off, so that every recorded pause is the rule's. Right: replica 1 paused after each of its
    odd steps, warm-up included, each pause as requested equal to the compute the step gave the rule within
    1e-9 (relative), and no other pause. Wrong: which replica or steps paused, or how long against the compute.
    On the wall clock and the virtual clock alike, only the requested seconds are judged, never measured ones.
    A rule that cannot run is refused before any process starts, or ends the run with the rank that failed;
    either is said, never raised.
    """
    from edit_lab.rules import rule_source
    from edit_lab.runtime.launch import launch

    if (refused := not_a_function(fn, "fn(step, replica, compute_s) -> seconds of pause")) is not None:
        return refused
    try:
        if fn(1, THROTTLED, 0.1) is None and fn(2, 0, 0.1) is None:
            return not_answered("your function still returns None: return the seconds to pause (0.0 for none); "
                                "this check then runs it on every rank of a real run.")
    except Exception:  # noqa: BLE001 - a rule that raises is refused below, with its reason
        pass
    cfg = base.replace(straggler_replicas=(), random_pause_prob=0.0, out=str(out))
    if cfg.replicas <= THROTTLED:
        return not_yet(f"`base` has {cfg.replicas} replica(s): the exercise needs replica {THROTTLED}, so "
                       f"give it at least {THROTTLED + 1}.")
    run, failed = run_a_rule(lambda: launch(cfg.replace(straggler_rule=rule_source(fn)), overwrite=True))
    if failed is not None:
        return failed
    try:
        pauses = {(int(e["replica"]), int(e["step"])): e.get("data") or {} for e in run.events_of("straggle")}
        steps_run: dict[int, set[int]] = {}
        for row in run.metrics:
            if row.get("kind") == "train":
                steps_run.setdefault(int(row["replica"]), set()).add(int(row["step"]))
    except Exception as e:  # noqa: BLE001
        return not_yet(f"the run's records could not be read: {short_error(e, 300)}")
    if (why := judge_throttle(pauses, steps_run)) is not None:
        return not_yet(why)
    odd = sorted(s for s in steps_run.get(THROTTLED, set()) if s % 2 == 1)
    if not odd:
        return not_yet(f"replica {THROTTLED} trained no odd step, so nothing judged your rule: give `base` a few "
                       f"steps (steps >= 4).")
    computes = [float(pauses[(THROTTLED, s)]["compute"]) for s in odd]
    clock = "virtual" if getattr(getattr(cfg, "clock", None), "kind", "wall") == "virtual" else "wall"
    return correct(f"Correct: your rule ran on all {cfg.world_size} ranks ({clock} clock); replica {THROTTLED} "
                   f"paused after each of its {len(odd)} odd steps, each time for exactly the step's own compute "
                   f"({1e3 * min(computes):.2f}–{1e3 * max(computes):.2f} ms), and nobody paused otherwise.")
