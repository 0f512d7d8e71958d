"""The timeline: what every rank did, when, and which communication was hidden under compute.

Each rank gets one lane (ranks grouped by replica), and each lane three rows:

- **compute**: what the rank's main thread did: forward/backward compute per unit, optimizer and
  outer steps, straggler pauses, and `wait` bars where it stood blocked on an async collective;
- **shard comm**: shard-group collectives in flight (all-gather, reduce-scatter, norms), issue to completion;
- **sync comm**: sync-group collectives in flight (gradient all-reduce, EDiT's sync, averaging).

A collective bar is drawn in its kind's colour and cut in three by `overlap.py`'s one definition:
the part during which the rank waited on it (*exposed*) is hatched red; the part during which the
rank waited on *another* collective is hatched grey; the un-hatched rest travelled while the rank
computed (*hidden*: what prefetch is for). With prefetch on, EDiT's sync bars start one unit early,
run under the previous unit's compute and carry only a thin red end; without it they are hatched
from end to end and the compute row has a gap above them.

One `go.Bar` trace per event kind (bars with `base=` on a horizontal orientation), so the legend
switches kinds on and off, hover shows unit, step, bytes and duration, and a test can count bars.

That is the **full** view (`view="full"`, the timeline explorer's and the report's). The default is the
**essential** view, one message: one lane per replica (its shard-0 rank, unless `ranks` are given), two rows,
one colour per meaning, the palette of the rounds picture (`viz/rounds.py`):

- compute row: **compute** (forward, backward, optimizer, outer step) in two blues alternating by step,
  the straggler's pause (brown, dotted), evaluation (grey), and **waiting** (red): every moment the rank
  stood blocked on a collective of any group, i.e. the union of every collective's exposed part;
- sync row: **sync-group traffic** in flight (cyan), hatched as in the full view where the rank waited on it
  (red) or on another collective (grey). The shard group's traffic (inside one machine) is left out.
"""

from __future__ import annotations

import math
from collections.abc import Iterable
from typing import Any

import plotly.graph_objects as go

from edit_lab.records.analysis import RunLike, StepRange, as_run, event_rows, run_label
from edit_lab.records.events import coords, is_comm
from edit_lab.records.overlap import LEGEND, Overlap, Split, merge
from edit_lab.registry import capabilities
from edit_lab.viz.episode import add_episode
from edit_lab.viz.colors import BLOCKED_OTHER, EXPOSED, ROUND_COLORS, kind_color, kind_label, kind_sort_key, rgba
from edit_lab.viz.layout import legend_below, title_layout, title_text, top_margin

#: Row offsets inside a lane (the y axis is reversed, so compute is on top).
ROWS = {"compute": -0.3, "shard": 0.0, "sync": 0.3}
ROW_NAMES = {"compute": "compute", "shard": "shard-group comm", "sync": "sync-group comm"}
#: The essential view's two rows (no shard-group row).
ESSENTIAL_ROWS = {"compute": -0.2, "sync": 0.2}
VIEWS = ("essential", "full")
#: What the essential view draws as one "compute" colour.
COMPUTE_KINDS = frozenset({"compute_fwd", "compute_bwd", "optimizer", "outer_step"})
BAR_WIDTH = 0.26
STAGGER = BAR_WIDTH / 4
REPLICA_GAP = 0.6
MAX_EVENTS = 20_000  # beyond this a browser struggles; the default step range is cut to fit


def row_of(ev: dict[str, Any]) -> str:
    """Which row of its rank's lane an event belongs to."""
    if not is_comm(ev["kind"], ev.get("group")):
        return "compute"
    return "shard" if ev.get("group") == "shard" else "sync"


def bar_place(ev: dict[str, Any], lanes: dict[int, float], rows: dict[str, float] = ROWS) -> tuple[float, float]:
    """(y, thickness) of an event's bar. Collectives of a unit are half as thick and staggered by the
    unit's parity, so that unit l+1's transfer, started while unit l's is still in flight (prefetch),
    shows as a second bar beside the first instead of hiding under it."""
    row = row_of(ev)
    y = lanes[ev["rank"]] + rows[row]
    if row == "compute" or ev.get("unit") is None:
        return y, BAR_WIDTH
    return y + (STAGGER if ev["unit"] % 2 else -STAGGER), BAR_WIDTH / 2


