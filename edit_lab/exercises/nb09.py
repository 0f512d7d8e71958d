"""Checks for notebook 09 (Streaming DiLoCo): the fragment schedule, written by the reader.

The engine has no hook for a schedule of one's own (`streaming_diloco` calls `schedule.fragment_landing`), so
this is a pure-function exercise: the reader's `fn(step, warmup, interval, fragments)` (the fragment whose
outer step lands at the start of `step`, or None) is checked against the library's own `fragment_landing` on a
grid of settings, then against the landings a real Streaming DiLoCo run recorded (`syncs`: every `fragment_sent`
with its step, every landing with its fragment and `sent_at`). A check never raises.
"""

from __future__ import annotations

import numbers
from typing import Any

from ..schedule import fragment_landing
from . import CheckResult, correct, not_a_function, not_answered, not_yet, short_error, show

CALL = "fn(step, warmup, interval, fragments) -> the fragment landing at the start of step, or None"
#: (W, H, P) the reader's function is checked on, steps 0 … 3H + W.
GRID = ((0, 4, 2), (2, 6, 3), (4, 8, 4), (3, 8, 2), (1, 6, 1), (2, 9, 3))


def recorded_landings(run: Any) -> list[tuple[int, int, int]]:
    """(fragment, step sent, step landed) of every landing a streaming run recorded in training (in order)."""
    return [(int(s["fragment"]), int(s["sent_at"]), int(s["step"])) for s in run.syncs
            if s.get("kind") == "sync" and s.get("fragment") is not None and s.get("sent_at") is not None]


def first_mismatch(fn: Any) -> str | None:
    """Where the reader's function and `fragment_landing` first disagree on the grid, said; None when nowhere."""
    for w, h, p in GRID:
        for step in range(3 * h + w + 1):
            want = fragment_landing(step, w, h, p)
            try:
                got = fn(step, w, h, p)
            except Exception as e:  # noqa: BLE001 - the reader's code
                return f"fn({step}, {w}, {h}, {p}) raised {short_error(e)}"
            if got is None and want is None:
                continue
            whole = isinstance(got, numbers.Integral) and not isinstance(got, bool)
            if not whole or want is None or int(got) != want:
                said = "None" if want is None else f"fragment {want}"
                why = ("nothing lands in warm-up or between two landings" if want is None else
                       f"every H/P = {h // p} steps after the warm-up one fragment lands, fragment 0 first")
                return (f"with W = {w}, H = {h}, P = {p}, step {step} gave {show(got)} where the schedule has "
                        f"{said}: {why}")
    return None


def check_fragment_schedule(fn: Any, run: Any = None) -> CheckResult:
    """The reader's schedule against the library's on `GRID`, then against the landings `run` recorded (a
    `streaming_diloco` Run or its directory: each landing's fragment and step, and its sending τ steps before;
    a directory that holds no run is skipped, and the check says so). Never raises."""
    if (refused := not_a_function(fn, CALL)) is not None:
        return refused
    try:
        unanswered = all(fn(s, 0, 4, 2) is None for s in range(9))
    except Exception:  # noqa: BLE001 - judged below, with its reason
        unanswered = False
    if unanswered:
        return not_answered("your function returns None at every step: return the fragment p that lands at the "
                            "start of `step` (p lands at W + (p + 1)·H/P + k·H), None elsewhere.")
    if (why := first_mismatch(fn)) is not None:
        return not_yet(why + ". Hint: count the steps since the warm-up in blocks of H/P.")
    if run is not None and not hasattr(run, "syncs"):  # a run directory
        from pathlib import Path

        from ..run import Run

        run = Run(run) if (Path(run) / "config.json").exists() else None
    if run is None:
        return correct("Correct: your schedule matches the library's on every setting tried (no run's records "
                       "were there to hold it against).")
    try:
        cfg = run.config
        landed = recorded_landings(run)
        tau = int(cfg.fragment_sync_delay)
        for fragment, sent, step in landed:
            got = fn(step, cfg.warmup_steps, cfg.sync_interval, cfg.fragments)
            if got != fragment or step - sent != tau:
                return not_yet(f"the run landed fragment {fragment} at step {step} (sent at {sent}); your function "
                               f"gives {show(got)} for that step.")
        last = max((s for _, _, s in landed), default=-1)
        mine = [s for s in range(cfg.warmup_steps + 1, last + 1)
                if fn(s, cfg.warmup_steps, cfg.sync_interval, cfg.fragments) is not None]
        missing = sorted(set(mine) - {step for _, _, step in landed})
    except Exception as e:  # noqa: BLE001 - a check never raises at a student
        return not_yet(f"the run's records could not be judged: {short_error(e, 300)}")
    if missing:
        return not_yet(f"your function lands a fragment at steps {missing}, where the run landed none.")
    shown = "; ".join(f"fragment {p} sent at step {s}, landed at {t}" for p, s, t in landed[:4])
    return correct(f"Correct: your schedule matches the library's and all {len(landed)} landings of the run "
                   f"({shown}{'; …' if len(landed) > 4 else ''}), each sent τ = {tau} step(s) before it landed.")
