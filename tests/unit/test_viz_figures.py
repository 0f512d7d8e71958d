"""Penalty, straggler, loss and memory figures, HTML/trace exports and the report, on a synthetic run."""

from __future__ import annotations

import json
import re

import pytest

from edit_lab.records import analysis as A
from edit_lab.records.run import Run
from edit_lab.viz import (
    capacity_figure,
    figures_html,
    loss_figure,
    memory_figure,
    penalty_figure,
    replica_pace_figure,
    straggler_figure,
    trace_dict,
    write_html,
    write_trace,
)

from . import viz_fake_run as F


@pytest.fixture(scope="module")
def fake(tmp_path_factory):
    return Run(F.make_fake_run(tmp_path_factory.mktemp("fake") / "run"))


@pytest.fixture(scope="module")
def no_penalty(tmp_path_factory):
    return Run(F.make_fake_run(tmp_path_factory.mktemp("plain") / "run", penalty=False))


def _role(fig, role):
    return [t for t in fig.data if t.meta and t.meta.get("role") == role]


# ---------------------------------------------------------------- penalty
def test_penalty_outliers_where_the_records_say(fake):
    fig = penalty_figure(fake, units="all")
    records = [p for p in fake.penalty if p["outlier"]]
    assert fig.layout.meta["outliers"] == len(records) == 1
    for panel in ("G", "z"):
        marks = [(x, t.meta["panel"]) for t in _role(fig, "outlier") if t.meta["panel"] == panel for x in t.x]
        assert [m[0] for m in marks] == [p["step"] for p in records]
    # the outlier column is the outlier's unit: its marker trace is on that unit's axes
    g_marks = [t for t in _role(fig, "outlier") if t.meta["panel"] == "G" and len(t.x)]
    assert len(g_marks) == 1 and g_marks[0].xaxis == "x2"  # unit 1 is the second column
    assert fig.layout.meta["units"] == [0, 1, 2] and fig.layout.meta["syncs"] == 2


def test_penalty_weights_stack_and_clip(fake):
    fig = penalty_figure(fake, units="all")
    weights = _role(fig, "weight")
    assert len(weights) == F.UNITS * F.R
    assert fig.layout.barmode == "stack"
    per_step: dict[tuple[str, int], float] = {}
    for t in weights:
        for x, y in zip(t.x, t.y):
            per_step[(t.xaxis, x)] = per_step.get((t.xaxis, x), 0.0) + y
    assert list(per_step.values()) == pytest.approx([1.0] * len(per_step))
    clips = _role(fig, "clip")
    assert [list(t.y) for t in clips] == [[1.0, 1.0], [1.0, 1.0], [0.8, 0.8]]
    # thresholds that were not finite are gaps, not zeros
    thr = _role(fig, "threshold")[0]
    assert thr.y[0] != thr.y[0] and thr.y[1] == 3.0
    # G spans 0.5 … 50: log axis on the outlier's unit only
    assert fig.layout.yaxis2.type == "log" and fig.layout.yaxis.type != "log"


def test_penalty_unit_choice_and_empty(fake, no_penalty):
    # by default the two most flagged units (issue 25: one message per figure): unit 1 holds the one outlier,
    # then the tie between units 0 and 2 (no flag) goes to the lower
    two = penalty_figure(fake)
    assert two.layout.meta["units"] == [0, 1] and two.layout.meta["outliers"] == 1
    assert "units 0, 1 of 3 (the most flagged; units='all' for every unit)" in two.layout.title.text
    assert "every unit, one column each" in penalty_figure(fake, units="all").layout.title.text
    one = penalty_figure(fake, units=[2])
    assert one.layout.meta["units"] == [2] and one.layout.meta["outliers"] == 0
    empty = penalty_figure(no_penalty)
    assert empty.layout.meta["empty"] and "no penalty records" in empty.layout.annotations[0].text


