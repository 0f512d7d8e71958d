"""Loss curves against steps and against wall-clock time, several runs overlaid.

Why both axes: Local-SGD methods usually lose a little per *step* against synchronous training and
win per *second*, because they talk less; only the two panels side by side tell that story.
Training loss is the mean over replicas (or one line per replica); validation loss is evaluated on
the model the replicas agree on (the anchor, for the Local-SGD family) and drawn with markers.

Runs with a time budget are drawn differently (`budget_loss_figure`): their replicas are at different
steps at any moment, so rows grouped by step would mix a fast replica's step 40 (at 10 s) with a slow
replica's step 40 (at 20 s). Only validation loss against seconds is drawn for them.
"""

from __future__ import annotations

from collections.abc import Sequence

import plotly.graph_objects as go
from plotly.subplots import make_subplots

from edit_lab.records.analysis import RunLike, as_runs, eval_table, metrics_table, run_labels
from edit_lab.viz.colors import replica_color, run_colors
from edit_lab.viz.layout import (
    keep_corner_ticks_apart,
    legend_below,
    style_subplot_titles,
    title_layout,
    title_text,
    top_margin,
)


def seconds_title(runs: Sequence[object]) -> str:
    """The time axis's title: a virtual run's seconds are its cost model's, never this machine's."""
    clocks = {r.config.clock.kind for r in runs}
    if clocks == {"virtual"}:
        return "virtual seconds since the start (the cost model's)"
    if "virtual" in clocks:
        return "seconds since the start (each run's own clock: see its label)"
    return "seconds since the start"


def loss_figure(runs: RunLike | Sequence[RunLike], labels: Sequence[str] | None = None,
                per_replica: bool = False, title: str | None = None) -> go.Figure:
    """Train (lines) and validation (markers) loss of every run, vs step (left) and vs seconds (right)."""
    rs = as_runs(runs)
    if any(r.config.time_budget for r in rs):
        return budget_loss_figure(rs, labels, title)
    names = run_labels(rs, labels)
    fig = make_subplots(rows=1, cols=2, shared_yaxes=True, horizontal_spacing=0.05,
                        subplot_titles=("against inner steps", "against virtual time" if {r.config.clock.kind for r in rs} == {"virtual"}
                                        else "against wall-clock time"))
    for name, r, color in zip(names, rs, run_colors([r.config.method for r in rs])):
        m = metrics_table(r)
        groups: list[tuple[str, object, str]] = []
        if per_replica:
            for rep in sorted(m["replica"].unique()):
                d = m[m["replica"] == rep].sort_values("step")
                groups.append((f"{name} · replica {rep}", d, replica_color(int(rep)) if len(rs) == 1 else color))
        else:
            d = m.groupby("step").agg(loss=("loss", "mean"), t=("t", "max")).reset_index()
            groups.append((f"{name} · train", d, color))
        for i, (gname, d, c) in enumerate(groups):
            for col, x, unit in ((1, d["step"], "step"), (2, d["t"], "s")):
                fig.add_trace(go.Scatter(x=x, y=d["loss"], mode="lines", name=gname, legendgroup=gname,
                                         showlegend=col == 1, line=dict(color=c, width=1.5),
                                         hovertemplate=f"{gname}<br>%{{x:.3g}} {unit}: loss %{{y:.4f}}<extra></extra>",
                                         meta={"role": "train", "run": name}), row=1, col=col)
        ev = eval_table(r)
        if len(ev):
            vname = f"{name} · validation"
            for col, x, unit in ((1, ev["step"], "step"), (2, ev["t"], "s")):
                if x.isna().all():
                    continue
                fig.add_trace(go.Scatter(x=x, y=ev["val_loss"], mode="lines+markers", name=vname, legendgroup=vname,
                                         showlegend=col == 1, line=dict(color=color, dash="dash", width=1),
                                         marker=dict(size=8, symbol="circle"),
                                         hovertemplate=f"{vname}<br>%{{x:.3g}} {unit}: val loss %{{y:.4f}}"
                                                       "<extra></extra>",
                                         meta={"role": "val", "run": name}), row=1, col=col)
    fig.update_xaxes(title_text="inner step", row=1, col=1)
    fig.update_xaxes(title_text=seconds_title(rs), row=1, col=2)
    fig.update_yaxes(title_text="cross-entropy loss (nats/token)", row=1, col=1)
    keep_corner_ticks_apart(fig)
    head = title or ("Loss: " + (names[0] if len(names) == 1 else f"{len(names)} runs"))
    text = title_text(head, "lines: training loss (mean over replicas); dashed with markers: validation loss")
    style_subplot_titles(fig)  # the subplot titles
    # the legend (one entry per run and curve) in rows below the plot: the plots keep the whole width
    fig.update_layout(title=title_layout(text), template="plotly_white", height=440 + 22 * len(names),
                      autosize=True, legend=legend_below(), margin=dict(l=70, r=20, t=top_margin(text), b=40),
                      meta={"runs": names})
    return fig


def budget_loss_figure(runs: RunLike | Sequence[RunLike], labels: Sequence[str] | None = None,
                       title: str | None = None) -> go.Figure:
    """Validation loss of the agreed model against seconds, one line per run (time-budget runs).

    Points: the timed validations (`eval_every_s`, at the first step start after each scheduled time; x is
    when the validation ended) and the final one after the last sync (a diamond). A dotted vertical line
    marks each run's budget.
    """
    rs = as_runs(runs)
    names = run_labels(rs, labels)
    fig = go.Figure()
    for name, r, color in zip(names, rs, run_colors([r.config.method for r in rs])):
        ev = eval_table(r)
        if not len(ev):
            continue
        symbols = ["diamond" if f else "circle" for f in ev["final"]]
        fig.add_trace(go.Scatter(x=ev["t"], y=ev["val_loss"], mode="lines+markers", name=name,
                                 line=dict(color=color, width=1.5), marker=dict(size=8, symbol=symbols),
                                 hovertemplate=f"{name}<br>%{{x:.1f}} s: val loss %{{y:.4f}}<extra></extra>",
                                 meta={"role": "val", "run": name}))
    for b in sorted({float(r.config.time_budget) for r in rs if r.config.time_budget}):
        fig.add_vline(x=b, line=dict(color="#888", dash="dot", width=1))
    head = title or ("Validation loss against time: " + (names[0] if len(names) == 1 else f"{len(names)} runs"))
    text = title_text(head, "the model the replicas agree on, validated every few seconds; "
                            "◆ after the final sync; dotted: the time budget")
    fig.update_xaxes(title_text=seconds_title(rs), rangemode="tozero")
    fig.update_yaxes(title_text="validation loss (nats/token)")
    keep_corner_ticks_apart(fig)  # second 0 and the lowest loss meet in the corner (they touched by 3 px)
    fig.update_layout(title=title_layout(text), template="plotly_white", height=420 + 22 * len(names),
                      autosize=True, legend=legend_below(), margin=dict(l=70, r=20, t=top_margin(text), b=40),
                      meta={"runs": names, "x": "seconds"})
    return fig
