"""Checks for notebook 10 (a replica's death): the donor of a replacement, written by the reader, run on every rank.

The reader's `fn(members, joined)` names the live member that hands a replacement its state; the exercise asks for
the *highest* member that did not join (the library takes the lowest). It is checked on every view a run of three
replicas can publish, then shipped as `RunConfig.rules.donor` (edit_lab.rules) into the lesson's real episode
(replica 1 killed, a replacement joining), where every live rank calls it when the replacement joins: right when
the run's view row names the asked-for donor and the replacement's parameters equal the others' after its join
(checksums). A check never raises.
"""

from __future__ import annotations

import itertools
import os
from typing import Any

from edit_course.exercises import CheckResult, correct, not_a_function, not_answered, not_yet, run_a_rule, short_error

CALL = "fn(members, joined) -> the replica id of the live member that hands the replacement its state"


def wanted(members: tuple[int, ...], joined: tuple[int, ...]) -> int:
    """The exercise's donor: the highest member that did not join."""
    return max(m for m in members if m not in joined)


def first_mismatch(fn: Any, replicas: int = 3) -> str | None:
    for n in range(2, replicas + 1):
        for members in itertools.combinations(range(replicas), n):
            for j in members:
                try:
                    got = fn(members, (j,))
                except Exception as e:  # noqa: BLE001 - the reader's code
                    return f"fn({members}, {(j,)}) raised {short_error(e)}"
                if got != wanted(members, (j,)):
                    return f"fn({members}, {(j,)}) gave {got!r}: not the highest live member that did not join"
    return None


def judge_donor_run(donors: list[Any], want: int, agree: bool) -> CheckResult:
    """The verdict on a run's recorded donors (the `donor` of its join views) and its checksums' agreement."""
    if not donors:
        return not_yet("no replacement joined in the run, so nobody ran your rule (rejoin_step after the end?)")
    if donors[0] != want:
        return not_yet(f"the run's replacement took its state from replica {donors[0]}, not replica {want}")
    if not agree:
        return not_yet(f"replica {want} handed the state over, but the replacement's parameters differ from the "
                       "others' after its join")
    return correct(f"Correct: every live rank ran your rule, replica {want} handed the replacement its state, and "
                   "the replacement's θ and anchors equal the others' at every sync after its join (checksums).")


def check_donor(fn: Any, cfg: Any = None) -> CheckResult:
    """The reader's donor rule on every view of 3 replicas, then in a real run of `cfg` (the lesson's surviving
    episode, with checksums: a RunConfig or the directory of a run of it) with it as `donor_rule`. Never raises."""
    if (refused := not_a_function(fn, CALL)) is not None:
        return refused
    try:
        unanswered = fn((0, 1, 2), (1,)) is None
    except Exception:  # noqa: BLE001
        unanswered = False
    if unanswered:
        return not_answered("your function returns None: return the highest replica id in `members` that is not "
                            "in `joined`.")
    if (why := first_mismatch(fn)) is not None:
        return not_yet(why + ". Nothing was launched.")
    if isinstance(cfg, (str, os.PathLike)):  # a run directory: its configuration runs again
        from pathlib import Path

        from edit_lab.records.run import Run

        try:
            cfg = Run(cfg).config if (Path(cfg) / "config.json").exists() else None
        except Exception as e:  # noqa: BLE001 - a check never raises at a student
            return not_yet(f"the run could not be read: {short_error(e, 300)}")
    if cfg is None:
        return correct("Correct on every view of 3 replicas (no run was there to run it in, so nothing was "
                       "launched).")
    from edit_course.claims.survival import checksums
    from edit_lab import launch
    from edit_lab.rules import rule_source

    try:
        src = rule_source(fn)
    except Exception as e:  # noqa: BLE001
        return not_yet(f"your function cannot travel to the ranks: {short_error(e, 300)}")
    out = str(cfg.runtime.out) + "-my-donor"
    run, bad = run_a_rule(lambda: launch(cfg.replace(donor_rule=src, out=out), overwrite=True))
    if bad is not None:
        return bad
    try:
        joins = [r for r in run.syncs if r.get("kind") == "view" and r.get("joined")]
        donors = [r.get("donor") for r in joins]
        want = wanted(tuple(joins[0]["members"]), tuple(joins[0]["joined"])) if joins else -1
        crcs = checksums(run.path)
        after = [s for s in crcs if joins and s >= int(joins[0]["step"])]
        agree = bool(after) and all(len({frozenset(v) for v in crcs[s].values()}) == 1 for s in after)
    except Exception as e:  # noqa: BLE001
        return not_yet(f"the run's records could not be read: {short_error(e, 300)}")
    return judge_donor_run(donors, want, agree)