def lane_positions(ranks: Iterable[tuple[int, int, int]]) -> dict[int, float]:
    """y centre of each rank's lane from (rank, replica, shard) triples, ordered by replica then shard."""
    out: dict[int, float] = {}
    y = 0.0
    prev_rep = None
    for rank, rep, _ in sorted(set(ranks), key=lambda t: (t[1], t[2], t[0])):
        if prev_rep is not None and rep != prev_rep:
            y += REPLICA_GAP
        out[rank] = y
        y += 1.0
        prev_rep = rep
    return out


def unit_label(ev: dict[str, Any]) -> str:
    u = ev.get("unit")
    if u is None:
        return "–"
    if u == 0:
        part = (ev.get("data") or {}).get("part")
        return "0 (root" + (f": {part})" if part else ")")
    return f"{u} (block {u - 1})"


def fmt_bytes(n: int) -> str:
    if not n:
        return ""
    for unit, scale in (("GB", 1e9), ("MB", 1e6), ("kB", 1e3)):
        if n >= scale:
            return f"{n / scale:.1f} {unit}"
    return f"{n} B"


def _extra(ev: dict[str, Any], ov: Overlap) -> str:
    data = ev.get("data") or {}
    if is_comm(ev["kind"], ev.get("group")):
        sp = ov.split(ev)
        how = "async, waited for later" if data.get("overlapped") else "blocking"
        return (f"{ev['group']} group, {how}: hidden {sp.hidden * 1e3:.2f} ms, exposed {sp.exposed * 1e3:.2f} ms, "
                f"other {sp.other * 1e3:.2f} ms")
    if ev["kind"] == "wait":
        return f"blocked on {data.get('on', '?')} ({ev.get('group')} group)"
    if ev["kind"] == "straggle":
        return f"simulated {data.get('reason', '')} pause, planned {1e3 * float(data.get('planned', 0)):.1f} ms"
    if ev["kind"] == "outer_step" and data.get("skipped"):
        return "skipped: every replica that trained anomalous"
    return ""


def _hover() -> str:
    return ("<b>%{customdata[0]}</b><br>unit %{customdata[1]} · step %{customdata[2]}<br>"
            "rank %{customdata[3]} (replica %{customdata[4]}, shard %{customdata[5]})<br>"
            "start %{customdata[6]} s · duration %{customdata[7]} ms<br>%{customdata[8]}<br>%{customdata[9]}"
            "<extra></extra>")


def default_steps(events: list[dict[str, Any]], max_events: int = MAX_EVENTS) -> tuple[int, int] | None:
    """All steps when they fit in `max_events` bars, else the first steps that do."""
    if not events:
        return None
    per_step: dict[int, int] = {}
    for e in events:
        per_step[e["step"]] = per_step.get(e["step"], 0) + 1
    steps = sorted(per_step)
    total = 0
    last = steps[0]
    for s in steps:
        total += per_step[s]
        if total > max_events:
            break
        last = s
    return steps[0], last


def default_align(method: str) -> str:
    """How a timeline lines up its ranks by default: by wall-clock time for a method whose syncs a timer
    triggers (A-EDiT: replicas are at different steps when they meet), else by step."""
    return "time" if capabilities(method).time_triggered else "step"


