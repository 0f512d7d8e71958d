"""Stragglers: how fast each replica went, how long it waited, how many local steps it took per round.

One message per figure, for the lessons:

- `replica_pace_figure`: who waits. Each replica's tokens/s, achieved (bars) and at its own pace had it
  never waited (◇), beside the seconds it stood blocked on the sync group and the simulated pause.
  Colour = replica in both panels.
- `capacity_figure`: what the replicas reach together against the **capacity bound** (the sum of their own
  paces, see analysis.py): synchronous training is held to R × the slowest replica, A-EDiT gets close to
  the bound. One bar per run, its share of the bound written on it.

`straggler_figure` puts the four panels together (the two above and local steps per round), for the
StragglerLab's tab and the run report, where a reader compares everything at once. Colour means replica
in every panel; the all-replicas bars are one neutral colour, and with several runs a run is told apart by
its place on the x axis or, for local steps, by the line's dash.
"""

from __future__ import annotations

from collections.abc import Sequence

import plotly.graph_objects as go
from plotly.subplots import make_subplots

from edit_lab.records.analysis import RunLike, as_runs, replica_table, rounds_table, run_labels
from edit_lab.viz.colors import replica_color
from edit_lab.viz.layout import (
    keep_corner_ticks_apart,
    legend_below,
    style_subplot_titles,
    tick_labels,
    title_layout,
    title_text,
    top_margin,
)

DASHES = ("solid", "dot", "dash", "dashdot", "longdash")
HEIGHT = 820
MESSAGE_HEIGHT = 460
ROW_GAP = 0.2  # of the plot area's height (~560 px): room for 3-line run names and the lower titles
#: The bars of all replicas together: neither a replica's colour nor a method's, so colour keeps one meaning.
ALL_REPLICAS = "#595959"
CAPACITY_DEF = ("capacity bound = Σ over replicas of tokens/s at the replica's own pace (its time blocked on "
                "the sync group removed)")
PAUSE_DEF = "paused = simulated straggler pause"


class _Runs:
    """The runs and the tables every panel draws from, computed once."""

    def __init__(self, runs: RunLike | Sequence[RunLike], labels: Sequence[str] | None) -> None:
        self.runs = as_runs(runs)
        self.names = run_labels(self.runs, labels)
        self.tables = [replica_table(r) for r in self.runs]
        self.replicas = sorted({int(x) for t in self.tables for x in t["replica"]})
        # Σ over replicas of each one's tokens up to its own last step: under A-EDiT a fast replica finishes
        # its steps early, and dividing by the slowest replica's time would hide exactly what A-EDiT gains
        self.achieved = [float(t["tokens_per_s"].sum()) if len(t) else 0.0 for t in self.tables]
        self.bound = [float(t["own_tokens_per_s"].sum()) if len(t) else 0.0 for t in self.tables]

    def column(self, replica: int, name: str) -> list[float | None]:
        """`name` of `replica` in every run (None where the run has no such replica)."""
        out = []
        for t in self.tables:
            row = t[t["replica"] == replica]
            out.append(float(row[name].iloc[0]) if len(row) else None)
        return out

    def head(self, title: str | None, what: str) -> str:
        return title or (f"{what}: " + (self.names[0] if len(self.names) == 1 else f"{len(self.names)} runs"))


def _add_pace(fig: go.Figure, d: _Runs, row: int, col: int, legend: bool = True) -> None:
    for rep in d.replicas:
        color = replica_color(rep)
        fig.add_trace(go.Bar(x=d.names, y=d.column(rep, "tokens_per_s"), name=f"replica {rep}",
                             legendgroup=f"rep{rep}", showlegend=legend, marker_color=color, offsetgroup=str(rep),
                             hovertemplate=f"replica {rep}" + ": %{y:.0f} tokens/s achieved<extra>%{x}</extra>",
                             meta={"role": "achieved", "replica": rep}), row=row, col=col)
        fig.add_trace(go.Scatter(x=d.names, y=d.column(rep, "own_tokens_per_s"), mode="markers",
                                 legendgroup=f"rep{rep}", showlegend=False,
                                 marker=dict(symbol="diamond-open", size=12, color=color, line=dict(width=2)),
                                 hovertemplate=f"replica {rep}" + ": %{y:.0f} tokens/s at its own pace"
                                               "<extra>%{x}</extra>",
                                 meta={"role": "own_pace", "replica": rep}), row=row, col=col)
    fig.update_yaxes(title_text="tokens/s", rangemode="tozero", row=row, col=col)


