"""Where one step went, per replica, for several runs side by side: one small figure instead of a timeline each.

Why: a diagnosis compares runs (which replica was slow, whether every replica waited), and a full timeline
per run is a figure per run to read lane by lane. Here each replica of each run is one bar of the step's
time on its first rank (shard 0), split four ways:

- **compute**: its own forward, backward, optimizer and outer-step spans;
- **straggling**: the simulated slowness (`straggle` spans, stragglers.py);
- **blocked on the sync group**: the exposed part of its sync-group collectives, each instant once
  (`Overlap.replica_blocked_s`, the definition behind `sync_wait_s` and every table's `blocked_s`);
- **the rest**: the step's span less those three (unhidden shard-group transfers, host time between spans).
"""

from __future__ import annotations

from collections.abc import Mapping

import pandas as pd
import plotly.graph_objects as go

from edit_lab.records.analysis import RunLike, as_run
from edit_lab.records.events import is_cross_replica
from edit_lab.viz.colors import KIND_COLORS
from edit_lab.viz.layout import legend_below, title_layout, title_text, top_margin

COMPUTE_KINDS = ("compute_fwd", "compute_bwd", "optimizer", "outer_step")
PARTS = {  # column -> (legend label, colour): one colour per meaning
    "compute_ms": ("compute (forward, backward, optimizer, outer step)", KIND_COLORS["compute_bwd"]),
    "straggle_ms": ("straggling (the simulated slowness)", KIND_COLORS["straggle"]),
    "blocked_ms": ("blocked on the sync group", KIND_COLORS["wait"]),
    "rest_ms": ("the rest (shard-group transfers, host time)", "#BDBDBD"),
}


def step_split_table(run: RunLike, step: int) -> pd.DataFrame:
    """One row per replica: the step's span on its shard-0 rank (ms) and the four parts of the module docstring."""
    r = as_run(run)
    shards = r.config.shards
    rows = []
    for replica in range(r.config.replicas):
        rank = replica * shards
        evs = [e for e in r.events if e["rank"] == rank and e["step"] == step]
        if not evs:
            continue
        span = max(e["t1"] for e in evs) - min(e["t0"] for e in evs)
        compute = sum(e["t1"] - e["t0"] for e in evs if e["kind"] in COMPUTE_KINDS)
        straggle = sum(e["t1"] - e["t0"] for e in evs if e["kind"] == "straggle")
        cross = [e for e in evs if is_cross_replica(e)]
        blocked = r.overlap.rank_totals(cross).get(rank, {}).get("exposed_s", 0.0)  # as replica_blocked_s, one rank
        rows.append({"replica": replica, "step_ms": 1e3 * span, "compute_ms": 1e3 * compute,
                     "straggle_ms": 1e3 * straggle, "blocked_ms": 1e3 * blocked,
                     "rest_ms": 1e3 * max(span - compute - straggle - blocked, 0.0)})
    return pd.DataFrame(rows, columns=["replica", "step_ms", *PARTS])


def step_split_figure(runs: Mapping[str, RunLike], step: int, title: str | None = None) -> go.Figure:
    """A stacked bar per (run, replica): where `step` went, the runs one under the other."""
    labels, tables = [], []
    for name, run in runs.items():
        t = step_split_table(run, step)
        tables.append(t)
        labels += [f"{name} · replica {int(rep)}" for rep in t["replica"]]
    fig = go.Figure()
    for col, (label, color) in PARTS.items():
        xs = [x for t in tables for x in t[col]]
        fig.add_trace(go.Bar(y=labels, x=xs, orientation="h", name=label, marker_color=color,
                             hovertemplate=f"%{{y}}: %{{x:.1f}} ms {label}<extra></extra>", meta={"part": col}))
    head = title or f"Where step {step} went, per replica"
    text = title_text(head, "each replica's first rank; blocked = its sync-group collectives' exposed time")
    fig.update_layout(barmode="stack", template="plotly_white", title=title_layout(text), autosize=True,
                      height=140 + 24 * len(labels), legend=legend_below(traceorder="normal"),
                      margin=dict(l=130, r=20, t=top_margin(text), b=40), meta={"step": step, "bars": labels})
    fig.update_yaxes(autorange="reversed")
    fig.update_xaxes(title_text=f"ms of step {step}", rangemode="tozero")
    return fig
