"""Notebook 06's regime question, measured: does the link decide whether `sync` or a local method wins?

`sync` all-reduces the gradients every step: each step averages every replica's gradient, and on a free link
that costs nothing but the wait for the slowest replica; on a slow link every step pays the transfer. EDiT and
A-EDiT pay one model transfer every round of about τ steps. Which effect wins is a measurement, so the lesson
races the methods on the virtual clock (the same schedule on any machine) on a free link and a slow one, several
seeds each, and prints the ranking per link with verdicts that a run can fail.

The runs are passed as `{link MB/s: {method: [run of seed 0, run of seed 1, …]}}`, a link of 0 being free.
A run is anything with the `summary` a run directory holds (`final_val_loss`, `tokens_per_s`, `per_replica`).
"""

from __future__ import annotations

import statistics
from collections.abc import Mapping, Sequence
from typing import Any

import pandas as pd

from edit_course.verdict import Verdict, verdict

Races = Mapping[float, Mapping[str, Sequence[Any]]]
#: The methods that talk every step (the rest are local: they talk once a round).
EVERY_STEP = ("sync", "backup")


def aedit_period(step_s: float, tau: int, transfer_s: float) -> float:
    """A-EDiT's T_sync for a race on a link: τ of a fast replica's steps plus one model transfer over the link.

    A round then holds about τ steps whatever the link. τ × the step alone ignores what the sync itself costs: on a
    slow link A-EDiT would meet about every step's worth of compute and pay a whole transfer each time."""
    return tau * step_s + transfer_s


def link_name(mb_s: float) -> str:
    return "free link" if not mb_s else f"{mb_s:g} MB/s link"


def loss_of(run: Any) -> float:
    return float(run.summary["final_val_loss"])


def steps_of(run: Any) -> int:
    """The steps replica 0 trained (the fast one: the straggler is the last replica)."""
    return int(run.summary["per_replica"]["0"]["steps"])


def table(races: Races) -> pd.DataFrame:
    """Per link and method, over the seeds: replica 0's steps (the same in every seed on the virtual clock), the
    tokens/s of the run, and the agreed model's validation loss at the budget (mean and spread = max − min)."""
    rows = []
    for mb_s, runs in races.items():
        for method, rs in runs.items():
            losses = [loss_of(r) for r in rs]
            rows.append({"link": link_name(mb_s), "method": method, "steps (replica 0)": steps_of(rs[0]),
                         "tokens/s": statistics.mean(float(r.summary["tokens_per_s"]) for r in rs),
                         "val loss mean": statistics.mean(losses), "val loss spread": max(losses) - min(losses),
                         "seeds": len(rs)})
    return pd.DataFrame(rows).set_index(["link", "method"])


def ranking(races: Races) -> str:
    """Per link, the methods from the lowest mean validation loss up: the line the lesson prints."""
    t = table(races)
    lines = []
    for mb_s in races:
        sub = t.loc[link_name(mb_s)].sort_values("val loss mean")
        lines.append(f"{link_name(mb_s)}: " + ", ".join(f"{m} {v:.3f}" for m, v in sub["val loss mean"].items()))
    return "lowest mean validation loss first, per link: " + "; ".join(lines)


def local_trains_more_steps(races: Races, mb_s: float) -> Verdict:
    """On link `mb_s`, every local method's fast replica trains more steps than `sync`'s: it pays one transfer a
    round, not one a step."""
    runs = races[mb_s]
    local = {m: steps_of(rs[0]) for m, rs in runs.items() if m not in EVERY_STEP}
    base = steps_of(runs["sync"][0])
    return verdict(f"on the {link_name(mb_s)} every local method trains more steps than sync",
                   bool(local) and all(s > base for s in local.values()),
                   f"replica 0's steps: sync {base}, " + ", ".join(f"{m} {s}" for m, s in local.items()),
                   why_not="the link is fast enough that one transfer a step costs less than the wait for the slow "
                   "replica it saves")


def link_turns_the_race(races: Races, free: float, slow: float) -> Verdict:
    """The slow link turns the race against `sync`: there, a local method's mean loss ends below sync's by more than
    the two methods' seed spreads, and by more than it does on the free link (the gap moves in the local methods'
    favour as the link slows)."""
    t = table(races)

    def gap(mb_s: float) -> tuple[str, float, float]:
        sub = t.loc[link_name(mb_s)]
        local = sub.drop(index=[m for m in EVERY_STEP if m in sub.index])
        best = str(local["val loss mean"].idxmin())
        spread = max(float(sub.loc["sync", "val loss spread"]), float(local.loc[best, "val loss spread"]))
        return best, float(sub.loc["sync", "val loss mean"] - local.loc[best, "val loss mean"]), spread

    best_slow, g_slow, spread = gap(slow)
    best_free, g_free, _ = gap(free)
    return verdict(f"on the {link_name(slow)} a local method ends below sync by more than the seeds' spread, and "
                   f"by more than on the {link_name(free)}",
                   g_slow > spread and g_slow > g_free,
                   f"sync's mean loss minus the best local method's: {link_name(slow)} {g_slow:+.3f} ({best_slow}; "
                   f"spread {spread:.3f}), {link_name(free)} {g_free:+.3f} ({best_free})",
                   why_not="too few steps in the budget for the loss to separate the methods, or a link still fast "
                   "enough for sync")
