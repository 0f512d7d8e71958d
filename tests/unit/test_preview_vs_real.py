"""Previews against real runs, without launching one: the runs shipped in edit_lab/examples.

The three shipped runs (sync, EDiT and A-EDiT with a 2× straggler, real runs recorded on a quiet
2-core machine) are files, so predicting them from the EDiT run's calibration gives the same numbers
on every machine, busy or idle: `benchmarks/preview_vs_real.py`'s `example_rows`, the last three rows
of the README's "Previews against real runs". The tolerances below are the simulator's accuracy on
these runs, with a margin, not a target: a change to the simulator or to calibration that moves a
prediction by more shows here. The comparison with runs made on this machine (every method, 15 %
tokens/s, 25 % waiting) is the benchmark's; it needs an idle machine, and it takes minutes.
"""

from __future__ import annotations

import pytest

from benchmarks.preview_vs_real import example_rows

# Relative errors (predicted / measured − 1) measured on the shipped runs, then the tolerance:
#                 tokens/s        waiting (sync_wait_s, summed)   steps per replica (0, 1)
# sync            +2.7 %  (6 %)   +26.4 % (35 %)                  +0.0 %, +0.0 % (5 %)
# edit (calib.)   −4.0 %  (7 %)   +53.6 % (65 %)                  −3.4 %, −6.9 % (10 %)
# aedit           +3.1 %  (6 %)   +78.8 % (90 %)                  +10.0 % (15 %), −4.3 % (10 %)
# Throughput is predicted within a few per cent; the waiting is over-predicted, and the reason is
# measured: the simulator gives both replicas the calibration's compute speed, but on 2 cores shared
# by 4 ranks the fast replica's ranks compute more slowly than the straggler's (edit-straggler: 48.7 ms
# of own compute per step against 40.0 ms), the straggler's spinning ranks holding the cores. Its
# replica is then less ahead than simulated, and waits less at the time budget's stop checks, which
# hold most of the waiting (0.84 s of 1.02 s measured, 1.18 s simulated). Since issue 23 the straggler
# stretches only its own compute, so nothing of that core lending hides in its pause any more.
ACCURACY = {
    "sync": {"tokens": 0.06, "wait": 0.35, "steps": (0.05, 0.05)},
    "edit": {"tokens": 0.07, "wait": 0.65, "steps": (0.10, 0.10)},
    "aedit": {"tokens": 0.06, "wait": 0.90, "steps": (0.15, 0.10)},
}


@pytest.fixture(scope="module")
def rows():
    return {r["method"]: r for r in example_rows()}


def test_every_shipped_run_is_predicted(rows):
    assert set(rows) == set(ACCURACY)
    assert [m for m, r in rows.items() if r["calibration"]] == ["edit"]


def _errors(row) -> str:
    """The row's relative errors, as the table above gives them (to re-measure it after a change that is meant)."""
    steps = ", ".join(f"{row['predicted_steps'][r] / row['real_steps'][r] - 1:+.1%}" for r in ("0", "1"))
    return f"tokens/s {row['tokens_rel_err']:+.1%}, waiting {row['sync_wait_rel_err']:+.1%}, steps {steps}"


@pytest.mark.parametrize("method", ACCURACY)
def test_the_prediction_of_a_shipped_run_is_as_accurate_as_measured(rows, method):
    """A failure says a change moved the simulator, calibration or a shipped run: if it was meant (the
    examples re-recorded, the straggler modelled differently), measure again and update ACCURACY."""
    row, tol = rows[method], ACCURACY[method]
    assert abs(row["tokens_rel_err"]) <= tol["tokens"], (method, _errors(row))
    assert abs(row["sync_wait_rel_err"]) <= tol["wait"], (method, _errors(row))
    for r, rel in zip(("0", "1"), tol["steps"]):
        assert row["predicted_steps"][r] == pytest.approx(row["real_steps"][r], rel=rel), (method, _errors(row))


def test_the_readme_verdicts_of_the_shipped_rows(rows):
    """The README table's last column for these rows: every shipped run within the benchmark's tokens/s
    target, none within its waiting one (the over-predicted stop-check waits, for the reason above)."""
    verdicts = {m: (r["tokens_ok"], r["sync_wait_ok"]) for m, r in rows.items()}
    assert verdicts == {"sync": (True, False), "edit": (True, False), "aedit": (True, False)}
    # the straggler shows in the prediction as it did in the runs: sync in lockstep at every step, EDiT
    # within one step (each replica stops on its own clock after its last sync point, then the closing
    # sync), and A-EDiT's fast replica trains on (1.30× the slow one's steps measured, 1.50× predicted)
    assert len(set(rows["sync"]["predicted_steps"].values())) == 1
    assert max(rows["edit"]["predicted_steps"].values()) - min(rows["edit"]["predicted_steps"].values()) <= 1
    assert rows["aedit"]["predicted_steps"]["0"] > 1.2 * rows["aedit"]["predicted_steps"]["1"]
