"""Previews against real runs, without launching one: the runs shipped in edit_lab/examples.

The three shipped runs (sync, EDiT and A-EDiT with a 2× straggler, real runs recorded on an idle
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
# sync            −1.7 %  (5 %)   +9.5 %  (15 %)                  −2.4 %, −2.4 % (5 %)
# edit (calib.)   +5.5 %  (8 %)   +8.9 %  (15 %)                  +3.7 %, +3.7 % (5 %)
# aedit           +13.6 % (18 %)  +29.5 % (40 %)                  +2.5 % (5 %), +36 % (45 %)
# A-EDiT's slow replica is the simulator's known miss (README, "Previews against real runs"): the
# simulator gives every rank the compute speed of the calibration run, where EDiT's fast replica lent
# its cores to the straggler while it waited; under A-EDiT nobody waits, so the real straggler is slower.
ACCURACY = {
    "sync": {"tokens": 0.05, "wait": 0.15, "steps": (0.05, 0.05)},
    "edit": {"tokens": 0.08, "wait": 0.15, "steps": (0.05, 0.05)},
    "aedit": {"tokens": 0.18, "wait": 0.40, "steps": (0.05, 0.45)},
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
    """The README table's last column for these rows: sync and EDiT within both of the benchmark's targets,
    A-EDiT within the tokens/s one only (its waiting misses, for the reason above)."""
    verdicts = {m: (r["tokens_ok"], r["sync_wait_ok"]) for m, r in rows.items()}
    assert verdicts == {"sync": (True, True), "edit": (True, True), "aedit": (True, False)}
    # the straggler shows in the prediction as it did in the runs: lockstep for sync and EDiT, and A-EDiT's
    # fast replica trains on (the real ratio is 2.0, the predicted one 1.5, the miss above)
    for m in ("sync", "edit"):
        assert len(set(rows[m]["predicted_steps"].values())) == 1
    assert rows["aedit"]["predicted_steps"]["0"] > 1.4 * rows["aedit"]["predicted_steps"]["1"]
