"""Penalty decisions of EDiT's sync: per unit and sync, who was an outlier and how much each replica weighed.

One column per unit (the penalty is per layer), four rows sharing the sync step as x axis. By default two
units: the two with the most outlier flags (ties: the lower unit), so the figure carries one message; every
unit with `units="all"` (the report and the panels' explorer views).

1. G, each replica's pseudo-gradient norm (log scale when norms span orders of magnitude);
2. z, the detector's score (how many σ the judged value lies above the detector's EWMA mean μ̂: by
   default G per step over the median of the other replicas' at that sync, D11; G/k itself with
   `penalty_peers` off), against its threshold δ·f (dashed, per replica), where f = max(1, std of the
   detector's last E z-scores) widens the threshold for a replica whose recent z-scores were spread out
   (`AnomalyDetector.factor`); a z above its dashed line makes an outlier (red ✕, also on G), weight 0.
   Against the peers the replica is judged as a whole (D15): a z above the line on one unit with q above κ_e
   (and, with two or three replicas, its own G/k above its memory) leaves it out of every unit, and it stays
   out while some unit of it is above κ_s times its peers' (`peer` in the hover), so a red ✕ can sit under
   the dashed line, and a z above it need not be one (`claims_penalty.decisions` gives each its reason). The closing sync is not judged (no z): it keeps the verdict
   of the sync before;
3. the softmax weights as stacked bars (they sum to 1 unless the outer step was skipped);
4. the clip factor applied to the aggregated pseudo-gradient (1 = not clipped).

Reads only `penalty.jsonl`; a run without records (sync, diloco…) gets an empty figure that says so.
"""

from __future__ import annotations

import math
from collections.abc import Iterable
from typing import Literal

import plotly.graph_objects as go
from plotly.subplots import make_subplots

from edit_lab.records.analysis import RunLike, as_run, penalty_table, run_label
from edit_lab.viz.colors import EXPOSED, replica_color
from edit_lab.viz.layout import (
    empty_figure,
    keep_corner_ticks_apart,
    legend_below,
    style_subplot_titles,
    title_layout,
    title_text,
    top_margin,
)

ROW_TITLES = ("G = ‖Δ‖", "z vs δ·f", "weight", "clip factor")


def _unit_name(u: int) -> str:
    return "unit 0 (root)" if u == 0 else f"unit {u} (block {u - 1})"


#: How many units the figure shows by default (`default_units`).
DEFAULT_UNITS = 2


def default_units(df) -> list[int]:
    """The units a penalty figure shows by default: the `DEFAULT_UNITS` with the most outlier flags, ties
    broken by the lower unit (with no flag at all: the first ones), in unit order."""
    flags = df.groupby("unit")["outlier"].sum()
    ranked = sorted((int(u) for u in flags.index), key=lambda u: (-int(flags[u]), u))
    return sorted(ranked[:DEFAULT_UNITS])


