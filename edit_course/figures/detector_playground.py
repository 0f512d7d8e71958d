"""The detector playground's figure: a made-up norm series and what EDiT's penalty decides on it.

Four rows sharing the sync index as x axis, one colour per replica (colors.py):

1. what the detector judges: each replica's norm G over its peer's (q, `peers`; with `peers` off, G
   itself) (solid), the detector's EWMA mean μ̂ before the sync (dashed) and its flag limit μ̂ + δ·f·σ
   (dotted). Against the peers (D15) a value above the dotted line is an outlier (red ✕, the exposed-red of
   every figure) only where q > κ_e and, with two replicas, the replica's own G stands δ_m σ above its
   memory; a flagged replica stays out while q > κ_s (and its memory says it moved). With the peers off a
   value above the dotted line is an outlier, and a re-admission (K flags in a row, D10) is a ◆;
2. z against its threshold δ·f (f = max(1, std of the last E z-scores));
3. the softmax weights (stacked bars);
4. the clip factor of the aggregate (1 = not clipped).

Drawn from a `detector_series.PlaygroundResult`, i.e. from `penalty.replay`'s `Judged` records; every trace has
`meta={"role": …, "replica": …}` so tests and the widget find them.
"""

from __future__ import annotations

import math

import plotly.graph_objects as go
from plotly.subplots import make_subplots

from edit_course.panels.detector_series import PlaygroundResult
from edit_lab.viz.colors import EXPOSED, replica_color
from edit_lab.viz.layout import keep_corner_ticks_apart, legend_below, title_layout, title_text, top_margin

ROW_TITLES = ("G, μ̂ and μ̂ + δ·f·σ", "z vs δ·f", "weight", "clip factor")
PEER_TITLE = "G / peer's G, μ̂ and μ̂ + δ·f·σ"


def _nan_inf(v: float | None) -> float | None:
    """None (a gap in the line) for what cannot be drawn: not judged, no limit yet (inf), NaN."""
    return None if v is None or not math.isfinite(v) else v