def timeline_figure(run: RunLike, steps: StepRange = None, ranks: Iterable[int] | None = None,
                    show_exposed: bool = True, title: str | None = None, max_events: int = MAX_EVENTS,
                    align: str | None = None, time: tuple[float, float] | None = None,
                    view: str = "essential") -> go.Figure:
    """Timeline of `run` over `steps` (inclusive range or one step; default: all that fit) and `ranks`.

    `view="essential"` (the default): one lane per replica, compute / waiting / sync-group traffic, one colour
    each; `view="full"`: every rank (or `ranks`), every kind of event in its own colour, the shard group too.

    `align="step"` shows every rank's own steps `steps`; `align="time"` shows what every rank did
    during the time the first shown rank spent in `steps`. They agree for lock-step methods; A-EDiT's
    replicas count steps on their own, so for it `time` is the default (its sync is a moment in time,
    not a step number). `time=(t0, t1)` shows a window of seconds directly.

    `fig.layout.meta` holds what the figure shows, for tests and widgets: lanes {rank: y}, steps, time
    window, the communication totals (`comm`: per rank, each instant once, summed over the shown
    ranks; `comm_by_kind`: each collective's own split, summed) and bar counts.
    """
    if view not in VIEWS:
        raise ValueError(f"view={view!r}: use one of {', '.join(map(repr, VIEWS))}")
    essential = view == "essential"
    r = as_run(run)
    cfg = r.config
    ov = r.overlap
    all_ranks = [(k, *coords(k, cfg.shards)) for k in range(cfg.world_size)]
    if ranks is None and essential:
        ranks = [rep * cfg.shards for rep in range(cfg.replicas)]  # one lane per replica: its shard-0 rank
    chosen = None if ranks is None else {int(k) for k in ranks}
    align = align or default_align(cfg.method)
    if align not in ("step", "time"):
        raise ValueError(f"align={align!r}: use 'step' or 'time'")
    if steps is None:
        rng = default_steps(event_rows(r, None, chosen), max_events)
    else:
        rng = (steps, steps) if isinstance(steps, int) else (int(steps[0]), int(steps[1]))
    ref_rank = min(chosen) if chosen else 0
    window = time
    if window is None and align == "time" and rng is not None:
        ref = [e for e in event_rows(r, rng, [ref_rank]) if e["kind"] != "eval"]
        if ref:
            window = (min(e["t0"] for e in ref), max(e["t1"] for e in ref))
    if window is not None:
        events = [e for e in event_rows(r, None, chosen) if e["t1"] >= window[0] and e["t0"] <= window[1]]
    else:
        events = event_rows(r, rng, chosen) if rng is not None else []
    lanes = lane_positions([t for t in all_ranks if chosen is None or t[0] in chosen])
    if essential:
        return _with_episode(_essential(r, events, lanes, rng, window, time, align, ref_rank, show_exposed, title),
                             r, lanes, ESSENTIAL_ROWS, events)

    by_kind: dict[str, list[dict[str, Any]]] = {}
    for e in events:
        by_kind.setdefault(e["kind"], []).append(e)

    fig = go.Figure()
    counts: dict[str, int] = {}
    for kind in sorted(by_kind, key=kind_sort_key):
        evs = by_kind[kind]
        counts[kind] = len(evs)
        color = kind_color(kind)
        places = [bar_place(e, lanes) for e in evs]
        fig.add_trace(go.Bar(
            orientation="h", base=[e["t0"] for e in evs], x=[max(e["t1"] - e["t0"], 0.0) for e in evs],
            y=[p[0] for p in places], width=[p[1] for p in places], name=kind_label(kind), legendgroup=kind,
            meta={"kind": kind, "role": "event"},
            marker=dict(color=rgba(color, 0.55) if kind == "eval" else color, line=dict(width=0),
                        pattern=dict(shape=".", fgcolor="#FFFFFF") if kind == "straggle" else None),
            customdata=[[kind_label(kind), unit_label(e), e["step"], e["rank"], e["replica"], e["shard"],
                         f"{e['t0']:.4f}", f"{(e['t1'] - e['t0']) * 1e3:.3f}", fmt_bytes(e.get("bytes", 0)),
                         _extra(e, ov)] for e in evs],
            hovertemplate=_hover(),
        ))

    comm = [e for e in events if is_comm(e["kind"], e.get("group"))]
    n_pieces = _hatches(fig, ov, comm, lanes, ROWS, hover=True) if show_exposed else {"exposed": 0, "other": 0}

    totals = ov.totals(comm)
    _finish(fig, r, lanes, events, comm, totals, rng, window, time, align, ref_rank, title, counts, n_pieces,
            view="full")
    return _with_episode(fig, r, lanes, ROWS, events)


def _with_episode(fig: go.Figure, r: Any, lanes: dict[int, float], rows: dict[str, float],
                  events: list[dict[str, Any]]) -> go.Figure:
    """A run that survived a death: its episode above the lanes (viz/episode.py), the pieces within the time the
    figure shows; `meta["episode"]`: how many were drawn."""
    shown = fig.layout.xaxis.range or ((min(e["t0"] for e in events), max(e["t1"] for e in events)) if events
                                       else None)
    n = add_episode(fig, r, lanes, min(rows.values()) - BAR_WIDTH / 2, shown) if shown else 0
    fig.update_layout(meta={**fig.layout.meta, "episode": n})
    return fig


