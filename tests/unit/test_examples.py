"""The example runs shipped with the package: real, loadable, drawable, and free of machine paths."""

from __future__ import annotations

import json
import statistics

from edit_lab.records.analysis import replica_table
from edit_lab.records.examples import HERE, NAMES, example_runs
from edit_lab.viz import straggler_figure, timeline_figure


def test_every_example_run_is_shipped_and_loads():
    runs = example_runs()
    assert [r.config.method for r in runs] == [n.split("-")[0] for n in NAMES]
    for run in runs:
        assert run.config.stragglers.replicas == (1,) and run.config.stragglers.factor == 2.0
        assert len(run.events) > 100 and run.val_losses() and run.summary["tokens"] > 0
        slow, fast = replica_table(run).set_index("replica").loc[[1, 0], "straggle_s"]
        assert slow > 0 and fast == 0  # the straggler really straggled
        assert timeline_figure(run).data and straggler_figure([run]).data


def test_no_machine_paths_in_the_examples():
    for path in HERE.glob("*/config.json"):
        out = json.loads(path.read_text())["out"]
        assert out.startswith("edit_lab/records/examples/"), out


def test_panel_draws_examples_before_any_launch():
    from edit_lab.ui.lab import StragglerLab

    lab = StragglerLab()
    assert len(lab.history) == len(NAMES)
    assert lab.figures["stragglers"].data  # drawn from the shipped runs, nothing launched


def test_examples_train_for_the_same_time_and_aedit_keeps_its_fast_replica_busy():
    runs = {r.config.method: r for r in example_runs()}
    for run in runs.values():
        assert run.config.time_budget > 0 and run.summary["train_end_s"] >= run.config.time_budget
        assert not any(p["outlier"] for p in run.penalty)  # no healthy replica flagged (there is no anomaly)
    steps = {m: [v["steps"] for _, v in sorted(r.summary["per_replica"].items())] for m, r in runs.items()}
    # the fast replica trains on: as many more steps as its steps are shorter, less its meetings. A 2×
    # straggler computes twice as long, but its collectives and its step's other work are not stretched,
    # so its steps are about 1.4× the fast ones here (fewer than 2×: stragglers.py)
    slow_dt, fast_dt = (statistics.mean(m["dt"] for m in runs["aedit"].metrics
                                        if m["kind"] == "train" and m["replica"] == r) for r in (1, 0))
    assert steps["aedit"][0] >= 1.2 * steps["aedit"][1]
    assert steps["aedit"][0] / steps["aedit"][1] >= 0.85 * slow_dt / fast_dt
    assert steps["sync"][0] == steps["sync"][1]  # held to the slow one's pace at every step
