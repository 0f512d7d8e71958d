"""Checks for notebook 06 (stragglers and A-EDiT): what waiting costs under step-based and time-based sync.

Idealised arithmetic (no communication time, steady step times) of what the notebook measures:
step-based methods hold every replica to the same number of steps per round, so the fast one waits
for the slow one's extra time; A-EDiT gives every replica the same *time* per round instead.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from . import CheckResult, judge_number, judge_numbers


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
