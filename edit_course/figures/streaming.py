"""Notebook 09's figures: bytes per step, and validation loss against time and against bytes sent.

Every number is the runs' own (edit_course/claims/streaming.py): the bytes rank 0's sync-group collectives
carried, the validations of the agreed model.
"""

from __future__ import annotations

from collections.abc import Sequence

import plotly.graph_objects as go
from plotly.subplots import make_subplots

from edit_course.claims.streaming import loss_points, step_bytes, trained_steps
from edit_lab.records.analysis import RunLike, as_runs, run_labels
from edit_lab.viz.colors import run_colors
from edit_lab.viz.layout import (
    keep_corner_ticks_apart,
    legend_below,
    style_subplot_titles,
    title_layout,
    title_text,
    top_margin,
)
from edit_lab.viz.losses import seconds_title


def step_bytes_figure(runs: RunLike | Sequence[RunLike], labels: Sequence[str] | None = None,
                      title: str | None = None) -> go.Figure:
    """Megabytes the sync group's pseudo-gradient collectives carried in each training step, one line per run
    (a step that sent nothing at 0), its peak a dotted line of the run's colour."""
    rs = as_runs(runs)
    names = run_labels(rs, labels)
    fig = go.Figure()
    for nm, r, color in zip(names, rs, run_colors([r.config.method for r in rs])):
        per = step_bytes(r)
        steps = list(range(trained_steps(r)))  # a time-budget run's `steps` is only its ceiling
        y = [per.get(s, 0) / 1e6 for s in steps]
        fig.add_trace(go.Scatter(x=steps, y=y, mode="lines", name=nm, line=dict(color=color, width=1.5, shape="hv"),
                                 hovertemplate=f"{nm}<br>step %{{x}}: %{{y:.3f}} MB<extra></extra>",
                                 meta={"role": "bytes", "run": nm}))
        if y:
            fig.add_hline(y=max(y), line=dict(color=color, dash="dot", width=1))
    head = title or "Bytes on the sync group, step by step"
    text = title_text(head, "MB the pseudo-gradient collectives of one step carried (rank 0); dotted: each run's peak")
    fig.update_xaxes(title_text="inner step", rangemode="tozero")
    fig.update_yaxes(title_text="MB in the step", rangemode="tozero")
    keep_corner_ticks_apart(fig)
    fig.update_layout(title=title_layout(text), template="plotly_white", height=380 + 22 * len(names),
                      autosize=True, legend=legend_below(), margin=dict(l=70, r=20, t=top_margin(text), b=40),
                      meta={"runs": names})
    return fig


def loss_time_bytes_figure(runs: RunLike | Sequence[RunLike], labels: Sequence[str] | None = None,
                           title: str | None = None) -> go.Figure:
    """Validation loss of the agreed model against seconds (left) and against the MB sent by then (right), one
    line per run; ◆ the validation after the final sync."""
    rs = as_runs(runs)
    names = run_labels(rs, labels)
    fig = make_subplots(rows=1, cols=2, shared_yaxes=True, horizontal_spacing=0.06,
                        subplot_titles=("against time", "against MB sent"))
    for nm, r, color in zip(names, rs, run_colors([r.config.method for r in rs])):
        p = loss_points(r)
        if not len(p):
            continue
        symbols = ["diamond" if f else "circle" for f in p["final"]]
        for col, x, unit in ((1, p["t"], "s"), (2, p["mb"], "MB")):
            fig.add_trace(go.Scatter(x=x, y=p["val_loss"], mode="lines+markers", name=nm, legendgroup=nm,
                                     showlegend=col == 1, line=dict(color=color, width=1.5),
                                     marker=dict(size=7, symbol=symbols),
                                     hovertemplate=f"{nm}<br>%{{x:.3g}} {unit}: val loss %{{y:.4f}}<extra></extra>",
                                     meta={"role": "val", "run": nm, "x": unit}), row=1, col=col)
    fig.update_xaxes(title_text=seconds_title(rs), rangemode="tozero", row=1, col=1)
    fig.update_xaxes(title_text="MB sent on the sync group (rank 0)", rangemode="tozero", row=1, col=2)
    fig.update_yaxes(title_text="validation loss (nats/token)", row=1, col=1)
    keep_corner_ticks_apart(fig)
    head = title or "Validation loss against time and against bytes"
    text = title_text(head, "the model the replicas agree on; ◆ after the final sync")
    style_subplot_titles(fig)
    fig.update_layout(title=title_layout(text), template="plotly_white", height=420 + 22 * len(names),
                      autosize=True, legend=legend_below(), margin=dict(l=70, r=20, t=top_margin(text), b=40),
                      meta={"runs": names})
    return fig
