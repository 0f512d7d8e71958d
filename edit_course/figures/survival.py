"""Notebook 10's figure: each replica's training loss through a death and a rejoin, and the agreed model's
validation loss (plotly)."""

from __future__ import annotations

from collections.abc import Mapping, Sequence

import plotly.graph_objects as go


def death_figure(curves: Mapping[int, Sequence[tuple[int, float]]], val: Mapping[int, float], death_step: int,
                 join_step: int, dead: int, title: str = "Training through replica 1's death") -> go.Figure:
    """Per-replica training loss (the dead replica's rows before its death are lost with it, §16: its line starts
    at its replacement's join) and the validation loss; dotted lines at the death and the join."""
    fig = go.Figure()
    for r, pts in curves.items():
        name = f"replica {r}" + (" (replacement)" if r == dead else "")
        fig.add_trace(go.Scatter(x=[s for s, _ in pts], y=[v for _, v in pts], mode="lines", name=name))
    fig.add_trace(go.Scatter(x=list(val), y=list(val.values()), mode="lines+markers", name="validation (agreed)",
                             line=dict(color="black", width=3)))
    for x, text in ((death_step, f"replica {dead} killed"), (join_step, "replacement joins")):
        fig.add_vline(x=x, line_dash="dot", annotation_text=text, annotation_position="top")
    fig.update_layout(title=title, xaxis_title="step", yaxis_title="loss", height=420, autosize=True,
                      margin=dict(t=80), legend=dict(orientation="h", y=-0.2))
    return fig
