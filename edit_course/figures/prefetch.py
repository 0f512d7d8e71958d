"""Figures of EDiT's prefetch (notebook 04): where the sync traffic's time went, with and without prefetch.

Both are pure functions of numbers the notebook measured from its runs (so the notebook shows how
they are measured, and the figure only draws them):

    sync_split_figure(bars, ...)       per sync and rank: hidden, exposed and "other" ms, one bar per run
    prefetch_sweep_figure(sweep, ...)  exposed ms per sync against the link's bandwidth, prefetch on and off,
                                       with the link time of one sync as the floor nothing can hide
"""

from __future__ import annotations

from collections.abc import Mapping

import pandas as pd
import plotly.graph_objects as go

# (key in a row of `bars`, legend name, colour): the three parts of the time a sync_reduce is in flight
SPLIT_PARTS = (("hidden", "hidden under compute", "#4C78A8"),
               ("exposed", "exposed: waited on it", "#E45756"),
               ("other", "waiting on another transfer", "#999999"))
PREFETCH_COLORS = {True: "#4C78A8", False: "#E45756"}
SWEEP_COLUMNS = ("MB/s", "prefetch", "exposed ms per sync", "link ms per sync")


def sync_split_figure(bars: Mapping[str, Mapping[str, float]], bandwidth_mb_s: float,
                      latency_ms: float, what: str = "sync_reduce per sync and rank (median over ranks and syncs)"
                      ) -> go.Figure:
    """Stacked bars, one per run (`bars`: run name -> {"hidden", "exposed", "other": ms}): how a sync_reduce's
    time in flight splits into hidden under compute, exposed (the rank waited on it) and waiting on another
    transfer, each instant once, on a link of `bandwidth_mb_s` MB/s + `latency_ms` ms.

    The parts are stacked, so a bar's height is the time with a sync in flight; what prefetch changes is
    how much of it is red (exposed). `what` names the definition the bars use (the title says it)."""
    fig = go.Figure([go.Bar(name=label, x=list(bars), y=[float(v[part]) for v in bars.values()], marker_color=color)
                     for part, label, color in SPLIT_PARTS])
    fig.update_layout(barmode="stack", template="plotly_white", height=360,
                      title=f"{what}, link {bandwidth_mb_s:g} MB/s + {latency_ms:g} ms",
                      yaxis_title="milliseconds, each instant once", legend=dict(orientation="h", y=-0.15))
    return fig


def prefetch_sweep_figure(sweep: pd.DataFrame, latency_ms: float, model: pd.DataFrame | None = None) -> go.Figure:
    """Exposed sync time per sync and rank against the sync link's bandwidth (log x), one line with prefetch
    and one without, and the link time of one sync (dashed): what a slow link costs, and how much of it
    prefetch hides under the next unit's compute.

    `sweep` has one row per run with the columns `SWEEP_COLUMNS` ("MB/s", "prefetch" (bool), "exposed ms
    per sync", "link ms per sync"); the dashed line is drawn from the prefetch-on rows (the link time does
    not depend on prefetch). A bandwidth swept without a run on one side simply has no point there. `model`: the
    cost model's curve (`cost_model.exposure_curve`: "MB/s", "prefetch", "expected exposed ms"), dotted, so the
    measured points can be read against it."""
    missing = [c for c in SWEEP_COLUMNS if c not in sweep.columns]
    if missing:
        raise ValueError(f"sweep: missing columns {missing}; needs {list(SWEEP_COLUMNS)}")
    sweep = sweep.sort_values("MB/s", kind="stable")
    fig = go.Figure()
    for prefetch in (True, False):
        d = sweep[sweep["prefetch"] == prefetch]
        fig.add_trace(go.Scatter(x=d["MB/s"], y=d["exposed ms per sync"], mode="lines+markers",
                                 line_color=PREFETCH_COLORS[prefetch],
                                 name=f"exposed, prefetch {'on' if prefetch else 'off'}"))
    if model is not None:
        _model_traces(fig, model)
    d = sweep[sweep["prefetch"] == True]  # noqa: E712 (a column of bools, not an identity test)
    fig.add_trace(go.Scatter(x=d["MB/s"], y=d["link ms per sync"], mode="lines", line=dict(dash="dash", color="#888"),
                             name="link time of one sync"))
    fig.update_layout(template="plotly_white", height=380, xaxis_type="log", xaxis_title="sync-link bandwidth (MB/s)",
                      yaxis_title="ms per sync and rank", title=f"Exposed sync time (latency {latency_ms:g} ms)")
    return fig


def _model_traces(fig: go.Figure, model: pd.DataFrame) -> None:
    """The cost model's expected exposure, prefetch on and off, as dotted lines on `fig`."""
    model = model.sort_values("MB/s", kind="stable")
    for prefetch in (True, False):
        d = model[model["prefetch"] == prefetch]
        fig.add_trace(go.Scatter(x=d["MB/s"], y=d["expected exposed ms"], mode="lines",
                                 line=dict(dash="dot", color=PREFETCH_COLORS[prefetch]),
                                 name=f"cost model, prefetch {'on' if prefetch else 'off'}"))


def cost_model_figure(model: pd.DataFrame, measured: Mapping[bool, tuple[float, float]], latency_ms: float
                      ) -> go.Figure:
    """The overlap condition as a curve: the cost model's exposed ms per sync against the link's bandwidth (log x),
    prefetch on and off (`model`: `cost_model.exposure_curve`), the link time of one sync (dashed: what no prefetch
    can beat), and the run's measured points (`measured`: prefetch -> (MB/s, exposed ms)) on it."""
    model = model.sort_values("MB/s", kind="stable")
    fig = go.Figure()
    _model_traces(fig, model)
    d = model[model["prefetch"] == True]  # noqa: E712
    fig.add_trace(go.Scatter(x=d["MB/s"], y=d["link ms"], mode="lines", line=dict(dash="dash", color="#888"),
                             name="link time of one sync"))
    for prefetch, (mbps, ms) in measured.items():
        fig.add_trace(go.Scatter(x=[mbps], y=[ms], mode="markers", marker=dict(size=11, color=PREFETCH_COLORS[prefetch]),
                                 name=f"this run, prefetch {'on' if prefetch else 'off'} (median)"))
    fig.update_layout(template="plotly_white", height=380, xaxis_type="log", xaxis_title="sync-link bandwidth (MB/s)",
                      yaxis_title="exposed ms per sync and rank",
                      title=f"The cost model: exposed ≈ t₀ + Σ max(0, t_l − f_(l−1)) (latency {latency_ms:g} ms)")
    return fig
