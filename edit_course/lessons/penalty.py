"""Notebook 05's figures and tables: loss on a log axis, a replica's weight per unit and sync, and the exact values
under every chart, folded.

A spike takes the loss of the run without a defence to hundreds of nats while the defended runs stay near 3: on a
linear axis every defended curve lies flat at the bottom, so the loss figures here use a log axis. Each figure
comes with the numbers it draws (`exact_values`, a folded `<details>` table), so a reader can check a figure
against the text without reading values off a curve.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from typing import Any

import pandas as pd
import plotly.graph_objects as go

from edit_course.figures.values import exact_values  # noqa: F401 (the notebook calls lesson.exact_values)
from edit_lab.config import AUTHORS_DETECTOR
from edit_lab.records.analysis import penalty_table
from edit_lab.records.run import Run


def authors_detector(arming: int) -> dict[str, Any]:
    """The RunConfig flags of the paper's detector (`AUTHORS_DETECTOR`: each unit judged alone on its own G, α 0.02,
    no bias correction, no noise floor, no peers, no re-admission) with the arming period `arming` in syncs: the
    authors' E = 120 would not arm in a run of a few dozen syncs."""
    return {**{f"penalty_{k}": v for k, v in AUTHORS_DETECTOR.items()}, "penalty_arming": int(arming)}


def val_losses(runs: Sequence[Run], labels: Sequence[str]) -> pd.DataFrame:
    """The validation loss of every run at every evaluation step: one row per step, one column per run (label)."""
    cols = {label: dict(r.val_losses()) for label, r in zip(labels, runs)}
    steps = sorted({s for c in cols.values() for s in c})
    return pd.DataFrame({label: [c.get(s, math.nan) for s in steps] for label, c in cols.items()},
                        index=pd.Index(steps, name="step"))


def log_loss_figure(runs: Sequence[Run], labels: Sequence[str], title: str | None = None) -> go.Figure:
    """`edit_lab.viz.loss_figure` with its loss axes logarithmic: a spike of hundreds of nats and a run at 3 both
    readable."""
    from edit_lab.viz import loss_figure

    fig = loss_figure(list(runs), labels=list(labels), title=title)
    fig.update_yaxes(type="log", title_text="loss (nats, log axis)", col=1)
    fig.update_yaxes(type="log", col=2)
    return fig


def weights_by_unit(run: Run, replica: int, after: int = -1) -> pd.DataFrame:
    """`replica`'s weight at every sync after step `after` (rows: sync step) and unit (columns): 0 where it was
    left out, about 1/R where it entered as an equal."""
    pt = penalty_table(run)
    pt = pt[(pt["replica"] == replica) & (pt["step"] > after)]
    out = pt.pivot_table(index="step", columns="unit", values="weight", aggfunc="first")
    out.columns = [f"unit {int(u)}" for u in out.columns]
    return out


def weights_figure(runs: Sequence[Run], labels: Sequence[str], replica: int, after: int = -1,
                   title: str | None = None) -> go.Figure:
    """One heat map per run (at most a handful): `replica`'s weight per unit (rows) and sync step (columns); 0 (dark)
    is left out, about 0.5 (light) entered as one of two equals."""
    from plotly.subplots import make_subplots

    tables = [weights_by_unit(r, replica, after) for r in runs]
    fig = make_subplots(rows=len(runs), cols=1, shared_xaxes=True, vertical_spacing=0.16,
                        subplot_titles=list(labels))
    for i, t in enumerate(tables, start=1):
        fig.add_trace(go.Heatmap(z=t.T.values, x=list(t.index), y=list(t.columns), zmin=0.0, zmax=1.0,
                                 colorscale="Viridis", showscale=(i == 1),
                                 colorbar=dict(title=dict(text="weight", side="right"), len=0.8),
                                 hovertemplate="step %{x}, %{y}: weight %{z:.3f}<extra></extra>"), row=i, col=1)
    fig.update_xaxes(title_text="sync step", row=len(runs), col=1)
    fig.update_layout(height=170 + 190 * len(runs), margin=dict(t=80, l=70, r=30, b=50),
                      title=title or f"Replica {replica}'s weight per unit and sync (0: left out)")
    return fig


def weights_values(runs: Sequence[Run], labels: Sequence[str], replica: int, after: int = -1) -> pd.DataFrame:
    """`weights_figure`'s numbers as one table: a column per (run, unit)."""
    return pd.concat({label: weights_by_unit(r, replica, after) for label, r in zip(labels, runs)}, axis=1)


