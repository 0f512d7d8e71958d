"""The exact values under a chart (edit_course/figures/values.py), on hand-built figures whose points are known."""

from __future__ import annotations

import plotly.graph_objects as go
from plotly.subplots import make_subplots

from edit_course.figures.values import exact_values, figure_values


def test_one_panel_names_its_columns_by_the_axes():
    fig = go.Figure([go.Scatter(x=[0, 10], y=[4.0, 3.5], name="edit"), go.Bar(x=["a"], y=[2.0], name="sync")])
    fig.update_layout(xaxis_title="step", yaxis_title="validation loss")
    t = figure_values(fig)
    assert list(t.columns) == ["trace", "step", "validation loss"]
    assert t.values.tolist() == [["edit", 0, 4.0], ["edit", 10, 3.5], ["sync", "a", 2.0]]


def test_several_panels_keep_each_points_panel_and_a_nameless_trace_its_role():
    fig = make_subplots(rows=1, cols=2)
    fig.add_trace(go.Bar(x=["sync"], y=[7000.0], meta={"role": "own_pace", "replica": 1}), row=1, col=1)
    fig.add_trace(go.Bar(x=["sync"], y=[4.5], name="replica 0"), row=1, col=2)
    fig.update_yaxes(title_text="tokens/s", row=1, col=1)
    fig.update_yaxes(title_text="seconds", row=1, col=2)
    t = figure_values(fig)
    assert t.values.tolist() == [["tokens/s", "own_pace 1", "sync", 7000.0], ["seconds", "replica 0", "sync", 4.5]]


def test_many_points_are_cut_and_the_cut_is_said():
    fig = go.Figure([go.Scatter(x=list(range(500)), y=[1.0] * 500, name="long")])
    t = figure_values(fig, max_rows=400)
    assert len(t) == 400 and t.attrs["cut"]
    assert "<details><summary>Exact values</summary>" in exact_values(t).data


def test_panels_that_differ_by_their_x_axis_are_named_by_it():
    """09's loss against time and against MB: one y title, two x titles; each point says which panel it is in."""
    fig = make_subplots(rows=1, cols=2)
    fig.add_trace(go.Scatter(x=[0.5], y=[3.9], name="edit"), row=1, col=1)
    fig.add_trace(go.Scatter(x=[0.25], y=[3.9], name="edit"), row=1, col=2)
    fig.update_xaxes(title_text="virtual seconds", row=1, col=1)
    fig.update_xaxes(title_text="MB sent", row=1, col=2)
    fig.update_yaxes(title_text="validation loss", row=1, col=1)
    assert figure_values(fig)["panel"].tolist() == ["virtual seconds", "MB sent"]


def test_a_multicategory_axis_gives_one_label_per_point_and_a_based_bar_its_span():
    import plotly.graph_objects as go

    from edit_course.figures.values import figure_values

    fig = go.Figure(go.Bar(x=[["S=1", "S=1", "S=2"], ["rank 0", "rank 1", "rank 0"]], y=[10.0, 10.0, 5.0],
                           name="shards"))
    fig.update_layout(xaxis_title="run / rank", yaxis_title="bytes")
    t = figure_values(fig)
    assert t["run / rank"].tolist() == ["S=1 · rank 0", "S=1 · rank 1", "S=2 · rank 0"]
    assert t["bytes"].tolist() == [10.0, 10.0, 5.0]
    spans = go.Figure(go.Bar(orientation="h", base=[0, 4104], x=[4104, 3152], y=["unit 0", "unit 1"], name="shard 0"))
    spans.update_layout(xaxis_title="position", yaxis_title="unit")
    assert figure_values(spans)["position"].tolist() == ["0–4104", "4104–7256"]


def test_span_totals_count_each_instant_once_per_panel_row_and_kind():
    """A timeline's spans summed: two overlapping spans of one kind cover their union; a repeated tick label is
    prefixed with the row above it that differs; markers are left out; panels named in the order of the axes."""
    from edit_course.figures.values import span_totals

    fig = make_subplots(rows=2, cols=1)
    ticks = dict(tickvals=[0.0, 0.4, 1.0, 1.4],
                 ticktext=["<b>replica 0</b> · compute", "comm", "<b>replica 1</b> · compute", "comm"])
    for row in (1, 2):
        fig.add_trace(go.Bar(orientation="h", base=[0.0, 0.5], x=[0.25, 0.25], y=[0.0, 0.0], name="step"),
                      row=row, col=1)
        fig.add_trace(go.Bar(orientation="h", base=[0.0, 0.1], x=[0.2, 0.2], y=[1.45, 1.35], name="in flight"),
                      row=row, col=1)
        fig.add_trace(go.Scatter(x=[0.3], y=[0.0], name="met"), row=row, col=1)
        fig.update_yaxes(row=row, col=1, **ticks)
    fig.update_xaxes(title_text="seconds since the start", row=2, col=1)
    t = span_totals(fig, ["edit", "aedit"])
    column = "ms covered (each instant once)"
    assert list(t.columns) == ["panel", "row", "kind", column]
    t[column] = t[column].round(9)
    assert t.values.tolist() == [["edit", "replica 0 · compute", "step", 500.0],
                                 ["edit", "replica 1 · comm", "in flight", 300.0],  # 0–0.2 ∪ 0.1–0.3
                                 ["aedit", "replica 0 · compute", "step", 500.0],
                                 ["aedit", "replica 1 · comm", "in flight", 300.0]]
    one = go.Figure(go.Bar(orientation="h", base=[2.0], x=[3.0], y=[0.0], name="block"))
    one.update_layout(xaxis_title="position", yaxis=dict(tickvals=[0.0], ticktext=["row a"]))
    assert span_totals(one).values.tolist() == [["row a", "block", 3.0]]  # one panel: no panel column; not seconds
