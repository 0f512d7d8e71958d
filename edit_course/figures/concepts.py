"""Figures of the method's arithmetic, drawn before (or instead of) a run: what a run should show.

Every function here is pure: it draws numbers the notebook computed with the library (a schedule,
a `Mesh`, `UnitLayout`s, a parameter count), not a run's records, so the notebooks keep the
computation in view and the figure code out of it.

    sync_straggler_figure(2.0)              01: synchronous steps with one replica ×2 slower, idealised
    sync_schedule_figure({10: "gggAS…"})    02: which steps warm up, create anchors, sync, for each τ
    layerwise_sync_figure(4, 1.0, 1.0)      04: EDiT's sync unit by unit, with prefetch off and on, idealised
    rounds_schedule_figure(2.0, 4)          06: sync, EDiT and A-EDiT rounds with one replica ×2 slower, idealised
    mesh_figure(meshes)                     03: the S × R mesh, shard groups as rows, sync groups as columns
    shard_layout_figure(layouts, names)     03: each unit as one flat buffer cut into S shards, with padding
    outer_state_figure(P, S, bytes)         03: anchor + momentum per rank, 2·P/S against 2·P, and the runs
    rank_bytes_figure("base100m", P, 8)     03: what one rank holds, sharded against unsharded outer state
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence

import plotly.graph_objects as go

from edit_lab.core.mesh import Mesh
from edit_lab.core.sharding import UnitLayout
from edit_lab.viz.layout import legend_below, title_layout, title_text, top_margin

COMPUTE, BLOCKED = "#1F77B4", "#D62728"
BYTES_PER_VALUE = 4  # float32


def sync_straggler_figure(slow_factor: float, steps: int = 3) -> go.Figure:
    """`steps` synchronous steps of two replicas, replica 1 `slow_factor` times slower, from those two numbers
    only (communication ignored): every step lasts as long as the slow replica's compute, and the healthy
    replica stands blocked in the all-reduce (red, hatched) for the rest of it. Time is in healthy steps."""
    fig = go.Figure()
    step_len = slow_factor  # every step lasts as long as the slow replica's compute
    for k in range(steps):
        t0 = k * step_len
        for rep, name in ((0, "replica 0 (healthy)"), (1, f"replica 1 (×{slow_factor:g})")):
            compute = 1.0 if rep == 0 else slow_factor
            fig.add_trace(go.Bar(y=[name], x=[compute], base=[t0], orientation="h", marker_color=COMPUTE,
                                 name="compute", showlegend=k == 0 and rep == 0))
            if compute < step_len:
                fig.add_trace(go.Bar(y=[name], x=[step_len - compute], base=[t0 + compute], orientation="h",
                                     marker=dict(color=BLOCKED, pattern_shape="/"), name="blocked in the all-reduce",
                                     showlegend=k == 0))
        fig.add_vline(x=t0 + step_len, line=dict(color="#555555", dash="dot"))
    fig.update_layout(barmode="overlay", template="plotly_white", height=260, yaxis=dict(autorange="reversed"),
                      title=f"Idealised: sync with one replica ×{slow_factor:g} slower (dotted: the all-reduce, every step)",
                      xaxis=dict(title="time, in healthy steps"), legend=legend_below(), margin=dict(b=40))
    return fig


SYNC_LINK = "#17BECF"  # the timeline's sync_reduce colour


def layerwise_schedule(units: int, compute: float, transfer: float, prefetch: bool) -> dict[str, list]:
    """EDiT's sync step in the forward pass, idealised: `units` units, each `compute` long, each unit's sync
    transfer `transfer` long on one link that carries one transfer at a time (the shard group's all-gathers
    and everything but the forward are left out).

    A unit computes once its transfer is done and the unit before it has computed. Without prefetch a unit's
    transfer is issued when the rank reaches that unit; with prefetch the next unit's is issued too, so it
    travels while this unit waits and computes. Returns intervals: `transfer`, `compute`, `blocked` (the rank
    waiting, nothing to compute), each a list of (unit, start, end)."""
    link_free, issued, done_compute = 0.0, {}, 0.0
    out: dict[str, list] = {"transfer": [], "compute": [], "blocked": []}
    ends: dict[int, float] = {}

    def issue(u: int, at: float) -> None:
        nonlocal link_free
        if u >= units or u in issued:
            return
        start = max(at, link_free)
        issued[u], ends[u], link_free = start, start + transfer, start + transfer
        out["transfer"].append((u, start, start + transfer))

    for u in range(units):
        reach = done_compute
        issue(u, reach)
        if prefetch:
            issue(u + 1, reach)
        start = max(reach, ends[u])
        if start > reach:
            out["blocked"].append((u, reach, start))
        out["compute"].append((u, start, start + compute))
        done_compute = start + compute
    return out


def layerwise_sync_figure(units: int, compute: float, transfer: float) -> go.Figure:
    """`layerwise_schedule` with prefetch off and on, one rank and its sync link each, time in units of compute."""
    fig = go.Figure()
    shown: set[str] = set()
    ends = {}
    for prefetch in (False, True):
        sched = layerwise_schedule(units, compute, transfer, prefetch)
        tag = "prefetch on" if prefetch else "prefetch off"
        ends[tag] = max(e for _, _, e in sched["compute"])
        rows = {"compute": f"{tag} · rank", "blocked": f"{tag} · rank", "transfer": f"{tag} · sync link"}
        styles = {"compute": ("compute a unit", dict(color=COMPUTE)),
                  "blocked": ("blocked: waiting for its sync", dict(color=BLOCKED, pattern_shape="/")),
                  "transfer": ("a unit's sync transfer (sync_reduce)", dict(color=SYNC_LINK))}
        for part, intervals in sched.items():
            name, marker = styles[part]
            fig.add_trace(go.Bar(y=[rows[part]] * len(intervals), x=[b - a for _, a, b in intervals],
                                 base=[a for _, a, _ in intervals], orientation="h", marker=marker, name=name,
                                 text=[f"u{u}" if part != "blocked" else "" for u, _, _ in intervals],
                                 textposition="inside", insidetextanchor="middle", showlegend=part not in shown,
                                 legendgroup=part, meta={"part": part, "prefetch": prefetch}))
            shown.add(part)
    return _idealised_layout(fig, "Idealised: EDiT's sync step, unit by unit",
                             f"{units} units, each transfer {transfer:g}× a unit's compute, one at a time on the link: "
                             f"the forward ends at {ends['prefetch off']:g} without prefetch, at {ends['prefetch on']:g} "
                             "with it", "time, in units of one unit's compute", 330, 150, {"ends": ends})


def _idealised_layout(fig: go.Figure, head: str, sub: str, xtitle: str, height: int, left: int,
                      meta: dict) -> go.Figure:
    """The layout of the idealised timelines: rows top down, a titled time axis from 0, the legend below."""
    text = title_text(head, sub)
    fig.update_layout(barmode="overlay", template="plotly_white", height=height, yaxis=dict(autorange="reversed"),
                      title=title_layout(text), autosize=True, xaxis=dict(title=xtitle, rangemode="tozero"),
                      legend=legend_below(), margin=dict(l=left, r=20, t=top_margin(text), b=40), meta=meta)
    return fig


def rounds_schedule(method: str, slow: float, tau: int, rounds: int = 2) -> dict[int, list[tuple[str, float, float]]]:
    """Two replicas, replica 1 `slow`× slower, idealised (transfers free): per replica, its ("step", t0, t1)
    and ("blocked", t0, t1) intervals over `rounds` of EDiT's rounds (τ = `tau` steps), time in fast steps.

    sync meets after every step, so every step lasts `slow` and the fast replica stands blocked for the rest;
    EDiT meets after `tau` steps of each; A-EDiT meets every T_sync = `tau` fast steps of time, and each
    replica trains the steps that fit (the fast one `tau`, the slow one `tau / slow`), so nobody waits."""
    steps = {0: 1.0, 1: slow}
    until = rounds * tau * slow  # the same seconds for the three methods
    out: dict[int, list[tuple[str, float, float]]] = {0: [], 1: []}
    if method == "aedit":
        for rep, dt in steps.items():
            t = 0.0
            while t + dt <= until + 1e-9:
                out[rep].append(("step", t, t + dt))
                t += dt
        return out
    per_round = 1 if method == "sync" else tau
    t = 0.0
    while t + per_round * slow <= until + 1e-9:
        for rep, dt in steps.items():
            for k in range(per_round):
                out[rep].append(("step", t + k * dt, t + (k + 1) * dt))
            if per_round * dt < per_round * slow:
                out[rep].append(("blocked", t + per_round * dt, t + per_round * slow))
        t += per_round * slow
    return out


def rounds_schedule_figure(slow: float, tau: int, rounds: int = 2) -> go.Figure:
    """`rounds_schedule` of sync, EDiT and A-EDiT one under the other, one row per replica, the same seconds."""
    fig = go.Figure()
    shown: set[str] = set()
    steps_done = {}
    for method, name in (("sync", "sync"), ("edit", f"EDiT, τ = {tau}"), ("aedit", f"A-EDiT, T_sync = {tau} steps")):
        sched = rounds_schedule(method, slow, tau, rounds)
        for rep, intervals in sched.items():
            row = f"{name} · replica {rep}" + (f" (×{slow:g})" if rep == 1 else "")
            steps_done[(method, rep)] = sum(1 for kind, _, _ in intervals if kind == "step")
            for kind in ("step", "blocked"):
                ivs = [(a, b) for k, a, b in intervals if k == kind]
                if not ivs:
                    continue
                label = "a local step" if kind == "step" else "blocked: waiting for the slow replica"
                marker = (dict(color=COMPUTE, line=dict(color="#FFFFFF", width=1)) if kind == "step"
                          else dict(color=BLOCKED, pattern_shape="/"))
                fig.add_trace(go.Bar(y=[row] * len(ivs), x=[b - a for a, b in ivs], base=[a for a, _ in ivs],
                                     orientation="h", marker=marker, name=label, legendgroup=kind,
                                     showlegend=kind not in shown, meta={"method": method, "replica": rep,
                                                                          "part": kind}))
                shown.add(kind)
    return _idealised_layout(fig, "Idealised: the rounds of sync, EDiT and A-EDiT",
                             f"replica 1 ×{slow:g} slower, transfers free, the same seconds: the fast replica trains "
                             f"{steps_done[('sync', 0)]}, {steps_done[('edit', 0)]} and {steps_done[('aedit', 0)]} steps",
                             "time, in the fast replica's steps", 360, 210,
                             {"steps": {f"{m}/{r}": n for (m, r), n in steps_done.items()}})


# one character per step, as notebook 02's `schedule` writes them ("." = a local step, not drawn)
SCHEDULE_MARKS = {"g": ("warm-up step: gradients all-reduced", "#7F7F7F", "square"),
                  "A": ("anchors created", "#FF7F0E", "diamond"), "S": ("sync", "#D62728", "star")}


def sync_schedule_figure(schedules: Mapping[int, str], warmup: int) -> go.Figure:
    """One row per sync interval τ (`schedules`: τ -> one character per step, 'g' warm-up, 'A' anchors
    created, 'S' sync, '.' local): when the sync group meets. Every unmarked step is local."""
    steps = max((len(s) for s in schedules.values()), default=0)
    fig = go.Figure()
    for label, (name, color, symbol) in SCHEDULE_MARKS.items():
        xs, ys = [], []
        for tau, marks in schedules.items():
            for s, ch in enumerate(marks):
                if ch == label:
                    xs.append(s)
                    ys.append(f"τ = {tau}")
        fig.add_trace(go.Scatter(x=xs, y=ys, mode="markers", name=name,
                                 marker=dict(color=color, symbol=symbol, size=10 if label != "g" else 6)))
    fig.update_layout(template="plotly_white", height=120 + 40 * len(schedules),
                      title=f"When the sync group meets: W = {warmup}, every unmarked step is local",
                      xaxis=dict(title="step", range=[-1, steps]), legend=legend_below(), margin=dict(b=40))
    return fig


REPLICA_FILLS = ("#DCEAF7", "#FCE5CD", "#D9EAD3", "#EADCF2")


def mesh_figure(meshes: Sequence[Mesh]) -> go.Figure:
    """The 2-D mesh of `meshes` (one `Mesh` per rank, in rank order): a box per rank at (shard, replica),
    a shard group per row (one replica), a sync group per dotted column (one shard index), each labelled
    with the ranks the `Mesh` computes for it."""
    shards = max(m.shard for m in meshes) + 1
    replicas = max(m.replica for m in meshes) + 1
    by_rank = {m.rank: m for m in meshes}
    fig = go.Figure()
    for m in meshes:
        fig.add_shape(type="rect", x0=m.shard - 0.42, x1=m.shard + 0.42, y0=m.replica - 0.38, y1=m.replica + 0.38,
                      line=dict(color="#444444"), fillcolor=REPLICA_FILLS[m.replica % len(REPLICA_FILLS)],
                      layer="below")  # under the rank labels
    fig.add_trace(go.Scatter(x=[m.shard for m in meshes], y=[m.replica for m in meshes], mode="text",
                             text=[f"<b>rank {m.rank}</b>" for m in meshes], hoverinfo="text", showlegend=False,
                             hovertext=[f"rank {m.rank}: replica {m.replica}, shard {m.shard}<br>shard group "
                                        f"{m.shard_group_ranks()}<br>sync group {m.sync_group_ranks()}" for m in meshes]))
    for r in range(replicas):  # shard groups: rows
        fig.add_annotation(x=-0.6, y=r, text=f"replica {r}<br>shard group {by_rank[r * shards].shard_group_ranks()}",
                           showarrow=False, xanchor="right", font=dict(size=11))
    for s in range(shards):  # sync groups: columns
        fig.add_shape(type="rect", x0=s - 0.47, x1=s + 0.47, y0=-0.47, y1=replicas - 0.53,
                      line=dict(color="#CC0000", dash="dot", width=2))
        fig.add_annotation(x=s, y=replicas - 0.2, text=f"sync group<br>{by_rank[s].sync_group_ranks()}",
                           showarrow=False, font=dict(size=11, color="#CC0000"))
    fig.update_layout(template="plotly_white", height=360, autosize=True, margin=dict(l=190, t=70),
                      title=f"The 2-D mesh: S = {shards} shards × R = {replicas} replicas (rows: shard groups, "
                            "dotted columns: sync groups)",
                      xaxis=dict(title="shard index s", tickvals=list(range(shards)), range=[-0.6, shards - 0.4],
                                 showgrid=False, zeroline=False),
                      yaxis=dict(title=None, showticklabels=False, range=[replicas + 0.15, -0.6], showgrid=False,
                                 zeroline=False))  # replica 0 on top
    return fig


SHARD_COLORS = ("#1F77B4", "#FF7F0E", "#2CA02C", "#9467BD")
#: The ZeRO-3 figure's height: title, x axis and a three-row legend below, then a row per unit.
ZERO3_FIXED_PX, ZERO3_ROW_PX = 250, 45


def shard_layout_figure(layouts: Sequence[UnitLayout], names: Sequence[str], model: str) -> go.Figure:
    """What ZeRO-3 splits: one row per unit (`names`), its flat buffer cut into the S shards of its
    `UnitLayout` (rank s of a replica keeps shard s), and the padding (grey, hatched) that rounds the
    buffer up to a multiple of S. All layouts have the same S."""
    shards = {lay.padded // lay.shard_size for lay in layouts if lay.shard_size}
    if len(shards) != 1:
        raise ValueError(f"layouts: every unit must be cut into the same number of shards, got {sorted(shards)}")
    (n_shards,) = shards
    fig = go.Figure()
    for s in range(n_shards):
        fig.add_trace(go.Bar(y=list(names), x=[lay.shard_size for lay in layouts],
                             base=[s * lay.shard_size for lay in layouts], orientation="h",
                             name=f"shard {s}: kept by rank s = {s} of the replica",
                             marker=dict(color=SHARD_COLORS[s % len(SHARD_COLORS)], line=dict(color="white", width=2)),
                             hovertemplate="%{y}: values %{base:,} … %{x:,} of them<extra>shard " + str(s) + "</extra>"))
    fig.add_trace(go.Bar(y=list(names), x=[lay.padded - lay.numel for lay in layouts], base=[lay.numel for lay in layouts],
                         orientation="h", name="padding to a multiple of S",
                         marker=dict(color="#BBBBBB", pattern_shape="/")))
    # the legend below takes three rows: without room for them plotly drew 3 units in ~50 px and hid every
    # other unit's name; dtick=1 names every unit
    fig.update_layout(barmode="overlay", template="plotly_white", height=ZERO3_FIXED_PX + ZERO3_ROW_PX * len(layouts),
                      title=f"What ZeRO-3 splits: each unit of {model} as one flat buffer, cut into S = {n_shards} shards",
                      xaxis=dict(title="position in the unit's flat buffer (float32 values)", tickformat="~s"),
                      yaxis=dict(autorange="reversed", dtick=1), legend=legend_below(), margin=dict(b=40))
    return fig


def outer_state_figure(num_params: int, measured_shards: Sequence[int], measured_bytes: Sequence[float],
                       model: str) -> go.Figure:
    """Anchor + outer momentum per rank against S: EDiT's 2·P/S (float32), an unsharded DiLoCo's 2·P, and
    the bytes the runs measured (`measured_shards[i]` shards held `measured_bytes[i]` per rank)."""
    p = num_params
    xs = list(range(1, max(8, max((int(s) for s in measured_shards), default=1)) + 1))
    fig = go.Figure([
        go.Scatter(x=xs, y=[BYTES_PER_VALUE * 2 * p / s for s in xs], mode="lines", name="EDiT: 2·P/S per rank",
                   line=dict(color="#2CA02C")),
        go.Scatter(x=xs, y=[BYTES_PER_VALUE * 2 * p] * len(xs), mode="lines", name="unsharded DiLoCo: 2·P per rank",
                   line=dict(color="#D62728", dash="dash")),
        go.Scatter(x=list(measured_shards), y=list(measured_bytes), mode="markers", name="measured (this notebook's runs)",
                   marker=dict(size=12, symbol="diamond", color="#000000")),
    ])
    fig.update_layout(template="plotly_white", height=380, title=f"Anchor + outer momentum per rank, {model} (P = {p:,})",
                      xaxis=dict(title="S: shards per replica", dtick=1), yaxis=dict(title="bytes per rank", tickformat="~s"))
    return fig


def rank_bytes(num_params: int, shards: int) -> dict[str, dict[str, float]]:
    """Bytes one rank holds (float32): the parameter shard P/S, AdamW's two moments 2·P/S, and anchor +
    momentum, 2·P/S when sharded (EDiT) or 2·P when not (an unsharded DiLoCo)."""
    p = num_params
    parts = {"parameter shard": p / shards, "AdamW state": 2 * p / shards}
    return {"EDiT (sharded outer state)": {k: BYTES_PER_VALUE * v for k, v in {**parts, "anchor + momentum": 2 * p / shards}.items()},
            "DiLoCo (unsharded outer state)": {k: BYTES_PER_VALUE * v for k, v in {**parts, "anchor + momentum": 2 * p}.items()}}


def rank_bytes_figure(model: str, num_params: int, shards: int) -> go.Figure:
    """`rank_bytes` as stacked bars, one per method: what the outer state's sharding saves per rank."""
    held = rank_bytes(num_params, shards)
    methods = list(held)
    fig = go.Figure([go.Bar(name=part, x=methods, y=[held[m][part] for m in methods]) for part in held[methods[0]]])
    fig.update_layout(barmode="stack", template="plotly_white", height=360,
                      title=f"{model} (P = {num_params:,}) on S = {shards}: bytes per rank",
                      yaxis=dict(tickformat="~s", title="bytes"))
    return fig
