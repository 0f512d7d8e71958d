"""Memory per rank: parameter shards, inner optimizer state, and what a method keeps on top (anchor, momentum).

The point to see: EDiT's anchor and outer momentum are sharded like the parameters, so they cost
2·P/S values per rank, where an unsharded DiLoCo would keep 2·P. On top sits the peak of the full
parameters the shard group gathered (`gathered_peak`): with `reshard_after_forward` (FSDP's
default) about two blocks plus the root unit are alive at once, without it the whole model is, from
the forward until the end of the backward. Bars are stacked per rank from
`summary.json`'s memory report; peak resident memory of the process is in the hover (it is
dominated by the Python and torch runtime on a small model, so it is not stacked with the rest).
"""

from __future__ import annotations

from collections.abc import Sequence

import plotly.graph_objects as go

from edit_lab.records.analysis import RunLike, as_runs, memory_table, run_labels
from edit_lab.viz.layout import empty_figure, legend_below, title_layout, title_text, top_margin

PARTS: dict[str, tuple[str, str]] = {
    "params": ("parameter shards", "#1F77B4"),
    "optimizer": ("inner optimizer state", "#9467BD"),
    "method_state": ("method state (anchor + outer momentum)", "#2CA02C"),
    "gathered_peak": ("gathered full parameters (peak alive at once)", "#FF7F0E"),
}
NOT_STACKED = ("rank", "replica", "shard", "peak_rss", "peak_cuda")


def _mib(n: float) -> str:
    return f"{n / 2**20:.2f} MiB" if n >= 2**20 else f"{n / 2**10:.1f} KiB"


def memory_figure(runs: RunLike | Sequence[RunLike], labels: Sequence[str] | None = None,
                  title: str | None = None) -> go.Figure:
    """Stacked bytes per rank (x: rank, or run and rank for several runs), one trace per kind of state."""
    rs = as_runs(runs)
    names = run_labels(rs, labels)
    tables = [memory_table(r) for r in rs]
    if all(t.empty for t in tables):
        return empty_figure(title or "Memory per rank", "no memory report in summary.json")
    parts: list[str] = []
    for t in tables:
        for c in t.columns:
            if c not in NOT_STACKED and c not in parts:
                parts.append(c)
    parts.sort(key=lambda p: list(PARTS).index(p) if p in PARTS else len(PARTS))
    many = len(rs) > 1
    xs_run: list[str] = []
    xs_rank: list[str] = []
    rows = []
    for name, t in zip(names, tables):
        for _, row in t.iterrows():
            xs_run.append(name)
            xs_rank.append(f"rank {int(row['rank'])}")
            rows.append(row)
    x = [xs_run, xs_rank] if many else xs_rank
    fig = go.Figure()
    for p in parts:
        label, color = PARTS.get(p, (p.replace("_", " "), None))
        ys = [float(row[p]) if p in row and row[p] == row[p] else 0.0 for row in rows]
        custom = [[_mib(y), int(row["replica"]), int(row["shard"]),
                   _mib(float(row["peak_rss"])) if "peak_rss" in row and row["peak_rss"] == row["peak_rss"] else "–"]
                  for y, row in zip(ys, rows)]
        fig.add_trace(go.Bar(x=x, y=ys, name=label, marker_color=color, customdata=custom, meta={"role": p},
                             hovertemplate=f"{label}: %{{y:,.0f}} bytes (%{{customdata[0]}})<br>replica "
                                           "%{customdata[1]}, shard %{customdata[2]}<br>peak RSS of the process "
                                           "%{customdata[3]}<extra>%{x}</extra>"))
    head = title or ("Memory per rank: " + (names[0] if not many else f"{len(names)} runs"))
    title_txt = title_text(head, "bytes each rank holds for the model; the anchor and outer momentum are sharded "
                                 "like the parameters; gathered parameters at their peak (with reshard_after_forward "
                                 "one or two blocks, else every block)")
    fig.update_layout(title=title_layout(title_txt), margin=dict(t=top_margin(title_txt)),
                      barmode="stack", template="plotly_white", height=460, legend=legend_below("state"),
                      yaxis=dict(title="bytes per rank", tickformat="~s", ticksuffix="B"),
                      xaxis=dict(title="rank" if not many else "run / rank"), meta={"parts": parts})
    return fig