def detector_figure(result: PlaygroundResult, title: str | None = None) -> go.Figure:
    """The penalty's decisions on a playground series. `fig.layout.meta` holds the flagged syncs per replica."""
    n = len(result.norms[0])
    x = list(range(n))
    fig = make_subplots(rows=4, cols=1, shared_xaxes=True, vertical_spacing=0.05, row_heights=[0.4, 0.25, 0.2, 0.15])
    cfg = result.config
    peers = cfg.peers and len(result.norms) > 1  # the detector judges G over its peers' (q, D11 and D15)
    # a legend entry for the markers on the first replica that has any (plotly hides an empty trace's entry)
    first_out = next((r for r, js in enumerate(result.judged) if any(j.outlier for j in js)), 0)
    first_back = next((r for r, js in enumerate(result.judged) if any(j.readmitted for j in js)), 0)
    for r, judged in enumerate(result.judged):
        color = replica_color(r)
        norms = result.norms[r]
        g = [j.judged if j.judged is not None else math.nan for j in judged] if peers else norms
        group = f"rep{r}"
        name = "G / peer" if peers else "G"
        hover = [f"replica {r}, sync {i}<br>G {norms[i]:.4g}" + (f", G / peer {g[i]:.3g}" if peers else "")
                 + f", μ̂ {j.mean:.4g}, σ {j.std:.3g}<br>z {j.z:.3g} vs δ·f "
                 f"{j.threshold:.3g}: {'OUTLIER' if j.outlier else 'ok'}{' · re-admitted' if j.readmitted else ''}"
                 for i, j in enumerate(judged)]
        fig.add_trace(go.Scatter(x=x, y=g, mode="lines+markers", name=f"replica {r}: {name}", legendgroup=group,
                                 line=dict(color=color), hovertext=hover, hoverinfo="text",
                                 meta={"role": "G", "replica": r}), row=1, col=1)
        fig.add_trace(go.Scatter(x=x, y=[_nan_inf(j.mean) if j.mean or i else None for i, j in enumerate(judged)],
                                 mode="lines", name=f"replica {r}: μ̂ (EWMA mean)", legendgroup=group,
                                 line=dict(color=color, dash="dash", width=1.5), hoverinfo="skip",
                                 meta={"role": "mean", "replica": r}), row=1, col=1)
        fig.add_trace(go.Scatter(x=x, y=[_nan_inf(j.limit) for j in judged], mode="lines",
                                 name=f"replica {r}: flag limit μ̂ + δ·f·σ", legendgroup=group,
                                 line=dict(color=color, dash="dot", width=1.5), hoverinfo="skip",
                                 meta={"role": "limit", "replica": r}), row=1, col=1)
        fig.add_trace(go.Scatter(x=x, y=[j.z if math.isfinite(j.z) else None for j in judged], mode="lines+markers",
                                 legendgroup=group, showlegend=False, line=dict(color=color), hovertext=hover,
                                 hoverinfo="text", meta={"role": "z", "replica": r}), row=2, col=1)
        fig.add_trace(go.Scatter(x=x, y=[_nan_inf(j.threshold) for j in judged], mode="lines", legendgroup=group,
                                 showlegend=False, line=dict(color=color, dash="dash", width=1),
                                 hovertemplate=f"replica {r} threshold δ·f = %{{y:.3g}}<extra></extra>",
                                 meta={"role": "threshold", "replica": r}), row=2, col=1)
        fig.add_trace(go.Bar(x=x, y=[w[r] for w in result.weights], name=f"replica {r}: weight", legendgroup=group,
                             showlegend=False, marker_color=color,
                             hovertemplate=f"replica {r}, sync %{{x}}: weight %{{y:.3f}}<extra></extra>",
                             meta={"role": "weight", "replica": r}), row=3, col=1)
        out = [i for i, j in enumerate(judged) if j.outlier]
        fig.add_trace(go.Scatter(x=out, y=[g[i] for i in out], mode="markers", name="outlier (Δ set to 0)",
                                 legendgroup="outlier", showlegend=r == first_out,
                                 marker=dict(symbol="x", size=12, color=EXPOSED, line=dict(width=1)),
                                 hovertemplate=f"OUTLIER at sync %{{x}}: {name} %{{y:.4g}}<extra></extra>",
                                 meta={"role": "outlier", "replica": r}), row=1, col=1)
        back = [i for i, j in enumerate(judged) if j.readmitted]
        fig.add_trace(go.Scatter(x=back, y=[g[i] for i in back], mode="markers", name="re-admitted (K in a row)",
                                 legendgroup="readmitted", showlegend=r == first_back,
                                 marker=dict(symbol="diamond", size=11, color="#222222"),
                                 hovertemplate="re-admitted at sync %{x}: the detector restarts from G %{y:.4g}"
                                               "<extra></extra>",
                                 meta={"role": "readmitted", "replica": r}), row=1, col=1)
    fig.add_trace(go.Scatter(x=x, y=result.clip, mode="lines+markers", name="clip factor", line=dict(color="#555555"),
                             hovertemplate="sync %{x}: clip factor %{y:.4g}<extra></extra>",
                             meta={"role": "clip"}), row=4, col=1)
    for row, label in enumerate((PEER_TITLE, *ROW_TITLES[1:]) if peers else ROW_TITLES, start=1):
        fig.update_yaxes(title_text=label, row=row, col=1, title_font=dict(size=11))
    fig.update_yaxes(range=[0, 1.05], row=3, col=1)
    fig.update_yaxes(range=[0, 1.05], row=4, col=1)
    fig.update_xaxes(title_text="sync", row=4, col=1, dtick=max(1, n // 10))
    keep_corner_ticks_apart(fig)
    settings = (f"α {cfg.alpha:g}, E {cfg.arming}, δ {cfg.threshold:g}, ε {cfg.min_rel_std:g}, "
                + (f"against the peers, κ_e {cfg.enter_ratio:g}, κ_s {cfg.stay_ratio:g}, δ_m {cfg.memory_threshold:g}, "
                   if peers else f"K {cfg.readmit_after}, ")
                + f"T {cfg.temperature:.3g}, φ {cfg.clip_norm:.3g}, "
                f"bias correction {'on' if cfg.bias_correction else 'off'}"
                + ("" if cfg.anomaly else ", anomaly filter OFF"))
    text = title_text(title or "The detector on a made-up series",
                      f"{settings}. Dashed: EWMA mean μ̂; dotted: flag limit μ̂ + δ·f·σ; red ✕: outlier")
    fig.update_layout(title=title_layout(text), barmode="stack", template="plotly_white", height=760, autosize=True,
                      legend=legend_below(), margin=dict(l=70, r=20, t=top_margin(text), b=40),
                      meta={"flagged": [[i for i, j in enumerate(js) if j.outlier] for js in result.judged],
                            "readmitted": [[i for i, j in enumerate(js) if j.readmitted] for js in result.judged]})
    return fig