# ---------------------------------------------------------------- stragglers
def test_straggler_figure_numbers(fake, no_penalty):
    fig = straggler_figure([fake, no_penalty], labels=["a", "b"])
    assert fig.layout.meta["runs"] == ["a", "b"]
    bound = A.capacity_bound(fake)
    assert fig.layout.meta["capacity_bound"] == pytest.approx([bound, bound])
    cap = _role(fig, "capacity")[0]
    assert list(cap.y) == pytest.approx([bound, bound])
    table = A.replica_table(fake)
    # achieved = Σ over replicas of tokens up to each one's own last step
    own_end = sum(table.loc[r, "tokens"] / F.step_end(F.STEPS - 1, r) for r in range(F.R))
    assert list(_role(fig, "total")[0].y)[0] == pytest.approx(own_end)
    table = A.replica_table(fake)
    for t in _role(fig, "own_pace"):
        assert t.y[0] == pytest.approx(table.loc[t.meta["replica"], "own_tokens_per_s"])
    straggle = {t.meta["replica"]: t.y[0] for t in _role(fig, "straggle")}
    assert straggle == pytest.approx({0: 0.0, 1: F.STRAGGLE})
    rounds = _role(fig, "rounds")
    assert len(rounds) == 2 * F.R and list(rounds[0].y) == [1, 2, 1]
    for ax in (fig.layout.yaxis, fig.layout.yaxis2, fig.layout.yaxis3, fig.layout.yaxis4):
        assert ax.title.text  # units on every axis


def test_each_straggler_message_has_its_own_figure(fake, no_penalty):
    """who waits (colour = replica in both panels) and the capacity bound (one neutral bar per run, its share)."""
    from edit_lab.viz.colors import replica_color
    from edit_lab.viz.stragglers import ALL_REPLICAS

    table = A.replica_table(fake)
    pace = replica_pace_figure([fake, no_penalty], labels=["a", "b"])
    assert {t.meta["role"] for t in pace.data} == {"achieved", "own_pace", "blocked", "straggle"}
    for t in pace.data:
        color = t.marker.color
        assert color == replica_color(t.meta["replica"]), (t.meta, color)
    blocked = {t.meta["replica"]: t.y[0] for t in _role(pace, "blocked")}
    assert blocked == pytest.approx({r: table.loc[r, "blocked_s"] for r in range(F.R)})
    assert [a.text for a in pace.layout.annotations][1].startswith("seconds blocked")

    cap = capacity_figure([fake, no_penalty], labels=["a", "b"])
    assert {t.meta["role"] for t in cap.data} == {"total", "capacity"}
    total = _role(cap, "total")[0]
    bound = A.capacity_bound(fake)
    share = total.y[0] / bound
    assert total.marker.color == ALL_REPLICAS and total.meta["share"][0] == pytest.approx(share)
    assert total.text[0] == f"{share:.0%} of the bound" and 0 < share <= 1
    assert cap.layout.meta["achieved"] == pytest.approx(list(total.y))


def test_colour_means_replica_in_every_panel_of_the_full_figure(fake, no_penalty):
    from edit_lab.viz.colors import replica_color
    from edit_lab.viz.stragglers import ALL_REPLICAS, DASHES

    fig = straggler_figure([fake, no_penalty], labels=["a", "b"])
    for t in fig.data:
        role = t.meta["role"]
        color = t.line.color if role == "rounds" else t.marker.color
        if role == "total":
            assert color == ALL_REPLICAS
        elif role != "capacity":
            assert color == replica_color(t.meta["replica"]), (role, color)
    dashes = {t.meta["run"]: t.line.dash for t in _role(fig, "rounds")}
    assert dashes == {"a": DASHES[0], "b": DASHES[1]}  # a run is told apart by its dash, not its colour