def penalty_figure(run: RunLike, units: Iterable[int] | Literal["all"] | None = None,
                   title: str | None = None) -> go.Figure:
    """The penalty's decisions of `run` for `units` (default: `default_units`, the two most flagged; "all").

    `fig.layout.meta` holds the number of outlier markers and the units shown.
    """
    r = as_run(run)
    df = penalty_table(r)
    head = title or f"Penalty decisions of {run_label(r)}"
    if df.empty:
        return empty_figure(head, f"no penalty records: method {r.config.method!r} has no pseudo-gradient penalty")
    every = sorted(int(u) for u in df["unit"].unique())
    shown = (every if units == "all" else default_units(df) if units is None
             else [u for u in units if u in set(df["unit"])])
    if not shown:
        return empty_figure(head, "no penalty records for the chosen units")
    fig = make_subplots(rows=4, cols=len(shown), shared_xaxes=True, vertical_spacing=0.06,
                        horizontal_spacing=0.08 if len(shown) > 1 else 0.0,
                        column_titles=[_unit_name(int(u)) for u in shown], row_titles=None)
    replicas = sorted(df["replica"].unique())
    thr_max = df["threshold"].replace([math.inf], float("nan")).max()
    z_cap = 3 * thr_max if thr_max == thr_max and thr_max > 0 else None
    n_outliers = 0
    for c, u in enumerate(shown, start=1):
        du = df[df["unit"] == u]
        first = c == 1
        for rep in replicas:
            d = du[du["replica"] == rep].sort_values("step")
            color = replica_color(int(rep))
            hover = [f"replica {rep}, unit {u}, sync at step {s}<br>G {g:.4g}"
                     + ("" if q != q else f" ({q:.3g}× its peers' per step)")
                     + f", z {z:.3g}, threshold {t:.3g}<br>outlier {o}, weight {w:.3f}, clip {cl:.3g}"
                     + (" · outer step skipped" if sk else "") + (" · closing sync, not judged" if cs else "")
                     for s, g, q, z, t, o, w, cl, sk, cs in zip(d["step"], d["G"], d["peer"], d["z"], d["threshold"],
                                                                d["outlier"], d["weight"], d["clip"], d["skipped"],
                                                                d["closing"])]
            fig.add_trace(go.Scatter(x=d["step"], y=d["G"], mode="lines+markers", name=f"replica {rep}",
                                     legendgroup=f"rep{rep}", showlegend=first, line=dict(color=color),
                                     hovertext=hover, hoverinfo="text", meta={"role": "G", "replica": int(rep)}),
                          row=1, col=c)
            z = d["z"].astype(float)
            capped = z > z_cap if z_cap else z != z
            zc = z.clip(upper=z_cap) if z_cap else z
            fig.add_trace(go.Scatter(x=d["step"], y=zc, mode="lines+markers", legendgroup=f"rep{rep}",
                                     showlegend=False, line=dict(color=color), hovertext=hover, hoverinfo="text",
                                     marker=dict(symbol=["triangle-up" if k else "circle" for k in capped]),
                                     meta={"role": "z", "replica": int(rep)}), row=2, col=c)
            fig.add_trace(go.Scatter(x=d["step"], y=d["threshold"], mode="lines", legendgroup=f"rep{rep}",
                                     showlegend=False, line=dict(color=color, dash="dash", width=1),
                                     hovertext=[f"replica {rep} threshold δ·f = {t:.3g}"
                                                for t in d["threshold"]],
                                     hoverinfo="text", meta={"role": "threshold", "replica": int(rep)}), row=2, col=c)
            fig.add_trace(go.Bar(x=d["step"], y=d["weight"], name=f"replica {rep}", legendgroup=f"rep{rep}",
                                 showlegend=False, marker_color=color, hovertext=hover, hoverinfo="text",
                                 meta={"role": "weight", "replica": int(rep)}), row=3, col=c)
        out = du[du["outlier"]]
        n_outliers += len(out)
        for row, col_name in ((1, "G"), (2, "z")):
            y = out[col_name].astype(float)
            if row == 2 and z_cap:
                y = y.clip(upper=z_cap)
            fig.add_trace(go.Scatter(
                x=out["step"], y=y, mode="markers", name="outlier (Δ set to 0)", legendgroup="outlier",
                showlegend=first and row == 1, marker=dict(symbol="x", size=13, color=EXPOSED, line=dict(width=1)),
                hovertext=[f"OUTLIER: replica {rp}, unit {u}, step {s}, G {g:.4g}, z {zz:.3g} > {t:.3g}"
                           for rp, s, g, zz, t in zip(out["replica"], out["step"], out["G"], out["z"],
                                                      out["threshold"])],
                hoverinfo="text", meta={"role": "outlier", "panel": col_name}), row=row, col=c)
        per_sync = du.groupby("step").agg(clip=("clip", "first"), skipped=("skipped", "any")).reset_index()
        fig.add_trace(go.Scatter(x=per_sync["step"], y=per_sync["clip"], mode="lines+markers", name="clip factor",
                                 legendgroup="clip", showlegend=first, line=dict(color="#555555"),
                                 hovertemplate="step %{x}: clip factor %{y:.4g}<extra></extra>",
                                 meta={"role": "clip"}), row=4, col=c)
        sk = per_sync[per_sync["skipped"]]
        if len(sk):
            # a marker, named in the legend: a text per skipped sync overlapped its neighbour's when two were close
            fig.add_trace(go.Scatter(x=sk["step"], y=[0.5] * len(sk), mode="markers",
                                     name="outer step skipped", legendgroup="skipped",
                                     showlegend=first, marker=dict(symbol="circle-open", size=12, color=EXPOSED),
                                     hovertemplate="step %{x}: every replica that trained anomalous, outer step skipped"
                                                   "<extra></extra>", meta={"role": "skipped"}), row=3, col=c)
        g = du["G"].astype(float)
        g = g[g > 0]
        if len(g) and g.max() / g.min() > 50:
            fig.update_yaxes(type="log", row=1, col=c)
        fig.update_xaxes(title_text="sync at step", row=4, col=c)
    # whole steps only (a narrow column would otherwise tick 11.5), about 4 ticks per column
    steps = sorted(int(x) for x in df["step"].unique())
    fig.update_xaxes(tick0=steps[0], dtick=max(1, math.ceil((steps[-1] - steps[0]) / (4 if len(shown) > 1 else 8))))
    for row, label in enumerate(ROW_TITLES, start=1):
        fig.update_yaxes(title_text=label, row=row, col=1, title_font=dict(size=11))
    fig.update_yaxes(range=[0, 1.05], row=3)
    keep_corner_ticks_apart(fig)
    note = f" (z above {z_cap:.3g} drawn at the top edge, ▲)" if z_cap and (df["z"] > z_cap).any() else ""
    peers = bool(getattr(r.config, "penalty_peers", False)) and r.config.replicas > 1
    judged = ("z of q = G per step over its peers' median; a flag also needs q > κ_e"
              + (" and its own G above its memory" if r.config.replicas <= 3 else "")
              + "; flagged on one unit, out of all, and out while a unit's q > κ_s; " if peers else "")
    which = ("every unit" if len(shown) == len(every) else
             f"units {', '.join(map(str, shown))} of {len(every)}" + (" (the most flagged; units='all' for every unit)"
                                                                   if units is None else ""))
    text = title_text(head, f"{which}, one column each; red ✕ = outlier, its Δ is zeroed and weighs 0; {judged}dashed: "
                            f"threshold δ·f, f = max(1, std of the detector's last E z-scores){note}")
    style_subplot_titles(fig)  # the column titles
    fig.update_layout(
        title=title_layout(text), barmode="stack", template="plotly_white", height=860, autosize=True,
        legend=legend_below(), margin=dict(l=70, r=20, t=top_margin(text), b=40),
        meta={"outliers": n_outliers, "units": [int(u) for u in shown], "syncs": int(df["step"].nunique())},
    )
    return fig
