"""The notebooks' small panels (edit_course/panels.py) and the prefetch figures (edit_course/figures/prefetch.py).

The panels are built over the example runs shipped with the package; `run_for` looks runs up in a
dict, so no test launches a run (launching is the notebook's `run_for`, not the panel's)."""

from __future__ import annotations

from pathlib import Path

import pandas as pd
import pytest

from edit_course.figures.prefetch import prefetch_sweep_figure, sync_split_figure
from edit_course.panels import (
    SWITCHES,
    PenaltySwitchPanel,
    PrefetchExplorer,
    switches,
    switches_config,
    switches_name,
    sync_step_note,
)
from edit_lab.config import RunConfig
from edit_lab.records.analysis import comm_totals, penalty_table, sync_window
from edit_lab.records.examples import example_runs


@pytest.fixture(scope="module")
def examples():
    runs = {r.path.name: r for r in example_runs()}
    if "edit-straggler" not in runs:
        pytest.skip("the example runs were never made in this checkout")
    return runs


# ---------------------------------------------------------------- the penalty's switches
def test_switch_names():
    assert switches_name((False, False, False)) == "penalty off"
    assert switches_name((True, True, True)) == "penalty on (all)"
    assert switches_name((True, False, True)) == "only anomaly + clip"
    assert switches_name((False, True, False)) == "only weighting"


def test_switches_config_sets_the_defences_and_one_directory_per_combination():
    base = RunConfig(method="edit", shards=2, replicas=2, steps=18, spike_replica=1, spike_step=13, spike_scale=10.0)
    cfg = switches_config(base, (True, False, True), Path("runs") / "05_penalty")
    assert (cfg.penalty.anomaly, cfg.penalty.weighting, cfg.penalty.clip) == (True, False, True)
    assert cfg.runtime.out == str(Path("runs") / "05_penalty" / "spike-only-anomaly--clip")  # the notebook's run directories
    assert (cfg.trouble.spike_replica, cfg.trouble.spike_step, cfg.trouble.spike_scale, cfg.steps) == (1, 13, 10.0, 18)  # the rest: base's
    assert switches_config(base, (True, True, True), "o").runtime.out == str(Path("o") / "spike-penalty-on-all")
    assert switches_config(base, (False, False, False), "o", prefix="bad").runtime.out == str(Path("o") / "bad-penalty-off")
    outs = {switches_config(base, (a, w, c), "o").runtime.out for a in (0, 1) for w in (0, 1) for c in (0, 1)}
    assert len(outs) == 8
    assert switches(False, True, False) == dict(penalty_anomaly=False, penalty_weighting=True, penalty_clip=False)


def _penalty_panel(examples, runs):
    asked = []

    def run_for(key):
        asked.append(key)
        runs[key] = examples["edit-straggler"]  # what a launch would have returned, without launching
        return runs[key]

    n_units = int(penalty_table(examples["edit-straggler"])["unit"].max()) + 1
    return PenaltySwitchPanel(run_for, runs, reference=examples["sync-straggler"], n_units=n_units), asked


def test_penalty_panel_controls_and_a_combination_not_run_yet(examples):
    panel, asked = _penalty_panel(examples, {})
    assert [b.description for b in panel.boxes.values()] == [f"penalty_{s}" for s in SWITCHES]
    assert all(b.value for b in panel.boxes.values()) and panel.key() == (True, True, True)
    n_units = int(penalty_table(examples["edit-straggler"])["unit"].max()) + 1
    assert panel.unit_pick.options == (("every unit", -1), *((f"unit {u}", u) for u in range(n_units)))
    assert panel.unit_pick.value == 0  # one unit (four subplots) until "every unit" is picked
    assert panel.button.description == "Run this combination" and not panel.button.disabled
    assert "penalty on (all)</b> has not been run yet" in panel.status.value
    assert panel.figures == {} and asked == []  # nothing drawn, nothing launched by looking


def test_penalty_panel_runs_the_chosen_combination_and_draws_it(examples):
    runs = {(True, True, True): examples["edit-straggler"]}
    panel, asked = _penalty_panel(examples, runs)
    assert panel.button.disabled  # this combination exists
    assert panel.figures["penalty"].layout.meta["units"] == [0]
    assert panel.figures["loss"].layout.yaxis.type == "log"
    panel.set(unit=-1)
    full = panel.figures["penalty"]
    assert full.layout.meta["units"] == sorted(set(penalty_table(examples["edit-straggler"])["unit"]))
    assert [t.name for t in panel.figures["loss"].data if t.showlegend is not False][:2] == \
        ["penalty on (all)", "penalty off"]
    panel.set(unit=1)
    assert panel.figures["penalty"].layout.meta["units"] == [1]
    panel.set(weighting=False)
    assert panel.key() == (True, False, True) and not panel.button.disabled and asked == []
    panel.click()
    assert asked == [(True, False, True)] and panel.error is None and panel.button.disabled
    assert panel.figures["penalty"].layout.title.text.startswith("Penalty decisions: only anomaly + clip")
    final = examples["edit-straggler"].summary["final_val_loss"]
    assert f"only anomaly + clip</b>: final validation loss {final:.3f}" in panel.status.value
    with pytest.raises(KeyError):
        panel.set(momentum=True)


