"""Checks for notebook 09 (Streaming DiLoCo): the fragment schedule, written by the reader and run by the engine.

The reader's `fn(step, warmup, interval, fragments)` (the fragment whose outer step lands at the start of `step`,
or None) is first checked against the library's own `protocol.fragment_landing` on a grid of settings (cheap,
and it names the first step where they part). Then it is shipped as the source of
`RunConfig.rules.fragment_schedule` (edit_lab.rules) into a real Streaming DiLoCo run, where every rank calls it
instead of `fragment_landing` to decide which fragment's pseudo-gradient leaves and lands when, and that run is
held against the library's run of the same configuration: the same landings (`syncs`: each fragment with the
step it left and the step it landed) and the same final parameters, bit for bit. A check never raises.
"""

from __future__ import annotations

import numbers
from pathlib import Path
from typing import Any

from edit_course.exercises import (
    CheckResult,
    correct,
    not_a_function,
    not_answered,
    not_yet,
    run_a_rule,
    short_error,
    show,
)
from edit_lab.protocol import fragment_landing

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


def _said(landed: list[tuple[int, int, int]], limit: int = 4) -> str:
    shown = "; ".join(f"fragment {p} sent at step {s}, landed at {t}" for p, s, t in landed[:limit])
    return shown + ("; …" if len(landed) > limit else "")


def judge_schedule_run(run: Any, ref: Any) -> CheckResult:
    """The verdict of a run of the reader's schedule against the library's run of the same configuration: right
    when every landing (fragment, step sent, step landed) and every final parameter (`torch.equal`) are the
    library's; wrong: the first landing that differs, else how many tensors differ. Never raises."""
    import torch

    try:
        mine, theirs = recorded_landings(run), recorded_landings(ref)
        tau = int(ref.config.streaming.fragment_sync_delay)
        params, ref_params = run.state_dict(), ref.state_dict()
    except Exception as e:  # noqa: BLE001 - a check never raises at a student
        return not_yet(f"the runs' records could not be read: {short_error(e, 300)}")
    if mine != theirs:
        at = next((i for i, (a, b) in enumerate(zip(mine, theirs)) if a != b), min(len(mine), len(theirs)))
        got = f"fragment {mine[at][0]} at step {mine[at][2]}" if at < len(mine) else "nothing more"
        want = f"fragment {theirs[at][0]} at step {theirs[at][2]}" if at < len(theirs) else "nothing more"
        return not_yet(f"the engine ran your schedule on every rank, and landing {at + 1} differs from the library's "
                       f"run: yours landed {got}, the library's {want} ({len(mine)} landings against "
                       f"{len(theirs)}).")
    differ = [k for k in ref_params if k not in params or not torch.equal(params[k], ref_params[k])]
    if differ:
        return not_yet(f"the same landings as the library's run, but {len(differ)} of {len(ref_params)} tensors "
                       f"differ at the end (first: {differ[0]}).")
    if not theirs:
        return not_yet("the library's run landed no fragment, so nothing ran your schedule: give the run steps "
                       "beyond warmup_steps + sync_interval.")
    return correct(f"Correct: the engine ran your schedule on all {run.config.world_size} ranks, and the run landed "
                   f"the library's {len(mine)} fragments ({_said(mine)}), each sent τ = {tau} step(s) before it "
                   f"landed; its final parameters ({len(ref_params)} tensors) are bit-for-bit the library's run's.")


def check_fragment_schedule(fn: Any, run: Any = None, out: Any = None) -> CheckResult:
    """The reader's schedule against the library's on `GRID`, then run by the engine: `run` is the library's
    `streaming_diloco` run (a Run or its directory), whose configuration is launched again with `fn` as
    `RunConfig.rules.fragment_schedule` into `out` (default: `<run's directory>-my-schedule`, overwritten), and the
    two runs are compared (`judge_schedule_run`). Without a run, or with a directory that holds none, the grid
    alone decides, and the check says so. A schedule wrong on the grid launches nothing. Never raises."""
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
        return not_yet(why + ". Hint: count the steps since the warm-up in blocks of H/P. Nothing was launched.")
    try:
        if run is not None and not hasattr(run, "syncs"):  # a run directory
            from edit_lab.records.run import Run

            run = Run(run) if (Path(run) / "config.json").exists() else None
        if run is None:
            return correct("Correct: your schedule matches the library's on every setting tried (no run was there "
                           "to run it in).")
        cfg = run.config
        if cfg.method != "streaming_diloco":
            return not_yet(f"`run` should be a streaming_diloco run, got a {cfg.method} run.")
        where = out if out is not None else f"{Path(run.path) if hasattr(run, 'path') else cfg.runtime.out}-my-schedule"
    except Exception as e:  # noqa: BLE001 - a check never raises at a student
        return not_yet(f"the run could not be read: {short_error(e, 300)}")
    from edit_lab.rules import RuleError, rule_source
    from edit_lab.runtime.launch import launch

    try:
        source = rule_source(fn)
    except RuleError as e:
        return not_yet(f"{e}. Nothing was launched.")
    mine, failed = run_a_rule(lambda: launch(cfg.replace(fragment_schedule_rule=source, out=str(where)),
                                             overwrite=True))
    if failed is not None:
        return failed
    return judge_schedule_run(mine, run)