def _hatches(fig: go.Figure, ov: Overlap, comm: list[dict[str, Any]], lanes: dict[int, float],
             rows: dict[str, float], hover: bool) -> dict[str, int]:
    """The exposed (red) and other (grey) hatches over the collectives `comm`, from overlap.py's split; how many
    pieces of each were drawn."""
    n_pieces = {"exposed": 0, "other": 0}
    for part, color, shape in (("exposed", EXPOSED, "/"), ("other", BLOCKED_OTHER, "\\")):
        pieces = [(e, iv) for e in comm for iv in getattr(ov.split(e), f"{part}_at")]
        n_pieces[part] = len(pieces)
        if not pieces:
            continue
        places = [bar_place(e, lanes, rows) for e, _ in pieces]
        hovers = dict(hoverinfo="skip") if not hover else dict(
            customdata=[[f"{part} part of {kind_label(e['kind'])}", unit_label(e), e["step"], e["rank"],
                         e["replica"], e["shard"], f"{a:.4f}", f"{(b - a) * 1e3:.3f}",
                         fmt_bytes(e.get("bytes", 0)), _extra(e, ov)] for e, (a, b) in pieces],
            hovertemplate=_hover())
        fig.add_trace(go.Bar(
            orientation="h", base=[a for _, (a, b) in pieces], x=[b - a for _, (a, b) in pieces],
            y=[p[0] for p in places], width=[p[1] for p in places],
            name=LEGEND[part], legendgroup=part, meta={"role": part},
            marker=dict(color=rgba(color, 0.25), line=dict(color=color, width=1),
                        pattern=dict(shape=shape, fgcolor=color, size=6)), **hovers))
    return n_pieces


def _span(rng: tuple[int, int] | None, window: tuple[float, float] | None, time: tuple[float, float] | None,
          ref_rank: int) -> str:
    if time is not None:
        return f"{time[0]:.3f}–{time[1]:.3f} s"
    if window is not None and rng is not None:
        return f"while rank {ref_rank} ran steps {rng[0]}–{rng[1]}"
    return f"steps {rng[0]}–{rng[1]}" if rng else "no events"


def _finish(fig: go.Figure, r: Any, lanes: dict[int, float], events: list[dict[str, Any]],
            comm: list[dict[str, Any]], totals: dict[str, float], rng: tuple[int, int] | None,
            window: tuple[float, float] | None, time: tuple[float, float] | None, align: str, ref_rank: int,
            title: str | None, counts: dict[str, int], n_pieces: dict[str, int], view: str) -> None:
    """Title, lanes, step lines and `layout.meta` (what a test or a widget reads), for either view."""
    ov = r.overlap
    per_kind: dict[str, dict[str, float]] = {}
    for e in comm:
        sp: Split = ov.split(e)
        k = per_kind.setdefault(e["kind"], {"total_s": 0.0, "hidden_s": 0.0, "exposed_s": 0.0, "other_s": 0.0})
        k["total_s"] += sp.duration
        k["hidden_s"] += sp.hidden
        k["exposed_s"] += sp.exposed
        k["other_s"] += sp.other
    _decorate(fig, r, lanes, events, _span(rng, window, time, ref_rank), totals, title, window, ref_rank,
              view=view)
    if window is not None:
        pad = 0.02 * max(window[1] - window[0], 1e-6)
        fig.update_xaxes(range=[window[0] - pad, window[1] + pad])
    fig.update_layout(meta={"view": view, "lanes": {str(k): v for k, v in lanes.items()},
                            "steps": list(rng) if rng else None,
                            "align": align, "time": list(window) if window else None,
                            "comm": totals, "comm_by_kind": per_kind, "counts": counts,
                            "exposed_bars": n_pieces["exposed"], "other_bars": n_pieces["other"]})


def waiting_intervals(ov: Overlap, comm: Iterable[dict[str, Any]]) -> dict[int, list[tuple[float, float]]]:
    """Per rank, every moment it stood blocked on a collective (of any group): the union of the collectives'
    exposed parts (overlap.py's one definition), merged."""
    out: dict[int, list[tuple[float, float]]] = {}
    for e in comm:
        out.setdefault(e["rank"], []).extend(ov.split(e).exposed_at)
    return {rank: merge(ivs) for rank, ivs in out.items()}


