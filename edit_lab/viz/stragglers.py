"""Stragglers: how fast each replica went, how long it waited, how many local steps it took per round.

Four panels, one or several runs side by side (same knobs, different methods is the usual use):

- tokens/s per replica, achieved (bars) and at the replica's own pace if it had never waited (◇);
- all replicas together against the **capacity bound** (the sum of own paces, see analysis.py):
  synchronous training is held to R × the slowest replica, A-EDiT gets close to the bound;
- seconds each replica stood blocked on the sync group, and seconds of simulated straggler pause;
- local steps per round and replica (equal for step-based methods, unequal for time-based A-EDiT).
"""

from __future__ import annotations

from collections.abc import Sequence

import plotly.graph_objects as go
from plotly.subplots import make_subplots

from ..analysis import RunLike, as_runs, replica_table, rounds_table, run_labels
from .colors import replica_color, run_colors
from .layout import (SUBPLOT_TITLE_PX, keep_corner_ticks_apart, legend_below, tick_labels, title_layout,
                     title_text, top_margin)

DASHES = ("solid", "dot", "dash", "dashdot", "longdash")
HEIGHT = 820
ROW_GAP = 0.2  # of the plot area's height (~560 px): room for 3-line run names and the lower titles


def straggler_figure(runs: RunLike | Sequence[RunLike], labels: Sequence[str] | None = None,
                     title: str | None = None) -> go.Figure:
    """The straggler panels for one run or several (x axis: the runs' labels)."""
    rs = as_runs(runs)
    names = run_labels(rs, labels)
    tables = [replica_table(r) for r in rs]
    colors = run_colors([r.config.method for r in rs])
    rounds = [rounds_table(r) for r in rs]
    # short subplot titles (each has half the width of a laptop's notebook); the details are in the subtitle
    fig = make_subplots(rows=2, cols=2, vertical_spacing=ROW_GAP, horizontal_spacing=0.12, subplot_titles=(
        "tokens/s per replica (◇ own pace)", "all replicas vs capacity bound",
        "seconds blocked / paused (dotted)", "local steps per round"))
    replicas = sorted({int(x) for t in tables for x in t["replica"]})
    for rep in replicas:
        color = replica_color(rep)
        def col(name: str) -> list[float | None]:
            out = []
            for t in tables:
                row = t[t["replica"] == rep]
                out.append(float(row[name].iloc[0]) if len(row) else None)
            return out
        fig.add_trace(go.Bar(x=names, y=col("tokens_per_s"), name=f"replica {rep}", legendgroup=f"rep{rep}",
                             marker_color=color, offsetgroup=str(rep),
                             hovertemplate=f"replica {rep}" + ": %{y:.0f} tokens/s achieved<extra>%{x}</extra>",
                             meta={"role": "achieved", "replica": rep}), row=1, col=1)
        fig.add_trace(go.Scatter(x=names, y=col("own_tokens_per_s"), mode="markers", legendgroup=f"rep{rep}",
                                 showlegend=False, marker=dict(symbol="diamond-open", size=12, color=color,
                                                               line=dict(width=2)),
                                 hovertemplate=f"replica {rep}" + ": %{y:.0f} tokens/s at its own pace"
                                               "<extra>%{x}</extra>",
                                 meta={"role": "own_pace", "replica": rep}), row=1, col=1)
        fig.add_trace(go.Bar(x=names, y=col("blocked_s"), name=f"replica {rep}", legendgroup=f"rep{rep}",
                             showlegend=False, marker_color=color, offsetgroup=f"b{rep}",
                             hovertemplate=f"replica {rep}" + ": blocked %{y:.3f} s on the sync group"
                                           "<extra>%{x}</extra>",
                             meta={"role": "blocked", "replica": rep}), row=2, col=1)
        fig.add_trace(go.Bar(x=names, y=col("straggle_s"), legendgroup=f"rep{rep}", showlegend=False,
                             marker=dict(color=color, pattern=dict(shape=".", fgcolor="#FFFFFF")),
                             offsetgroup=f"b{rep}", base=col("blocked_s"),
                             hovertemplate=f"replica {rep}" + ": paused %{y:.3f} s (simulated straggler)"
                                           "<extra>%{x}</extra>",
                             meta={"role": "straggle", "replica": rep}), row=2, col=1)
    # Σ over replicas of each one's tokens up to its own last step: under A-EDiT a fast replica finishes its
    # steps early, and dividing by the slowest replica's time would hide exactly what A-EDiT gains
    achieved = [float(t["tokens_per_s"].sum()) if len(t) else 0.0 for t in tables]
    bound = [float(t["own_tokens_per_s"].sum()) if len(t) else 0.0 for t in tables]
    fig.add_trace(go.Bar(x=names, y=achieved, name="achieved (all replicas)",
                         marker_color=colors,
                         hovertemplate="%{y:.0f} tokens/s achieved<extra>%{x}</extra>",
                         meta={"role": "total"}), row=1, col=2)
    fig.add_trace(go.Scatter(x=names, y=bound, mode="markers", name="capacity bound (Σ own paces)",
                             marker=dict(symbol="line-ew-open", size=40, color="#000000", line=dict(width=3)),
                             hovertemplate="capacity bound %{y:.0f} tokens/s<extra>%{x}</extra>",
                             meta={"role": "capacity"}), row=1, col=2)
    many = len(rs) > 1
    for i, (name, rt) in enumerate(zip(names, rounds)):
        for rep in sorted(rt["replica"].unique()) if len(rt) else []:
            d = rt[rt["replica"] == rep]
            fig.add_trace(go.Scatter(x=d["round"], y=d["local_steps"], mode="lines+markers",
                                     name=f"{name}: replica {rep}" if many else f"replica {rep}",
                                     legendgroup=f"rep{rep}", showlegend=False,
                                     line=dict(color=colors[i] if many
                                               else replica_color(int(rep)), dash=DASHES[int(rep) % len(DASHES)]),
                                     customdata=list(zip(d["start_step"], d["end_step"])),
                                     hovertemplate=f"{name}, replica {rep}: round %{{x}}, %{{y}} local steps "
                                                   "(steps %{customdata[0]}–%{customdata[1]})<extra></extra>",
                                     meta={"role": "rounds", "replica": int(rep), "run": name}), row=2, col=2)
    fig.update_yaxes(title_text="tokens/s", row=1, col=1)
    fig.update_yaxes(title_text="tokens/s", row=1, col=2, rangemode="tozero")
    fig.update_yaxes(title_text="seconds", row=2, col=1)
    fig.update_yaxes(title_text="local steps", row=2, col=2, rangemode="tozero")
    fig.update_xaxes(title_text="round (replicas agree at its end)", row=2, col=2)
    # the runs' names on short lines under their bars, never rotated into the row below
    for row, col in ((1, 1), (1, 2), (2, 1)):
        fig.update_xaxes(tickmode="array", tickvals=names, ticktext=tick_labels(names), tickangle=0,
                         tickfont=dict(size=11), row=row, col=col)
    keep_corner_ticks_apart(fig)
    fig.update_annotations(font_size=SUBPLOT_TITLE_PX)  # the subplot titles
    head = title or ("Stragglers: " + (names[0] if len(names) == 1 else f"{len(names)} runs"))
    sub = ("capacity bound = Σ over replicas of tokens/s at the replica's own pace (time blocked on the sync "
           "group removed); paused = simulated straggler pause")
    if len(rs) > 1:
        sub += "; local steps: colour = run, as the bars; line style = replica"
    text = title_text(head, sub)
    fig.update_layout(title=title_layout(text),
                      barmode="group", template="plotly_white", height=HEIGHT, autosize=True,
                      legend=legend_below(), margin=dict(l=60, r=20, t=top_margin(text), b=40),
                      meta={"runs": names, "capacity_bound": bound, "achieved": achieved})
    return fig