#: The lab's rules as notebook 05 names them, in the order a sync applies them to a replica: (name, the test in
#: words, the knob). The flowchart draws them; the names are the student's vocabulary (the method page numbers the
#: same choices as decisions D1, D11, D15, D16 for developers).
RULES = (
    ("stands out", "on some unit its detector flags q (z > δ·f) and q > κ_e", "δ = 3, κ_e = 1.6"),
    ("own memory", "with fewer than 3 peers: only if its own G/k rose δ_m σ above its history", "δ_m = 1.5"),
    ("whole replica", "flagged on one unit: out of every unit", ""),
    ("stays out", "out last sync: stays out while some unit has q > κ_s (and its memory agrees)", "κ_s = 1.3"),
    ("never learn an outlier", "a flagged replica's detectors and memory learn nothing", ""),
    ("last sync keeps the last verdict", "a closing sync that ends a short round is not judged", ""),
)


def rules_flowchart() -> go.Figure:
    """The lab's rules for one replica at one sync, as a flowchart of boxes and arrows (plotly annotations): two
    questions on the way in (stands out, own memory), two on the way back (out last sync, stays out), ending at OUT
    (of every unit) or IN, named as `RULES` names them. Arrows never cross and their labels sit apart."""
    boxes = {  # name: (x, y, text, colour)
        "stand": (0.2, 0.86, "<b>stands out</b> on some unit?<br>its detector flags q (z > δ·f)<br>and q > κ_e",
                  "#fff2cc"),
        "mem": (0.62, 0.86, "<b>own memory</b> (2 or 3 replicas):<br>did its own G/k rise<br>δ_m σ above its history?",
                "#fff2cc"),
        "was": (0.2, 0.5, "was it out<br>at the last sync?", "#fff2cc"),
        "stay": (0.62, 0.5, "<b>stays out</b>: some unit's q > κ_s<br>and its memory agrees?", "#fff2cc"),
        "out": (0.9, 0.16, "<b>OUT of every unit</b><br>(<b>whole replica</b>;<br><b>never learn an outlier</b>)",
                "#f4cccc"),
        "in": (0.2, 0.16, "<b>IN</b>: its softmax weight;<br>its detectors learn q", "#d9ead3"),
    }
    arrows = [("stand", "mem", "yes", 0.5), ("stand", "was", "no", 0.5), ("mem", "was", "no: not the one that moved", 0.35),
              ("mem", "out", "yes", 0.5), ("was", "stay", "yes", 0.5), ("was", "in", "no", 0.5),
              ("stay", "out", "yes", 0.5), ("stay", "in", "no: back in", 0.5)]
    half_w, half_h = 0.15, 0.085  # a box's half size, in the axes' units
    fig = go.Figure()
    for x, y, text, colour in boxes.values():
        fig.add_annotation(x=x, y=y, text=text, showarrow=False, bgcolor=colour, bordercolor="#555", borderwidth=1,
                           borderpad=6, font=dict(size=13), xref="x", yref="y")
    for a, b, label, at in arrows:
        (x0, y0, *_), (x1, y1, *_) = boxes[a], boxes[b]
        dx, dy = x1 - x0, y1 - y0
        t = min(half_w / abs(dx) if dx else math.inf, half_h / abs(dy) if dy else math.inf)
        fig.add_annotation(x=x1 - t * dx, y=y1 - t * dy, ax=x0 + t * dx, ay=y0 + t * dy, xref="x", yref="y",
                           axref="x", ayref="y", showarrow=True, arrowhead=2, arrowwidth=1.5, arrowcolor="#555",
                           text="")
        if label:
            fig.add_annotation(x=x0 + at * dx, y=y0 + at * dy, text=f"<i>{label}</i>", showarrow=False,
                               xref="x", yref="y", font=dict(size=12), bgcolor="white")
    fig.update_xaxes(visible=False, range=[0, 1.08])
    fig.update_yaxes(visible=False, range=[0, 1])
    fig.update_layout(height=460, margin=dict(l=10, r=10, t=50, b=10), plot_bgcolor="white",
                      title="The lab's rules for one replica at one sync (q: its G/k over its peers' median)")
    return fig


def rules_table() -> pd.DataFrame:
    """`RULES` as a table: the flowchart's words, exactly."""
    return pd.DataFrame(RULES, columns=["rule", "in words", "knob"]).set_index("rule")