def _add_blocked(fig: go.Figure, d: _Runs, row: int, col: int) -> None:
    for rep in d.replicas:
        color = replica_color(rep)
        blocked = d.column(rep, "blocked_s")
        fig.add_trace(go.Bar(x=d.names, y=blocked, name=f"replica {rep}", legendgroup=f"rep{rep}",
                             showlegend=False, marker_color=color, offsetgroup=f"b{rep}",
                             hovertemplate=f"replica {rep}" + ": blocked %{y:.3f} s on the sync group"
                                           "<extra>%{x}</extra>",
                             meta={"role": "blocked", "replica": rep}), row=row, col=col)
        fig.add_trace(go.Bar(x=d.names, y=d.column(rep, "straggle_s"), legendgroup=f"rep{rep}", showlegend=False,
                             marker=dict(color=color, pattern=dict(shape=".", fgcolor="#FFFFFF")),
                             offsetgroup=f"b{rep}", base=blocked,
                             hovertemplate=f"replica {rep}" + ": paused %{y:.3f} s (simulated straggler)"
                                           "<extra>%{x}</extra>",
                             meta={"role": "straggle", "replica": rep}), row=row, col=col)
    fig.update_yaxes(title_text="seconds", rangemode="tozero", row=row, col=col)


def _add_capacity(fig: go.Figure, d: _Runs, row: int, col: int) -> None:
    shares = [a / b if b else 0.0 for a, b in zip(d.achieved, d.bound)]
    fig.add_trace(go.Bar(x=d.names, y=d.achieved, name="achieved (all replicas)", marker_color=ALL_REPLICAS,
                         text=[f"{s:.0%} of the bound" for s in shares], textposition="inside", textangle=0,
                         insidetextanchor="middle", textfont=dict(color="#FFFFFF", size=11),
                         hovertemplate="%{y:.0f} tokens/s achieved (%{text})<extra>%{x}</extra>",
                         meta={"role": "total", "share": shares}), row=row, col=col)
    fig.add_trace(go.Scatter(x=d.names, y=d.bound, mode="markers", name="capacity bound (Σ own paces)",
                             marker=dict(symbol="line-ew-open", size=40, color="#000000", line=dict(width=3)),
                             hovertemplate="capacity bound %{y:.0f} tokens/s<extra>%{x}</extra>",
                             meta={"role": "capacity"}), row=row, col=col)
    fig.update_yaxes(title_text="tokens/s", rangemode="tozero", row=row, col=col)


def _add_rounds(fig: go.Figure, d: _Runs, row: int, col: int) -> None:
    many = len(d.runs) > 1
    for i, (name, run) in enumerate(zip(d.names, d.runs)):
        rt = rounds_table(run)
        for rep in sorted(rt["replica"].unique()) if len(rt) else []:
            r = rt[rt["replica"] == rep]
            fig.add_trace(go.Scatter(x=r["round"], y=r["local_steps"], mode="lines+markers",
                                     name=f"{name}: replica {rep}" if many else f"replica {rep}",
                                     legendgroup=f"rep{rep}", showlegend=False,
                                     line=dict(color=replica_color(int(rep)), dash=DASHES[i % len(DASHES)]),
                                     customdata=list(zip(r["start_step"], r["end_step"])),
                                     hovertemplate=f"{name}, replica {rep}: round %{{x}}, %{{y}} local steps "
                                                   "(steps %{customdata[0]}–%{customdata[1]})<extra></extra>",
                                     meta={"role": "rounds", "replica": int(rep), "run": name}), row=row, col=col)
    fig.update_yaxes(title_text="local steps", rangemode="tozero", row=row, col=col)
    fig.update_xaxes(title_text="round (replicas agree at its end)", row=row, col=col)