def test_penalty_panel_shows_a_failed_launch(examples):
    def run_for(key):
        raise RuntimeError("rank 1 <exited>")

    panel = PenaltySwitchPanel(run_for, {}, reference=examples["sync-straggler"], n_units=3)
    panel.click()
    assert isinstance(panel.error, RuntimeError) and "failed" in panel.status.value
    assert "&lt;exited&gt;" in panel.status.value and not panel.button.disabled


# ---------------------------------------------------------------- the slow-link slider
def test_prefetch_explorer_picks_the_run_of_the_controls(examples):
    asked = []
    by_link = {(5.0, True): examples["edit-straggler"], (5.0, False): examples["aedit-straggler"],
               (50.0, True): examples["sync-straggler"]}

    def run_for(mbps, prefetch):
        asked.append((mbps, prefetch))
        return by_link[(mbps, prefetch)]

    ex = PrefetchExplorer(run_for, bandwidths=[50.0, 5.0, 50.0], value=5.0)
    assert ex.bandwidth.options == (5.0, 50.0) and ex.bandwidth.value == 5.0
    assert ex.prefetch.options == (("prefetch on", True), ("prefetch off", False)) and ex.prefetch.value is True
    assert asked == [(5.0, True)] and ex.run is examples["edit-straggler"]
    assert ex.figure is ex.pane.figure and len(ex.figure.data) > 0
    lo, hi = sync_window(ex.run)
    assert ex.numbers.value == sync_step_note(ex.run, 5.0, True, hi)
    ex.set(prefetch=False)
    assert asked[-1] == (5.0, False) and ex.run is examples["aedit-straggler"]
    ex.set(prefetch=True).set(bandwidth=50.0)  # each control redraws: (50, off) was never asked for
    assert asked[-2:] == [(5.0, True), (50.0, True)] and "<b>50 MB/s, prefetch on</b>" in ex.numbers.value


def test_sync_step_note_numbers(examples):
    run = examples["edit-straggler"]
    step = sync_window(run)[1]
    t = comm_totals(run, steps=step)
    note = sync_step_note(run, 5.0, False, step)
    assert note.startswith(f"<b>5 MB/s, prefetch off</b>: at sync step {step}, communication in flight "
                           f"{t['total_s'] * 1e3:.1f} ms")
    assert f"hidden {t['hidden_s'] * 1e3:.1f} ms, exposed {t['exposed_s'] * 1e3:.1f} ms" in note
    assert f"run wall time {run.summary['wall_s']:.2f} s" in note


# ---------------------------------------------------------------- the prefetch figures
def test_sync_split_figure_stacks_the_three_parts():
    bars = {"prefetch on": {"hidden": 3.0, "exposed": 1.0, "other": 0.5, "comm": 4.5},
            "prefetch off": {"hidden": 0.0, "exposed": 4.0, "other": 0.25, "comm": 4.25}}
    fig = sync_split_figure(bars, 5.0, 1.0)
    assert [t.name for t in fig.data] == ["hidden under compute", "exposed: waited on it", "waiting on another transfer"]
    assert all(list(t.x) == ["prefetch on", "prefetch off"] for t in fig.data)
    assert [list(t.y) for t in fig.data] == [[3.0, 0.0], [1.0, 4.0], [0.5, 0.25]]
    assert fig.layout.barmode == "stack" and "5 MB/s + 1 ms" in fig.layout.title.text


def test_prefetch_sweep_figure_lines():
    sweep = pd.DataFrame([
        {"MB/s": 50.0, "prefetch": False, "link ms per sync": 2.0, "exposed ms per sync": 2.5},
        {"MB/s": 5.0, "prefetch": True, "link ms per sync": 20.0, "exposed ms per sync": 12.0},
        {"MB/s": 5.0, "prefetch": False, "link ms per sync": 20.0, "exposed ms per sync": 21.0},
        {"MB/s": 50.0, "prefetch": True, "link ms per sync": 2.0, "exposed ms per sync": 1.0},
    ])
    fig = prefetch_sweep_figure(sweep, latency_ms=1.0)
    on, off, link = fig.data
    assert on.name == "exposed, prefetch on" and list(on.x) == [5.0, 50.0] and list(on.y) == [12.0, 1.0]
    assert off.name == "exposed, prefetch off" and list(off.x) == [5.0, 50.0] and list(off.y) == [21.0, 2.5]
    assert link.line.dash == "dash" and list(link.y) == [20.0, 2.0]
    assert fig.layout.xaxis.type == "log" and fig.layout.title.text == "Exposed sync time (latency 1 ms)"
    one = prefetch_sweep_figure(sweep[sweep["MB/s"] == 5.0], latency_ms=1.0)  # the notebook's small test sweep
    assert [len(t.x) for t in one.data] == [1, 1, 1]
    with pytest.raises(ValueError, match="link ms per sync"):
        prefetch_sweep_figure(sweep.drop(columns="link ms per sync"), latency_ms=1.0)


