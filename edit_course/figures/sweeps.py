"""Figures of a sweep over one setting, drawn from the table of the sweep's runs (one row per run).

    tau_sweep_figure(sweep)             02: DiLoCo's sync interval τ against synchronous training on the same link
    capacity_share_figure(table, ...)   07: each method's share of the cluster's capacity against the link
"""

from __future__ import annotations

from collections.abc import Sequence

import pandas as pd
import plotly.graph_objects as go
from plotly.subplots import make_subplots

from edit_lab.viz.layout import style_subplot_titles

TAU_PANELS = (("local_bytes_per_step", "sync-group bytes per step"), ("blocked_s", "seconds blocked on the slow link"),
              ("final_val_loss", "final validation loss"))


def tau_sweep_figure(sweep: pd.DataFrame, method: str = "diloco", reference: str = "sync") -> go.Figure:
    """Three panels against τ (log x): sync-group bytes per step after warm-up, seconds blocked on the link,
    final validation loss, for the `method` rows of `sweep`; the `reference` run (synchronous training, no τ)
    is the dotted line in each. `sweep` has the columns method, tau and those of `TAU_PANELS`."""
    missing = [c for c in ("method", "tau", *(c for c, _ in TAU_PANELS)) if c not in sweep.columns]
    if missing:
        raise ValueError(f"sweep: missing columns {missing}")
    d = sweep[sweep["method"] == method]
    refs = sweep[sweep["method"] == reference]
    if refs.empty:
        raise ValueError(f"sweep: no {reference!r} row to compare with; methods: {sorted(set(sweep['method']))}")
    ref = refs.iloc[0]
    fig = make_subplots(rows=1, cols=len(TAU_PANELS), subplot_titles=[t for _, t in TAU_PANELS])
    style_subplot_titles(fig)
    for col, (y, _) in enumerate(TAU_PANELS, start=1):
        fig.add_trace(go.Scatter(x=d["tau"], y=d[y], mode="lines+markers", name=method, showlegend=col == 1,
                                 line=dict(color="#2CA02C")), row=1, col=col)
        # the label only on the first panel: plotly 7 draws "new text" for an annotation_text of None
        label = dict(annotation_text=reference) if col == 1 else {}
        fig.add_hline(y=float(ref[y]), line=dict(dash="dot", color="#555555"), row=1, col=col, **label)
        fig.update_xaxes(title="τ", type="log", row=1, col=col)
    fig.update_layout(template="plotly_white", height=380,
                      title=f"The sync interval τ against {'synchronous training' if reference == 'sync' else reference} (dotted)")
    return fig


def capacity_share_figure(table: pd.DataFrame, methods: Sequence[str], title: str) -> go.Figure:
    """One panel per setting (the `setting` column, in order of appearance), sharing the y axis: each method's
    tokens/s as a share of what the nodes could do if none ever waited ("share of capacity"), against the
    link's bandwidth ("link GB/s", log x). 1 is the ceiling; the gap below it is time spent waiting."""
    missing = [c for c in ("setting", "method", "link GB/s", "share of capacity") if c not in table.columns]
    if missing:
        raise ValueError(f"table: missing columns {missing}")
    settings = list(dict.fromkeys(table["setting"]))
    fig = make_subplots(rows=1, cols=len(settings), subplot_titles=settings, shared_yaxes=True)
    style_subplot_titles(fig)
    for col, setting in enumerate(settings, start=1):
        part = table[table["setting"] == setting]
        for method in methods:
            m = part[part["method"] == method]
            fig.add_trace(go.Scatter(x=m["link GB/s"], y=m["share of capacity"], mode="lines+markers", name=method,
                                     legendgroup=method, showlegend=col == 1), row=1, col=col)
        fig.update_xaxes(type="log", title_text="inter-node bandwidth per GPU (GB/s)", row=1, col=col)
    fig.update_yaxes(title_text="tokens/s ÷ capacity", range=[0, 1.05], row=1, col=1)
    fig.update_layout(title=title, height=420, legend=dict(orientation="h", y=-0.25))
    return fig