def _finish(fig: go.Figure, d: _Runs, text: str, height: int, bar_panels: Sequence[tuple[int, int]]) -> go.Figure:
    # the runs' names on short lines under their bars, never rotated into the row below
    for row, col in bar_panels:
        fig.update_xaxes(tickmode="array", tickvals=d.names, ticktext=tick_labels(d.names), tickangle=0,
                         tickfont=dict(size=11), row=row, col=col)
    keep_corner_ticks_apart(fig)
    style_subplot_titles(fig)  # the subplot titles
    fig.update_layout(title=title_layout(text), barmode="group", template="plotly_white", height=height,
                      autosize=True, legend=legend_below(), margin=dict(l=60, r=20, t=top_margin(text), b=40),
                      meta={"runs": d.names, "capacity_bound": d.bound, "achieved": d.achieved})
    return fig


def replica_pace_figure(runs: RunLike | Sequence[RunLike], labels: Sequence[str] | None = None,
                        title: str | None = None) -> go.Figure:
    """Who waits: each replica's tokens/s against its own pace, and the seconds it stood blocked or paused."""
    d = _Runs(runs, labels)
    fig = make_subplots(rows=1, cols=2, horizontal_spacing=0.12, subplot_titles=(
        "tokens/s per replica (◇ own pace)", "seconds blocked on the sync group (dotted: paused)"))
    _add_pace(fig, d, 1, 1)
    _add_blocked(fig, d, 1, 2)
    sub = ("colour = replica; own pace = its tokens over its time with the time blocked on the sync group "
           f"removed; {PAUSE_DEF}")
    return _finish(fig, d, title_text(d.head(title, "Who waits"), sub), MESSAGE_HEIGHT, ((1, 1), (1, 2)))


def capacity_figure(runs: RunLike | Sequence[RunLike], labels: Sequence[str] | None = None,
                    title: str | None = None) -> go.Figure:
    """What all replicas reach together, against the capacity bound, one bar per run with its share."""
    d = _Runs(runs, labels)
    fig = make_subplots(rows=1, cols=1)
    _add_capacity(fig, d, 1, 1)
    sub = (f"{CAPACITY_DEF}; achieved = Σ over replicas of the tokens it trained over the time to its own last step; "
           "the whole run, warm-up included")
    return _finish(fig, d, title_text(d.head(title, "All replicas against the capacity bound"), sub),
                   MESSAGE_HEIGHT, ((1, 1),))


def straggler_figure(runs: RunLike | Sequence[RunLike], labels: Sequence[str] | None = None,
                     title: str | None = None) -> go.Figure:
    """The four straggler panels for one run or several (x axis: the runs' labels), for explorers and reports."""
    d = _Runs(runs, labels)
    # short subplot titles (each has half the width of a laptop's notebook); the details are in the subtitle
    fig = make_subplots(rows=2, cols=2, vertical_spacing=ROW_GAP, horizontal_spacing=0.12, subplot_titles=(
        "tokens/s per replica (◇ own pace)", "all replicas vs capacity bound",
        "seconds blocked / paused (dotted)", "local steps per round"))
    _add_pace(fig, d, 1, 1)
    _add_capacity(fig, d, 1, 2)
    _add_blocked(fig, d, 2, 1)
    _add_rounds(fig, d, 2, 2)
    sub = f"colour = replica; {CAPACITY_DEF}; {PAUSE_DEF}"
    if len(d.runs) > 1:
        sub += "; local steps: line style = run, in the order of the bars"
    return _finish(fig, d, title_text(d.head(title, "Stragglers"), sub), HEIGHT, ((1, 1), (1, 2), (2, 1)))