def _essential(r: Any, events: list[dict[str, Any]], lanes: dict[int, float], rng: tuple[int, int] | None,
               window: tuple[float, float] | None, time: tuple[float, float] | None, align: str, ref_rank: int,
               show_exposed: bool, title: str | None) -> go.Figure:
    """The essential view (module docstring): compute, waiting and sync-group traffic, one colour each."""
    ov = r.overlap
    rows = ESSENTIAL_ROWS
    fig = go.Figure()
    counts: dict[str, int] = {}

    def bars(kind: str, evs: list[dict[str, Any]], name: str, marker: dict[str, Any]) -> None:
        if not evs:
            return
        counts[kind] = len(evs)
        places = [bar_place(e, lanes, rows) for e in evs]
        fig.add_trace(go.Bar(
            orientation="h", base=[e["t0"] for e in evs], x=[max(e["t1"] - e["t0"], 0.0) for e in evs],
            y=[p[0] for p in places], width=[p[1] for p in places], name=name, legendgroup=kind,
            meta={"kind": kind, "role": "event", "kinds": sorted({e["kind"] for e in evs})}, marker=marker,
            customdata=[[kind_label(e["kind"]), unit_label(e), e["step"], e["rank"], e["replica"], e["shard"],
                         f"{e['t0']:.4f}", f"{(e['t1'] - e['t0']) * 1e3:.3f}", fmt_bytes(e.get("bytes", 0)),
                         _extra(e, ov)] for e in evs],
            hovertemplate=_hover()))

    compute = [e for e in events if e["kind"] in COMPUTE_KINDS]
    shades = [ROUND_COLORS["step_alt"] if e["step"] % 2 else ROUND_COLORS["step"] for e in compute]
    bars("compute", compute, "compute (forward, backward, optimizer, outer step; shades alternate by step)",
         dict(color=shades, line=dict(width=0)))
    bars("eval", [e for e in events if e["kind"] == "eval"], kind_label("eval"),
         dict(color=ROUND_COLORS["eval"], line=dict(width=0)))
    bars("straggle", [e for e in events if e["kind"] == "straggle"], "straggler pause (simulated slower compute)",
         dict(color=ROUND_COLORS["straggle"], line=dict(width=0), pattern=dict(shape=".", fgcolor="#FFFFFF")))
    comm_all = [e for e in events if is_comm(e["kind"], e.get("group"))]
    waiting = [{"rank": rank, "replica": coords(rank, r.config.shards)[0],
                "shard": coords(rank, r.config.shards)[1], "step": _step_at(events, rank, a), "unit": None,
                "kind": "wait", "group": None, "t0": a, "t1": b, "data": {"on": "a collective"}}
               for rank, ivs in waiting_intervals(ov, comm_all).items() for a, b in ivs]
    bars("waiting", waiting, "waiting: blocked on a collective (any group)",
         dict(color=EXPOSED, line=dict(width=0)))
    sync = [e for e in comm_all if e.get("group") != "shard"]
    bars("sync", sync, "sync-group traffic in flight (across replicas)",
         dict(color=ROUND_COLORS["sync"], line=dict(width=0)))

    n_pieces = _hatches(fig, ov, sync, lanes, rows, hover=False) if show_exposed else {"exposed": 0, "other": 0}
    _finish(fig, r, lanes, events, sync, ov.totals(sync), rng, window, time, align, ref_rank, title, counts,
            n_pieces, view="essential")
    return fig


def _step_at(events: list[dict[str, Any]], rank: int, t: float) -> int:
    """The step a rank was in at time `t` (its latest event started by then), for a waiting bar's hover."""
    started = [e["step"] for e in events if e["rank"] == rank and e["t0"] <= t]
    return max(started) if started else 0