# ---------------------------------------------------------------- losses
def test_loss_figure_overlays_runs(fake, no_penalty):
    fig = loss_figure([fake, no_penalty], labels=["a", "b"])
    train = _role(fig, "train")
    val = _role(fig, "val")
    assert len(train) == 4 and len(val) == 4  # two runs × (vs step, vs time)
    a_steps = [t for t in train if t.meta["run"] == "a" and t.xaxis == "x"][0]
    assert list(a_steps.x) == list(range(F.STEPS))
    assert list(a_steps.y) == pytest.approx([5.05 - 0.5 * s for s in range(F.STEPS)])  # mean over replicas
    a_time = [t for t in train if t.meta["run"] == "a" and t.xaxis == "x2"][0]
    assert list(a_time.x) == pytest.approx([F.step_end(s, 1) for s in range(F.STEPS)])
    a_val_time = [t for t in val if t.meta["run"] == "a" and t.xaxis == "x2"][0]
    assert list(a_val_time.y) == [4.2, 3.9] and a_val_time.x[0] == pytest.approx(1.7)
    assert train[0].line.color != [t for t in train if t.meta["run"] == "b"][0].line.color
    per_rep = loss_figure(fake, per_replica=True)
    assert len(_role(per_rep, "train")) == 2 * F.R
    assert "seconds" in fig.layout.xaxis2.title.text and "step" in fig.layout.xaxis.title.text


# ---------------------------------------------------------------- memory
def test_memory_figure_stacks_the_summary(fake, no_penalty):
    fig = memory_figure(fake)
    parts = {t.meta["role"]: list(t.y) for t in fig.data}
    assert parts == {"params": [1000] * 4, "optimizer": [2000] * 4, "method_state": [2000] * 4}
    assert fig.layout.barmode == "stack" and list(fig.data[0].x) == [f"rank {k}" for k in range(4)]
    assert "3.00 MiB" in fig.data[0].customdata[0][3]  # peak RSS in the hover
    two = memory_figure([fake, no_penalty], labels=["a", "b"])
    assert len(two.data[0].y) == 8 and list(two.data[0].x[0]) == ["a"] * 4 + ["b"] * 4


# ---------------------------------------------------------------- exports and report
def test_standalone_html_inlines_plotly_once(fake, tmp_path):
    figs = [penalty_figure(fake), memory_figure(fake)]
    path = write_html(figs, tmp_path / "figs.html", title="two <figures>", headings=["penalty", "memory"])
    text = path.read_text()
    assert text.startswith("<!DOCTYPE html>") and "two &lt;figures&gt;" in text
    assert text.count("Plotly.newPlot") == 2
    assert text.count("plotly.js v") == 1  # the library itself once, inline: opens offline
    assert "<h2>memory</h2>" in text
    assert figures_html(figs[0]).count("Plotly.newPlot") == 1


def test_trace_parses_one_process_per_rank(fake, tmp_path):
    path = write_trace(fake, tmp_path / "trace.json")
    trace = json.loads(path.read_text())
    spans = [e for e in trace["traceEvents"] if e["ph"] == "X"]
    assert len(spans) == len(fake.events)
    assert {e["pid"] for e in spans} == {0, 1, 2, 3}
    names = [e for e in trace["traceEvents"] if e["ph"] == "M" and e["name"] == "process_name"]
    assert len(names) == 4
    assert len([e for e in trace_dict(fake, steps=0)["traceEvents"] if e["ph"] == "X"]) == \
        sum(1 for e in fake.events if e["step"] == 0)


def test_report_from_the_cli(fake, no_penalty, tmp_path):
    from edit_lab.__main__ import main

    out = tmp_path / "r.html"
    assert main(["report", str(fake.path), "--output", str(out)]) == 0
    text = out.read_text()
    for heading in ("Key numbers", "Per replica", "Timeline of steps 2–3", "Loss", "Stragglers", "Penalty decisions",
                    "Memory per rank"):
        assert heading in text, heading
    assert text.count("plotly.js v") == 1 and text.count("Plotly.newPlot") == 5
    from edit_lab.viz.report import write_report

    default = write_report(no_penalty.path)
    assert default == no_penalty.path / "report.html"
    assert "Penalty decisions" not in default.read_text()


# ---------------------------------------------------------------- readable in a notebook (layout)
def _figures(fake, no_penalty):
    from edit_lab.viz import timeline_figure

    return {"penalty": penalty_figure(fake), "stragglers": straggler_figure([fake, no_penalty]),
            "who waits": replica_pace_figure([fake, no_penalty]), "capacity": capacity_figure([fake, no_penalty]),
            "loss": loss_figure([fake, no_penalty]), "timeline": timeline_figure(fake, steps=(2, 3)),
            "empty": penalty_figure(no_penalty)}


