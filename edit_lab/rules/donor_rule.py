"""The donor of a replacement (`RunConfig.rules.donor`, notebook 10).

Part of `edit_lab.rules` (a reader's own rule, run by every rank), which re-exports every name here and says
how the rules work."""

from __future__ import annotations

import itertools
import numbers
from collections.abc import Callable

from edit_lab.rules.source import RuleError, _shown, load_rule

DONOR_SIGNATURE = "fn(members, joined) -> the replica id of the live member that hands a replacement its state"
Donor = Callable[[tuple[int, ...], tuple[int, ...]], int]


def donor(source: str) -> Donor:
    """The donor rule as every rank of a surviving run calls it (`core.survival.Survival.change_to`): `pick(members,
    joined)`, with the view's sorted replica ids and those that join in it (as tuples), the reader's answer checked
    to be a whole number naming a member that did not join, as an int. No torch: probed before any process."""
    fn = load_rule(source, "donor rule")

    def pick(members: tuple[int, ...], joined: tuple[int, ...]) -> int:
        got = fn(tuple(int(m) for m in members), tuple(int(j) for j in joined))
        if isinstance(got, bool) or not isinstance(got, numbers.Integral):
            raise RuleError(f"fn({tuple(members)}, {tuple(joined)}) returned {_shown(got)}, not a replica id")
        if int(got) not in members or int(got) in joined:
            raise RuleError(f"fn({tuple(members)}, {tuple(joined)}) returned replica {int(got)}, not a live member "
                            f"that did not join (one of {[m for m in members if m not in joined]})")
        return int(got)

    return pick


def donor_of(source: str | None) -> Donor:
    """Who hands a replacement its state: the reader's rule when one is set, else the library's choice (the lowest
    member that did not join: `Rules.donor`'s default)."""
    if source is None:
        return lambda members, joined: next(m for m in members if m not in joined)
    return donor(source)


def donor_problem(source: str, replicas: int) -> str | None:
    """Why the donor rule cannot run (None when it can), found before any process starts by calling it, twice, on
    every view a run of `replicas` replicas can publish with one replacement joining (every set of members of at
    least two, every joiner among them): refused when it raises, answers anything but a member that did not join,
    or answers differently the second time (every live rank must name the same donor, or none hands the state
    over and the replacement waits forever)."""
    try:
        rule = donor(source)
        ids = range(replicas)
        for n in range(2, replicas + 1):
            for members in itertools.combinations(ids, n):
                for joiner in members:
                    first, again = rule(members, (joiner,)), rule(members, (joiner,))
                    if first != again:
                        raise RuleError(f"fn({members}, {(joiner,)}) answered {first} then {again}: every live rank "
                                        f"must name the same donor (a pure function of its arguments)")
    except Exception as e:  # noqa: BLE001 - whatever the reader's code raises is the reason
        return f"{DONOR_SIGNATURE}; it fails: {type(e).__name__}: {e}"
    return None