def _decorate(fig: go.Figure, r: Any, lanes: dict[int, float], events: list[dict[str, Any]],
              span: str, totals: dict[str, float], title: str | None,
              window: tuple[float, float] | None, ref_rank: int, view: str = "full") -> None:
    cfg = r.config
    essential = view == "essential"
    rows = ESSENTIAL_ROWS if essential else ROWS
    many = len(lanes) > 8
    tickvals, ticktext = [], []
    for rank, y in lanes.items():
        rep, sh = coords(rank, cfg.shards)
        name = f"<b>replica {rep}</b> (rank {rank})" if essential else f"<b>rank {rank}</b> (replica {rep}, shard {sh})"
        if many:
            tickvals.append(y)
            ticktext.append(name)
            continue
        for row, off in rows.items():
            tickvals.append(y + off)
            ticktext.append(f"{name} · {ROW_NAMES[row]}" if row == "compute" else ROW_NAMES[row])
    # shade every other replica so the grouping reads at a glance
    reps: dict[int, list[float]] = {}
    for rank, y in lanes.items():
        reps.setdefault(coords(rank, cfg.shards)[0], []).append(y)
    for i, (rep, ys) in enumerate(sorted(reps.items())):
        fig.add_shape(type="rect", xref="paper", x0=0, x1=1, y0=min(ys) - 0.5, y1=max(ys) + 0.5,
                      fillcolor="#F2F2F2" if i % 2 == 0 else "#FFFFFF", line=dict(width=0), layer="below")
    # step boundaries (the earliest event of each step over the shown ranks; with a time window, the
    # first shown rank's steps, as the others count their own), sync steps named
    starts: dict[int, float] = {}
    for e in events:
        if e["kind"] != "eval" and (window is None or e["rank"] == ref_rank):
            starts[e["step"]] = min(starts.get(e["step"], e["t0"]), e["t0"])
    sync_steps = {int(s["step"]) for s in r.syncs if s.get("kind") == "sync"}
    who = f" (rank {ref_rank})" if window is not None and len(lanes) > 1 else ""
    if 0 < len(starts) <= 40:
        # every other label one line lower: a short step puts two labels closer than their width
        for i, (s, t) in enumerate(sorted(starts.items())):
            fig.add_vline(x=t, line=dict(color="#999999", width=1, dash="dot"),
                          annotation=dict(text=f"step {s}" + (" · sync" if s in sync_steps else "") + who,
                                          font=dict(size=10), textangle=0, yshift=-13 * (i % 2)),
                          annotation_position="top right")
    hidden_pct = 100 * totals["hidden_s"] / totals["total_s"] if totals["total_s"] > 0 else 0.0
    head = title or f"Timeline of {run_label(r)}, {span}"
    if essential:
        sub = (f"sync-group traffic in flight {totals['total_s'] * 1e3:.1f} ms (summed over the replicas shown): "
               f"hidden under compute {totals['hidden_s'] * 1e3:.1f} ms ({hidden_pct:.0f}%), "
               f"exposed {totals['exposed_s'] * 1e3:.1f} ms (red hatch), "
               f"waiting on another collective {totals['other_s'] * 1e3:.1f} ms (grey hatch)"
               f"<br>one rank per replica; red on the compute row: the rank stood blocked; full view: view=\"full\"")
    else:
        sub = (f"time with communication in flight {totals['total_s'] * 1e3:.1f} ms (summed over ranks): "
               f"hidden under compute {totals['hidden_s'] * 1e3:.1f} ms ({hidden_pct:.0f}%), "
               f"exposed {totals['exposed_s'] * 1e3:.1f} ms (red hatch), "
               f"waiting on another collective {totals['other_s'] * 1e3:.1f} ms (grey hatch)"
               f"<br>un-hatched = in flight while the same rank computed; a wait on one collective hides no other")
    # the legend in rows below the plot (plotly gives every entry the widest one's width: 1-2 columns on a
    # laptop, 4 on a wide screen), so the lanes keep the whole width
    text = title_text(head, sub)
    legend_rows = math.ceil(sum(1 for t in fig.data if t.showlegend is not False) / 2)
    height = 150 + 95 * len(lanes) + 40 * len(reps) + 22 * legend_rows + top_margin(text, extra=0)
    fig.update_layout(
        title=title_layout(text),
        barmode="overlay", bargap=0, height=height, template="plotly_white", autosize=True,
        xaxis=dict(title="time since the run's common start (s)", showgrid=True, zeroline=False),
        yaxis=dict(tickvals=tickvals, ticktext=ticktext, autorange="reversed", showgrid=False, zeroline=False,
                   title=None),
        legend=legend_below("event kind", traceorder="normal"), hoverlabel=dict(align="left"),
        margin=dict(l=10, r=20, t=top_margin(text, extra=25), b=40),
    )
