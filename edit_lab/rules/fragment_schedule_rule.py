"""The fragment schedule (`RunConfig.rules.fragment_schedule`, notebook 09).

Part of `edit_lab.rules` (a reader's own rule, run by every rank), which re-exports every name here and says
how the rules work."""

from __future__ import annotations

from collections.abc import Callable

from edit_lab.rules.source import RuleError, _shown, load_rule


FRAGMENT_SCHEDULE_SIGNATURE = ("fn(step, warmup, interval, fragments) -> the fragment landing at the start of step, "
                               "or None")
FragmentSchedule = Callable[[int, int, int, int], "int | None"]


def fragment_schedule(source: str) -> FragmentSchedule:
    """The fragment schedule rule as every rank calls it (`methods.streaming`, `sim.programs`): `landing(step,
    warmup, interval, fragments)`, the reader's answer checked to be None or a fragment 0..fragments−1 (a whole
    number; True and 1.0 are not fragments), as an int. No torch: the config probes it before any process."""
    import numbers

    fn = load_rule(source, "fragment schedule rule")

    def landing(step: int, warmup: int, interval: int, fragments: int) -> int | None:
        got = fn(int(step), int(warmup), int(interval), int(fragments))
        if got is None:
            return None
        if isinstance(got, bool) or not isinstance(got, numbers.Integral):
            raise RuleError(f"fn({step}, {warmup}, {interval}, {fragments}) returned {_shown(got)}, not None or a "
                            f"fragment (a whole number)")
        if not 0 <= int(got) < fragments:
            raise RuleError(f"fn({step}, {warmup}, {interval}, {fragments}) returned fragment {int(got)}, outside "
                            f"0..{fragments - 1}")
        return int(got)

    return landing


def fragment_schedule_of(source: str | None) -> FragmentSchedule:
    """What a streaming run (and its simulated twin) asks which fragment lands when: the reader's rule when one is
    set (`RunConfig.rules.fragment_schedule`), else the library's `protocol.fragment_landing`."""
    if source is None:
        from edit_lab.protocol import fragment_landing

        return fragment_landing
    return fragment_schedule(source)


def fragment_schedule_horizon(warmup: int, interval: int, delay: int, steps: int | None = None) -> int:
    """The steps a fragment schedule is probed on before launch: 0 … W + τ + 4H, and the run's own steps (+ τ,
    what the last sends ask) when it has a step count, at most 100 000 steps."""
    last = warmup + delay + 4 * interval
    if steps is not None:
        last = max(last, steps + delay)
    return min(last, 100_000)


def fragment_schedule_problem(source: str, warmup: int, interval: int, fragments: int, delay: int,
                              steps: int | None = None) -> str | None:
    """Why the fragment schedule cannot run (None when it can), found by calling it at every step of
    `fragment_schedule_horizon` before any process starts, twice (every rank must take the same decision).

    Refused: it raises or answers anything but None or a fragment 0..P−1; it answers differently the second time
    (the ranks would disagree and hang in different collectives); it lands a fragment at or before step W + τ
    (its pseudo-gradient would leave τ steps earlier, before the anchors exist at W, and never be sent); two
    landings fewer than τ steps apart (the second would leave while the first still travels, and Streaming
    DiLoCo has one fragment in flight); or a fragment that never lands in the probed steps (its units would
    train alone until the closing sync)."""
    where = f"with W = {warmup}, H = {interval}, P = {fragments}, τ = {delay}"
    try:
        rule = fragment_schedule(source)
        last = fragment_schedule_horizon(warmup, interval, delay, steps)
        landed: list[tuple[int, int]] = []
        for step in range(last + 1):
            try:
                got = rule(step, warmup, interval, fragments)
                again = rule(step, warmup, interval, fragments)
            except RuleError:
                raise
            except Exception as e:  # noqa: BLE001 - whatever the reader's code raises is the reason
                raise RuleError(f"fn({step}, {warmup}, {interval}, {fragments}) raised {type(e).__name__}: {e}") from e
            if got != again:
                raise RuleError(f"fn({step}, {warmup}, {interval}, {fragments}) answered {got} then {again}: every "
                                f"rank must take the same decision (a pure function of its arguments)")
            if got is None:
                continue
            if step <= warmup + delay:
                raise RuleError(f"it lands fragment {got} at step {step}, at or before W + τ = {warmup + delay}: its "
                                f"pseudo-gradient would leave at step {step - delay}, before the anchors exist (they "
                                f"are created at W = {warmup})")
            if landed and step - landed[-1][0] < delay:
                raise RuleError(f"it lands fragment {landed[-1][1]} at step {landed[-1][0]} and fragment {got} at "
                                f"step {step}, fewer than τ = {delay} steps apart: fragment {got} would leave while "
                                f"fragment {landed[-1][1]} still travels (one fragment is in flight at a time)")
            landed.append((step, got))
        never = sorted(set(range(fragments)) - {f for _, f in landed})
        if never:
            raise RuleError(f"fragment {never[0]} never lands in steps 0..{last}: its units would never sync until "
                            f"the run's closing sync")
    except Exception as e:  # noqa: BLE001 - whatever the reader's code raises is the reason
        return f"{FRAGMENT_SCHEDULE_SIGNATURE}; it fails {where}: {e}"
    return None
