"""Previews against real runs, without launching one: the runs shipped in edit_lab/records/examples.

The three shipped runs (sync, EDiT and A-EDiT with a 2× straggler, real runs recorded on a quiet
2-core machine) are files, so predicting them from the EDiT run's calibration gives the same numbers
on every machine, busy or idle: `benchmarks/preview_vs_real.py`'s `example_rows`, the last three rows
of docs/benchmarks.md's "Previews against real runs". The tolerances below are the simulator's accuracy on
these runs, with a margin, not a target: a change to the simulator or to calibration that moves a
prediction by more shows here. The comparison with runs made on this machine (every method, 15 %
tokens/s, 25 % waiting) is the benchmark's; it needs an idle machine, and it takes minutes.
"""

from __future__ import annotations

import pytest

from benchmarks.preview_vs_real import example_rows

# Relative errors (predicted / measured − 1) measured on the shipped runs, then the tolerance:
#                 tokens/s        waiting (sync_wait_s, summed)   steps per replica (0, 1)
# sync            +21.2 % (25 %)  +1.8 %  (20 %)                  +21.7 %, +21.7 % (25 %)
# edit (calib.)   −1.8 %  (5 %)   +28.6 % (45 %)                  −1.7 %, −1.7 % (5 %)
# aedit           +18.4 % (22 %)  +59.1 % (70 %)                  +7.1 % (10 %), +33.3 % (40 %)
# Two reasons, both measured. (1) The three runs were recorded one after the other, and this machine's
# speed drifts by more than the model's error (the benchmark's calibration run, made again a minute
# later, differed by −12.8 %): the sync and A-EDiT runs computed 25.4 and 25.9 ms of own compute a step
# on replica 0 against 22.4 ms in the EDiT run that calibrates, so they are over-predicted by about as
# much. (2) The simulator gives both replicas the same compute speed, but on 2 cores shared by 4 ranks
# the fast replica's ranks compute more slowly than the straggler's (EDiT run: 22.4 against 18.7 ms a
# step), the straggler's spinning ranks holding the cores: the fast replica is less ahead than
# simulated and waits less at the time budget's stop checks, where most of the waiting is. Since
# issue 23 the straggler stretches only its own compute, so none of that hides in its pause. A-EDiT's
# slow replica (+33 % steps) combines both. (3) Since issue 48 each unit's gradient all-reduce starts during
# the backward (sync, and every method's warm-up), and the simulator predicts that schedule; the shipped runs
# were recorded before it, with every all-reduce after the backward: sync's prediction went from +16.2 % to
# +21.2 % tokens/s (and from +14.8 % to +1.8 % waiting), until the examples are recorded again.
ACCURACY = {
    "sync": {"tokens": 0.25, "wait": 0.20, "steps": (0.25, 0.25)},
    "edit": {"tokens": 0.05, "wait": 0.45, "steps": (0.05, 0.05)},
    "aedit": {"tokens": 0.22, "wait": 0.70, "steps": (0.10, 0.40)},
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
    """The benchmarks page's table's last column for these rows (the benchmark's targets: tokens/s within 15 %,
    waiting within 25 %): sync within the waiting one only, EDiT within the tokens/s one only, A-EDiT
    within neither, for the reasons above."""
    verdicts = {m: (r["tokens_ok"], r["sync_wait_ok"]) for m, r in rows.items()}
    assert verdicts == {"sync": (False, True), "edit": (True, False), "aedit": (False, False)}
    # the straggler shows in the prediction as it did in the runs: sync in lockstep at every step, EDiT
    # within one step (each replica stops on its own clock after its last sync point, then the closing
    # sync), and A-EDiT's fast replica trains on (1.33× the slow one's steps measured, 1.07× predicted)
    assert len(set(rows["sync"]["predicted_steps"].values())) == 1
    assert max(rows["edit"]["predicted_steps"].values()) - min(rows["edit"]["predicted_steps"].values()) <= 1
    assert rows["aedit"]["predicted_steps"]["0"] > rows["aedit"]["predicted_steps"]["1"]