def test_figures_take_the_notebooks_width_and_keep_their_legend_below(fake, no_penalty):
    """No fixed width (the notebook decides), a horizontal legend under the plot, titles wrapped to fit ~800 px."""
    from edit_lab.viz.layout import SUBTITLE_CHARS, TITLE_CHARS

    for name, fig in _figures(fake, no_penalty).items():
        assert fig.layout.width is None and fig.layout.autosize is True, name
        if name != "empty":
            lg = fig.layout.legend
            assert lg.orientation == "h" and lg.yref == "container" and lg.y == 0 and lg.yanchor == "bottom", name
        for line in fig.layout.title.text.split("<br>"):
            visible = re.sub(r"<[^>]+>", "", line)
            assert len(visible) <= (SUBTITLE_CHARS if "<sup>" in line else TITLE_CHARS), (name, line)


def test_straggler_figure_keeps_run_names_short_and_upright(fake, no_penalty):
    fig = straggler_figure([fake, no_penalty], labels=["edit 2×2, T_sync 0.15 s, slow ×2", "sync 2×2, slow ×2"])
    for ax in (fig.layout.xaxis, fig.layout.xaxis2, fig.layout.xaxis3):
        assert ax.tickangle == 0 and list(ax.tickvals) == fig.layout.meta["runs"]
        assert list(ax.ticktext) == ["edit 2×2<br>T_sync 0.15 s<br>slow ×2", "sync 2×2<br>slow ×2"]
    titles = [a.text for a in fig.layout.annotations]
    assert len(titles) == 4 and max(len(t) for t in titles) <= 40  # each has half a laptop's notebook


def test_wrap_keeps_words_and_tags():
    from edit_lab.viz.layout import tick_label, title_text, wrap

    assert wrap("aa bb cc dd", 5) == "aa bb<br>cc dd"
    assert wrap("<b>rank 0</b> (replica 0)", 8) == "<b>rank 0</b><br>(replica<br>0)"  # tags do not count
    assert wrap("averyveryverylongword x", 4) == "averyveryverylongword<br>x"
    assert title_text("head", "one two") == "head<br><sup>one two</sup>"
    assert tick_label("aedit 2×2, T_sync 0.15 s, slow ×2 [01-aedit]") == \
        "aedit 2×2<br>T_sync 0.15 s<br>slow ×2<br>[01-aedit]"


def test_panels_show_figures_at_the_notebooks_width(fake, no_penalty):
    """The panels' figures are FigurePanes (JupyterLab's own plotly renderer: redrawn at their container's width),
    and no control is wider than a laptop's notebook column."""
    from edit_lab.ui.lab import FIGURES, FigurePane, StragglerLab, TimelineExplorer

    pane = FigurePane(loss_figure(fake))
    data = pane.outputs[0]["data"]["application/vnd.plotly.v1+json"]
    assert data["layout"]["autosize"] is True and "width" not in data["layout"]
    assert len(pane.data) == len(pane.figure.data) > 0 and pane.layout.width == "100%"
    lab = StragglerLab(initial=[fake, no_penalty], launcher=lambda cfg: None)
    assert all(isinstance(lab.figure_widgets[n], FigurePane) for n in FIGURES)
    assert lab.figure_widgets["stragglers"].figure is lab.figures["stragglers"]
    for name, ctl in lab.controls().items():
        assert int(ctl.layout.width.rstrip("px")) <= 400, name
    ex = TimelineExplorer(fake, steps=(2, 3))
    assert isinstance(ex.fig_widget, FigurePane) and ex.fig_widget.figure is ex.figure


def test_short_run_labels_number_twins_instead_of_naming_directories(fake, no_penalty):
    from edit_lab.viz.layout import short_run_labels, tick_label

    same = A.run_label(fake)
    assert A.run_label(no_penalty) == same  # two runs of the same settings (their directories differ)
    assert short_run_labels([fake, no_penalty]) == [f"{same} #1", f"{same} #2"]
    assert short_run_labels([fake]) == [same]
    assert tick_label("sync 2×2 [01-sync-12345678]") == "sync 2×2<br>[01-sync-12345…"  # the hover has it all