# ---------------------------------------------------------------- the τ slider, the calculator, the cluster plan
def test_tau_explorer_shows_the_chosen_run_against_sync(examples):
    from edit_course.panels import TauExplorer, tau_note

    by_tau = {2: examples["edit-straggler"], 10: examples["aedit-straggler"]}
    sweep = pd.DataFrame([
        {"method": "sync", "tau": 1, "syncs": 0, "local_bytes_per_step": 800.0, "blocked_s": 4.0, "wall_s": 9.0},
        {"method": "diloco", "tau": 2, "syncs": 5, "local_bytes_per_step": 400.0, "blocked_s": 2.0, "wall_s": 7.0},
        {"method": "diloco", "tau": 10, "syncs": 1, "local_bytes_per_step": 80.0, "blocked_s": 0.4, "wall_s": 6.0}])
    ex = TauExplorer(by_tau, sweep, reference=examples["sync-straggler"], value=10)
    assert ex.tau.options == (2, 10) and ex.tau.value == 10
    assert ex.note.value == tau_note(sweep.iloc[2], sweep.iloc[0])
    assert ex.note.value.startswith("diloco τ = 10: 1 syncs, 80 bytes/step after warm-up (sync: 800)")
    assert "blocked on the link 0.40 s (sync: 4.00 s)" in ex.note.value
    names = {t.name for t in ex.figure.data}
    assert "diloco τ=10, slow link" in names and "sync, slow link" in names
    ex.set(2)
    assert "diloco τ=2, slow link" in {t.name for t in ex.pane.figure.data} and "τ = 2: 5 syncs" in ex.note.value


def test_outer_state_calculator_uses_the_model_size():
    from edit_course.panels import OuterStateCalculator, outer_state_note
    from edit_lab.core.model import SIZES, get_size

    calc = OuterStateCalculator(model="base100m", shards=8)
    assert list(calc.model.options) == list(SIZES) and calc.model.value == "base100m"
    assert (calc.shards.value, calc.shards.min, calc.shards.max) == (8, 1, 64)
    p = get_size("base100m").num_params()
    assert calc.note.value == outer_state_note(p, 8)
    assert list(calc.figure.data[2].y) == [8 * p / 8, 8 * p]
    calc.set(model="nano", shards=2)
    n = get_size("nano").num_params()
    assert f"EDiT {8 * n / 2 / 2**20:,.1f} MiB, unsharded {8 * n / 2**20:,.1f} MiB" in calc.note.value
    assert calc.pane.figure.layout.title.text == f"nano (P = {n:,}) on S = 2: bytes per rank"


def test_cluster_planner_writes_the_commands_and_the_machines():
    from edit_course.panels import ClusterPlanner, cluster_plan

    planner = ClusterPlanner()
    assert (planner.machines.value, planner.gpus.value, planner.model.value) == (4, 8, "base100m")
    assert planner.plan.value == cluster_plan(4, 8, "base100m")
    planner.set(machines=3, gpus=2, model="nano")
    text = planner.plan.value
    assert "world size 3·2 = 6 ranks, model nano" in text
    assert "torchrun --nnodes 3 --nproc-per-node 2" in text and "--shards 2 --replicas 3" in text
    assert "4…5" in text and "[0, 2, 4]" in text  # machine 2 holds ranks 4 and 5; local rank 0's sync group
    body = lambda html: html[html.index("<tbody>"):]  # noqa: E731
    assert body(text).count("</tr>") == 3  # one row per machine (up to 6)
    assert body(cluster_plan(16, 8, "nano")).count("</tr>") == 6


# ---------------------------------------------------------------- the StragglerLab's A-EDiT budget
def test_an_aedit_run_from_the_straggler_lab_trains_for_a_time_budget():
    """With a step count A-EDiT's fast replica finishes early and idles (what the panel showed before): choosing
    A-EDiT with no budget sets one, the slider shows it, the run gets it; a chosen budget and the other methods'
    step counts are kept."""
    from edit_lab.config import AEDIT_PANEL_BUDGET_S, default_lab_config, panel_time_budget
    from edit_lab.ui.lab import StragglerLab

    assert panel_time_budget("aedit", 0.0) == AEDIT_PANEL_BUDGET_S > 0
    assert panel_time_budget("aedit", 3.0) == 3.0 and panel_time_budget("edit", 0.0) == 0.0
    lab = StragglerLab(initial=[], launcher=lambda cfg: None)  # sync, counting steps
    assert lab.config().time_budget == 0.0
    lab.set(method="aedit")
    assert lab.time_budget.value == AEDIT_PANEL_BUDGET_S and lab.config().time_budget == AEDIT_PANEL_BUDGET_S
    lab.set(method="edit")  # the same budget: two presses compare the methods in equal seconds
    assert lab.config().time_budget == AEDIT_PANEL_BUDGET_S
    started = StragglerLab(base=default_lab_config().replace(method="aedit"), initial=[], launcher=lambda cfg: None)
    assert started.config().time_budget == AEDIT_PANEL_BUDGET_S
    chosen = StragglerLab(base=default_lab_config().replace(method="aedit", time_budget=4.0), initial=[],
                          launcher=lambda cfg: None)
    assert chosen.config().time_budget == 4.0
