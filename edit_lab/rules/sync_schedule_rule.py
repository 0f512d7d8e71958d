"""The layer-wise sync order (`RunConfig.rules.sync_schedule`, notebook 04).

Part of `edit_lab.rules` (a reader's own rule, run by every rank), which re-exports every name here and says
how the rules work."""

from __future__ import annotations


from edit_lab.rules.source import RuleError, _shown, load_rule


SYNC_SCHEDULE_SIGNATURE = "fn(n_units) -> list of (kind, unit) operations, kind one of issue, wait, all_gather, compute"
SCHEDULE_KINDS = ("issue", "wait", "all_gather", "compute")


def _schedule_op(op: object) -> tuple[str, int] | None:
    """`op` as a (kind, unit) pair of a string and a whole number, or None when it is not one."""
    import numbers

    if isinstance(op, (str, bytes)):
        return None
    try:
        kind, unit = op  # type: ignore[misc]
    except Exception:  # noqa: BLE001 - not a pair
        return None
    if not isinstance(kind, str) or isinstance(unit, bool) or not isinstance(unit, numbers.Integral):
        return None
    return kind, int(unit)


def sync_schedule_plan(source: str, n_units: int) -> list[list[tuple[str, int]]]:
    """What every rank runs in each unit's pre-forward during an EDiT/A-EDiT sync: `plan[l]` is the list of
    ("issue", u) / ("wait", u) operations the reader's `fn(n_units)` lists after ("all_gather", l−1) and before
    ("all_gather", l), in its order (`methods.edit.EDiTMethod.pre_unit`); "compute" operations are ignored (the
    forward computes each unit right after its all-gather).

    RuleError when the schedule cannot run without a hang or a crash: fn raises or answers anything but a list
    of (kind, unit) pairs, a kind outside `SCHEDULE_KINDS`, a unit outside 0..n−1, the all-gathers not exactly
    units 0, 1, …, n−1 in that order, a unit not issued or not waited for exactly once, a wait before its
    issue, or an issue or a wait after the last all-gather (the sync ends in the last unit's pre-forward).
    A unit all-gathered BEFORE its wait is accepted: its wait runs in a later unit's pre-forward, every rank
    does the same, and `finish` only resets the shard in place; the run shows the damage (the shard group
    computed that unit with the parameters from before the outer step)."""
    fn = load_rule(source, "sync schedule rule")
    n = int(n_units)
    try:
        got = fn(n)
    except Exception as e:  # noqa: BLE001 - whatever the reader's code raises is the reason
        raise RuleError(f"fn({n}) raised {type(e).__name__}: {e}") from e
    if not isinstance(got, (list, tuple)):
        raise RuleError(f"fn({n}) returned {_shown(got)}, not a list of (kind, unit) operations")
    plan: list[list[tuple[str, int]]] = [[] for _ in range(n)]
    issued: set[int] = set()
    waited: set[int] = set()
    gathered = 0  # the unit the next all-gather must be
    for i, raw in enumerate(got):
        op = _schedule_op(raw)
        if op is None:
            raise RuleError(f"operation {i} ({_shown(raw, 40)}) is not a pair (kind, unit) with a whole unit")
        kind, unit = op
        if kind not in SCHEDULE_KINDS:
            raise RuleError(f"operation {i} has the unknown kind {kind!r}; one of {', '.join(SCHEDULE_KINDS)}")
        if not 0 <= unit < n:
            raise RuleError(f"operation {i} ({kind!r}, {unit}) names a unit outside 0..{n - 1}")
        if kind == "compute":
            continue
        if kind == "all_gather":
            if unit != gathered:
                raise RuleError(f"operation {i} all-gathers unit {unit} where unit {gathered} comes next: the "
                                f"forward all-gathers every unit once, in order 0..{n - 1}")
            gathered += 1
            continue
        if gathered == n:
            raise RuleError(f"operation {i} ({kind!r}, {unit}) comes after the last all-gather: the sync ends in "
                            f"unit {n - 1}'s pre-forward, so every issue and wait must come before "
                            f"('all_gather', {n - 1})")
        if kind == "issue":
            if unit in issued:
                raise RuleError(f"unit {unit} is issued twice (its pseudo-gradient is sent once)")
            issued.add(unit)
        else:
            if unit not in issued:
                raise RuleError(f"unit {unit} is waited for before it is issued (nothing to wait for)")
            if unit in waited:
                raise RuleError(f"unit {unit} is waited for twice")
            waited.add(unit)
        plan[gathered].append(op)
    if gathered != n:
        raise RuleError(f"the schedule all-gathers {gathered} of the {n} units: the forward all-gathers every unit "
                        f"once, in order")
    for what, done in (("issued", issued), ("waited for", waited)):
        missing = sorted(set(range(n)) - done)
        if missing:
            raise RuleError(f"unit {missing[0]} is never {what}: every unit's sync is issued and waited for once "
                            f"in every sync")
    return plan


def sync_schedule_problem(source: str, n_units: int) -> str | None:
    """Why the sync schedule rule cannot run on a model of `n_units` units (None when it can), found by calling
    it once for that count before any process starts (`sync_schedule_plan`)."""
    try:
        sync_schedule_plan(source, n_units)
    except Exception as e:  # noqa: BLE001 - whatever the reader's code raises is the reason
        return f"{SYNC_SCHEDULE_SIGNATURE}; it fails on {n_units} units: {e}"
    return None