def test_the_budget_loss_figure_keeps_its_corner_ticks_apart():
    """Second 0 on the x axis and the lowest loss on the y axis meet in the corner: the browser's
    readability check found them overlapping by 3 px before the axes got their standoff."""
    from edit_lab.records.examples import example_runs
    from edit_lab.viz.losses import budget_loss_figure

    fig = budget_loss_figure(example_runs())
    assert fig.layout.xaxis.ticklabelstandoff >= 4 and fig.layout.yaxis.ticklabelstandoff >= 4


def test_the_time_axis_says_whose_seconds_it_counts(tmp_path):
    """A virtual run's seconds are the cost model's: its loss figures say so on the axis (issue 24, item 7)."""
    import json
    import shutil

    from edit_lab import Run
    from edit_lab.records.examples import example_runs
    from edit_lab.viz.losses import budget_loss_figure, loss_figure

    real = example_runs()[0]
    copy = tmp_path / "virtual-copy"
    shutil.copytree(real.path, copy)
    cfg = json.loads((copy / "config.json").read_text())
    cfg["clock"] = "virtual"
    (copy / "config.json").write_text(json.dumps(cfg))
    virtual = Run(copy)
    assert virtual.config.clock.kind == "virtual" and real.config.clock.kind == "wall"
    def time_axis(fig) -> str:
        (title,) = [ax.title.text for ax in fig.select_xaxes() if "seconds" in (ax.title.text or "")]
        return title

    for figure in (budget_loss_figure, loss_figure):  # the example has a time budget: loss_figure hands it on
        assert time_axis(figure([real])) == "seconds since the start"
        assert time_axis(figure([virtual])).startswith("virtual seconds")
        assert "each run's own clock" in time_axis(figure([real, virtual]))
    no_budget = tmp_path / "no-budget"
    shutil.copytree(copy, no_budget)
    cfg["time_budget"] = None
    (no_budget / "config.json").write_text(json.dumps(cfg))
    fig = loss_figure([Run(no_budget)])  # the two-panel figure: steps, and seconds
    assert time_axis(fig).startswith("virtual seconds") and fig.layout.annotations[1].text == "against virtual time"


def test_where_a_step_went_per_replica(fake):
    """The step-split figure's numbers on the hand-built run (tests/unit/viz_fake_run.py's durations)."""
    from edit_lab.viz.step_split import step_split_figure, step_split_table

    ms = lambda s: pytest.approx(1e3 * s)  # noqa: E731
    sync = step_split_table(fake, 3).set_index("replica")
    for rep in (0, 1):  # a sync step: decisions and three unit syncs, each sync_reduce exposed SR_EXP
        row = sync.loc[rep]
        assert row["compute_ms"] == ms(F.UNITS * (F.FWD + F.BWD) + F.OPT + F.UNITS * F.OUTER)
        assert row["blocked_ms"] == ms(F.DEC + F.UNITS * F.SR_EXP) and row["straggle_ms"] == 0
        assert row["step_ms"] == pytest.approx(row["compute_ms"] + row["blocked_ms"] + row["rest_ms"])
    slow = step_split_table(fake, 2).set_index("replica")
    assert slow.loc[1, "straggle_ms"] == ms(F.STRAGGLE) and slow.loc[0, "straggle_ms"] == 0
    assert slow.loc[0, "blocked_ms"] == 0  # no sync-group collective at step 2
    fig = step_split_figure({"A": fake, "B": fake}, 3)
    assert fig.layout.meta["bars"] == ["A · replica 0", "A · replica 1", "B · replica 0", "B · replica 1"]
    blocked = next(t for t in fig.data if t.meta["part"] == "blocked_ms")
    assert list(blocked.x) == [ms(F.DEC + F.UNITS * F.SR_EXP)] * 4
    assert len({t.marker.color for t in fig.data}) == 4  # one colour per meaning
