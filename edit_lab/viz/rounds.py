"""Rounds: several runs on one shared time axis, one row per replica, one block per local step.

The straggler lesson's picture. Synchronous training, EDiT and A-EDiT with the same slow replica, stacked
over the same seconds: under `sync` and EDiT the fast replica finishes its share of the round and then
stands waiting for the slow one at every sync; under A-EDiT the round lasts T_sync seconds for everybody,
so the fast replica simply trains more local steps in it and barely waits.

Every drawn second follows one of these definitions. Each replica is drawn from the events of one
representative rank, its **shard 0**: all ranks of a replica run the same steps and meet the other
replicas together, so one of them tells the replica's story (`rounds_table` counts rounds on shard 0 too).

- **local step** (a block; consecutive steps alternate shades, so they can be counted): step s of the
  rank, from the start of its first event of step s to the end of its last (forward, backward, optimizer
  and every collective recorded with the step; an evaluation and what ran inside it is not part of a
  step), minus the three kinds below. A step never reaches past the start of the next one.
- **straggler pause** (dotted): the rank's `straggle` spans, the simulated slower device.
- **waiting** (red): every instant the rank stood blocked on a sync-group collective, i.e. the *exposed*
  part of its sync-group collectives by overlap.py's one definition (`Overlap.split(e).exposed_at`):
  waiting for the other replicas to arrive, plus the transfer itself (small on these links).
- **evaluation** (grey): the rank's `eval` spans.
- **sync** (a thin strip under the row): the union of the rank's sync-group collectives, issue to
  completion, whether the rank waited for them or computed meanwhile (EDiT's prefetched layer-wise sync
  runs under the next forward): the strip says *when* the replicas exchanged, the red block *how much of
  it* the rank stood still for.
- **round boundary** (dashed line, "replicas met"): the arrival of the last replica at a sync — the
  latest start, over the replicas, of the sync's first sync-group collective: for a `sync` record of
  step s the first sync-group collective of step s (EDiT: the exchange of penalty decisions); for
  A-EDiT's `round` records with synced=True the meeting's step-count all-gather (meetings pair up one to
  one across replicas, so the m-th record is each rank's m-th meeting); for every step with a gradient
  all-reduce (synchronous training, and every method's warm-up) its first gradient all-reduce.

Waiting, evaluation, pause and local step are cut from each other in that order of precedence, so no
instant of a row is drawn twice; the sync strip is a lane of its own and overlaps them in time. White
between two blocks is time in no step: the training loop's bookkeeping between one step's last event
and the next one's first.

The default window (`default_window`) is the same seconds for every run: from the anchor step (local
steps begin) until the first replica of any run runs out of steps, or `DEFAULT_ROUNDS` boundaries.
`round_blocks` returns exactly the drawn blocks as plain records, `round_marks` the boundaries.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Iterable, Sequence
from typing import Any

import plotly.graph_objects as go
from plotly.subplots import make_subplots

from edit_lab.records.analysis import RunLike, as_run, as_runs, run_labels, trained_steps
from edit_lab.records.events import is_cross_replica
from edit_lab.records.overlap import merge, subtract
from edit_lab.records.run import Run
from edit_lab.viz.colors import ROUND_COLORS, rgba
from edit_lab.viz.layout import (
    keep_corner_ticks_apart,
    legend_below,
    short_run_labels,
    style_subplot_titles,
    title_layout,
    title_text,
    top_margin,
)

Event = dict[str, Any]
Window = tuple[float, float]
Tagged = tuple[float, float, int]  # (t0, t1, step)

#: Block kinds in order of precedence (the sync strip is a lane of its own).
BLOCK_KINDS = ("wait", "eval", "straggle", "step", "sync")
#: Legend names, hovers and the figure's vocabulary.
BLOCK_LABELS = {
    "step": "local step",
    "straggle": "straggler pause (simulated)",
    "wait": "waiting (blocked on the sync group)",
    "eval": "evaluation",
    "sync": "sync (sync-group traffic in flight)",
    "boundary": "replicas met (round boundary)",
}
DEFAULT_ROUNDS = 3

# geometry of one replica's row (y axis reversed: larger y is lower)
STEP_WIDTH = 0.56
SYNC_OFFSET, SYNC_WIDTH = 0.38, 0.12
ROW_PX, PANEL_PX, GAP_PX = 46, 34, 58  # px per replica row, per panel, between panels (the subplot title)


# ------------------------------------------------------------------------------------------ helpers
def representative_rank(run: Run, replica: int) -> int:
    """The rank that stands for `replica`: its shard 0."""
    return int(replica) * run.config.shards


def _rank_events(run: Run, rank: int) -> list[Event]:
    return sorted((e for e in run.events if e["rank"] == rank), key=lambda e: (e["t0"], e["t1"]))


def _training_events(evs: list[Event]) -> list[Event]:
    """The rank's events less evaluations and everything that ran inside one (their spans carry a step too)."""
    evals = [(e["t0"], e["t1"]) for e in evs if e["kind"] == "eval"]
    return [e for e in evs if e["kind"] != "eval" and not any(a <= e["t0"] and e["t1"] <= b for a, b in evals)]


def _cross(evs: Iterable[Event]) -> list[Event]:
    return [e for e in evs if is_cross_replica(e)]


def _step_spans_of(evs: list[Event], steps: int) -> dict[int, tuple[float, float]]:
    spans: dict[int, tuple[float, float]] = {}
    for e in _training_events(evs):
        s = int(e["step"])
        if 0 <= s < steps:
            a, b = spans.get(s, (e["t0"], e["t1"]))
            spans[s] = (min(a, e["t0"]), max(b, e["t1"]))
    order = sorted(spans)
    for s, nxt in zip(order, order[1:]):  # a trailing async collective does not reach into the next step
        a, b = spans[s]
        spans[s] = (a, min(b, spans[nxt][0]))
    return spans


def step_spans(run: RunLike, replica: int) -> dict[int, tuple[float, float]]:
    """{step: (start, end)} of `replica`'s training steps on its representative rank (the definition of a
    local step above, before the waiting, pause and evaluation are cut out), up to the steps it trained
    (`trained_steps`: with a time budget not `cfg.steps`, which the run ignored)."""
    r = as_run(run)
    return _step_spans_of(_rank_events(r, representative_rank(r, replica)), trained_steps(r)[replica])


def _tagged_union(ivs: Iterable[Tagged]) -> list[Tagged]:
    """Union of (t0, t1, step) intervals; a merged piece keeps the step of the interval that starts it."""
    out: list[list[Any]] = []
    for a, b, s in sorted(iv for iv in ivs if iv[1] > iv[0]):
        if out and a <= out[-1][1]:
            out[-1][1] = max(out[-1][1], b)
        else:
            out.append([a, b, s])
    return [(a, b, s) for a, b, s in out]


def _cut(ivs: Iterable[Tagged], taken: list[tuple[float, float]]) -> list[Tagged]:
    """Each interval minus the merged `taken` intervals, keeping its step."""
    return [(a, b, s) for a0, b0, s in ivs for a, b in subtract([(a0, b0)], taken)]


# ------------------------------------------------------------------------------------------ the numbers
def round_blocks(run: RunLike, window: Window | None = None) -> list[dict[str, Any]]:
    """The blocks of the round picture: one record per drawn block, sorted by replica then time.

    Each record: replica, rank (the representative, shard 0), kind ('step', 'straggle', 'wait', 'eval',
    'sync'), t0, t1 (seconds since the run's common start, clipped to `window`) and step (the step the
    time belongs to: the local step, or the step recorded with the collective that was waited on). The
    definitions are in the module's docstring; blocks of kinds other than 'sync' never overlap within a
    replica, and neither do the 'sync' blocks among themselves.
    """
    r = as_run(run)
    cfg = r.config
    ov = r.overlap
    lo, hi = window if window is not None else (-math.inf, math.inf)
    out: list[dict[str, Any]] = []
    ends = trained_steps(r)
    for rep in range(cfg.replicas):
        rank = representative_rank(r, rep)
        evs = _rank_events(r, rank)
        cross = _cross(evs)
        wait = _tagged_union((a, b, int(e["step"])) for e in cross for a, b in ov.split(e).exposed_at)
        taken = merge((a, b) for a, b, _ in wait)
        evals = _cut(_tagged_union((e["t0"], e["t1"], int(e["step"])) for e in evs if e["kind"] == "eval"), taken)
        taken = merge(taken + [(a, b) for a, b, _ in evals])
        pauses = _cut(_tagged_union((e["t0"], e["t1"], int(e["step"])) for e in evs if e["kind"] == "straggle"),
                      taken)
        taken = merge(taken + [(a, b) for a, b, _ in pauses])
        steps = _cut(((a, b, s) for s, (a, b) in sorted(_step_spans_of(evs, ends[rep]).items())), taken)
        sync = _tagged_union((e["t0"], e["t1"], int(e["step"])) for e in cross)
        rows = []
        for kind, ivs in (("wait", wait), ("eval", evals), ("straggle", pauses), ("step", steps), ("sync", sync)):
            for a, b, s in ivs:
                a, b = max(a, lo), min(b, hi)
                if b > a:
                    rows.append({"replica": rep, "rank": rank, "kind": kind, "t0": a, "t1": b, "step": s})
        out.extend(sorted(rows, key=lambda x: (x["t0"], BLOCK_KINDS.index(x["kind"]))))
    return out


def round_marks(run: RunLike) -> list[dict[str, Any]]:
    """The round boundaries of `run`, sorted by time: {t, step, source} with source 'grad_all_reduce',
    'sync' or 'round' (A-EDiT), `step` the sync's step on replica 0; `t` as defined in the module's docstring."""
    r = as_run(run)
    cfg = r.config
    reps = range(cfg.replicas)
    cross = {rep: _cross(_rank_events(r, representative_rank(r, rep))) for rep in reps}

    def first_per_step(rep: int, want: Callable[[Event], bool]) -> dict[int, float]:
        out: dict[int, float] = {}
        for e in cross[rep]:
            if want(e):
                out[int(e["step"])] = min(out.get(int(e["step"]), e["t0"]), e["t0"])
        return out

    marks: list[dict[str, Any]] = []
    gar = [first_per_step(rep, lambda e: e["kind"] == "grad_all_reduce") for rep in reps]
    for s in sorted(set.intersection(*(set(g) for g in gar)) if gar else ()):
        marks.append({"t": max(g[s] for g in gar), "step": s, "source": "grad_all_reduce"})
    rounds = [x for x in r.syncs if x.get("kind") == "round"]
    if rounds:
        meetings = {rep: [e for e in cross[rep] if e["kind"] == "step_count"] for rep in reps}
        for i, rec in enumerate(rounds):
            if not rec.get("synced"):
                continue
            if all(len(meetings[rep]) > i for rep in reps):
                t = max(meetings[rep][i]["t0"] for rep in reps)
            elif rec.get("t") is not None:  # events cut short (a failed run): the record's own time
                t = float(rec["t"])
            else:
                continue
            marks.append({"t": t, "step": int(rec["step"]), "source": "round"})
    else:
        firsts = [first_per_step(rep, lambda e: e["kind"] != "grad_all_reduce") for rep in reps]
        for rec in r.syncs:
            if rec.get("kind") != "sync":
                continue
            s = int(rec["step"])
            if firsts and all(s in f for f in firsts):
                marks.append({"t": max(f[s] for f in firsts), "step": s, "source": "sync"})
    return sorted(marks, key=lambda m: m["t"])


def _done_at(r: Run) -> float:
    """When the first replica of `r` ran out of training steps (the end of its last step's span)."""
    ends = []
    for rep in range(r.config.replicas):
        spans = step_spans(r, rep)
        if spans:
            ends.append(max(b for _, b in spans.values()))
    return min(ends) if ends else 0.0


def default_window(runs: RunLike | Sequence[RunLike], rounds: int = DEFAULT_ROUNDS) -> Window:
    """Seconds to show, the same for every run so they compare.

    Starts at the latest anchor step (step W = warmup_steps, where local steps begin; for synchronous
    training the same step number) over the runs, when no run is still warming up. Ends once every run
    has shown `rounds` round boundaries after the start, but no later than the moment the first replica
    of any run ran out of steps: from then on it has nothing left to train and only waits for the end
    (A-EDiT's fast replica finishes its steps early), which says nothing about rounds.
    """
    rs = as_runs(runs)
    starts, caps, needs = [], [], []
    for r in rs:
        cfg = r.config
        w = min(cfg.schedule.warmup_steps, max(min(trained_steps(r).values(), default=0) - 1, 0))
        anchor = [step_spans(r, rep).get(w) for rep in range(cfg.replicas)]
        starts.append(min(a[0] for a in anchor if a) if any(anchor) else 0.0)
        caps.append(_done_at(r))
    t0 = max(starts) if starts else 0.0
    cap = min(caps) if caps else 0.0
    for r, done in zip(rs, caps):
        after = [m["t"] for m in round_marks(r) if m["t"] > t0]
        needs.append(after[rounds - 1] if len(after) >= rounds else done)
    t1 = min(max(needs), cap) if needs else cap
    if t0 < t1 < cap:  # a little after the last boundary, so the sync it opens shows
        t1 = min(t1 + 0.05 * (t1 - t0), cap)
    if t1 <= t0:  # a run without local steps, or one that ended before the others' anchors
        t1 = max(caps + [t0 + 1e-3])
    return t0, t1


# ------------------------------------------------------------------------------------------ the figure
def _row_label(r: Run, rep: int) -> str:
    cfg = r.config
    slow = rep in cfg.stragglers.replicas and cfg.stragglers.factor > 1
    return f"replica {rep}" + (f"<br><sup>slow ×{cfg.stragglers.factor:g}</sup>" if slow else "")


def _stats(r: Run, blocks: list[dict[str, Any]], window: Window) -> dict[int, dict[str, float]]:
    """Per replica: local steps that ended inside the window, and the share of the window spent waiting."""
    w0, w1 = window
    out = {}
    for rep in range(r.config.replicas):
        ended = sum(1 for a, b in step_spans(r, rep).values() if w0 <= b <= w1)
        waited = sum(b["t1"] - b["t0"] for b in blocks if b["replica"] == rep and b["kind"] == "wait")
        out[rep] = {"steps": ended, "wait_s": waited, "wait_frac": waited / (w1 - w0) if w1 > w0 else 0.0}
    return out


def _panel_title(name: str, stats: dict[int, dict[str, float]]) -> str:
    head = f"<b>{name}</b>"
    if len(stats) > 4:
        return head
    parts = [f"replica {rep}: {s['steps']} steps, waited {100 * s['wait_frac']:.0f}%" for rep, s in stats.items()]
    return head + " · " + " · ".join(parts)


def _hover() -> str:
    return ("<b>%{customdata[0]}</b><br>replica %{customdata[1]} (rank %{customdata[2]}) · step %{customdata[3]}"
            "<br>%{customdata[4]}–%{customdata[5]} s · %{customdata[6]} ms%{customdata[7]}<extra>%{customdata[8]}"
            "</extra>")


def _marker(kind: str, alt: bool = False) -> dict[str, Any]:
    if kind == "step":
        return dict(color=ROUND_COLORS["step_alt" if alt else "step"], line=dict(color="#FFFFFF", width=1))
    if kind == "straggle":
        return dict(color=rgba(ROUND_COLORS["straggle"], 0.55), line=dict(color="#FFFFFF", width=1),
                    pattern=dict(shape=".", fgcolor="#FFFFFF", size=5, solidity=0.35))
    if kind == "wait":
        return dict(color=rgba(ROUND_COLORS["wait"], 0.85), line=dict(width=0))
    return dict(color=ROUND_COLORS[kind], line=dict(width=0))


def _add_blocks(fig: go.Figure, kind: str, blocks: list[dict[str, Any]],
                spans: dict[int, dict[int, tuple[float, float]]], name: str, row: int, legend: bool) -> None:
    """One horizontal-bar trace per kind (local steps: one per shade, the dark one named in the legend)."""
    groups = ([[b for b in blocks if b["step"] % 2 == 0], [b for b in blocks if b["step"] % 2 == 1]]
              if kind == "step" else [blocks])
    for alt, bl in enumerate(groups):
        if not bl:
            continue
        named, legend = legend, False  # only the first drawn group of a kind is named in the legend
        on_sync_lane = kind == "sync"
        y = [b["replica"] + (SYNC_OFFSET if on_sync_lane else 0.0) for b in bl]

        def whole(b: dict[str, Any]) -> str:
            if kind not in ("step", "straggle"):
                return ""
            a, e = spans[b["replica"]].get(b["step"], (b["t0"], b["t1"]))
            return f"<br>the whole step: {a:.4f}–{e:.4f} s ({(e - a) * 1e3:.1f} ms)"

        fig.add_trace(go.Bar(
            orientation="h", base=[b["t0"] for b in bl], x=[b["t1"] - b["t0"] for b in bl], y=y,
            width=SYNC_WIDTH if on_sync_lane else STEP_WIDTH, name=BLOCK_LABELS[kind], legendgroup=kind,
            showlegend=named, marker=_marker(kind, bool(alt)), meta={"role": kind, "run": name},
            customdata=[[BLOCK_LABELS[kind], b["replica"], b["rank"], b["step"], f"{b['t0']:.4f}", f"{b['t1']:.4f}",
                         f"{(b['t1'] - b['t0']) * 1e3:.1f}", whole(b), name] for b in bl],
            hovertemplate=_hover(),
        ), row=row, col=1)


def rounds_figure(runs: RunLike | Sequence[RunLike], labels: Sequence[str] | None = None, title: str | None = None,
                  window: Window | None = None) -> go.Figure:
    """Several runs stacked on one time axis (seconds since each run's start; `window=(t0, t1)`, default
    `default_window`), one row per replica (its shard 0), blocks as in `round_blocks`, round boundaries as in
    `round_marks`. `fig.layout.meta` holds the runs' names, the window, the boundaries and per-replica
    steps and waiting inside the window.
    """
    rs = as_runs(runs)
    names = short_run_labels(rs) if labels is None else run_labels(rs, labels)
    w0, w1 = (float(window[0]), float(window[1])) if window is not None else default_window(rs)
    if not w1 > w0:
        raise ValueError(f"window={window!r}: the end must come after the start")
    n = len(rs)
    reps = [r.config.replicas for r in rs]
    heights = [PANEL_PX + ROW_PX * k for k in reps]
    plot_px = sum(heights) + GAP_PX * (n - 1)
    all_blocks = [round_blocks(r, (w0, w1)) for r in rs]
    all_stats = [_stats(r, b, (w0, w1)) for r, b in zip(rs, all_blocks)]
    fig = make_subplots(rows=n, cols=1, shared_xaxes=True, row_heights=heights,
                        vertical_spacing=GAP_PX / plot_px if n > 1 else 0.0,
                        subplot_titles=[_panel_title(nm, st) for nm, st in zip(names, all_stats)])
    shown: set[str] = set()
    marks_meta: list[list[float]] = []
    counts: list[dict[str, int]] = []
    for i, (r, name, blocks) in enumerate(zip(rs, names, all_blocks)):
        row = i + 1
        spans = {rep: step_spans(r, rep) for rep in range(r.config.replicas)}
        count: dict[str, int] = {}
        for kind in ("step", "straggle", "eval", "wait", "sync"):
            bl = [b for b in blocks if b["kind"] == kind]
            count[kind] = len(bl)
            if not bl:
                continue
            _add_blocks(fig, kind, bl, spans, name, row, kind not in shown)
            shown.add(kind)
        marks = [m for m in round_marks(r) if w0 <= m["t"] <= w1]
        marks_meta.append([m["t"] for m in marks])
        if marks:
            top, bottom = -0.42, r.config.replicas - 1 + SYNC_OFFSET + SYNC_WIDTH
            xs: list[float | None] = []
            ys: list[float | None] = []
            for m in marks:
                xs += [m["t"], m["t"], None]
                ys += [top, bottom, None]
            fig.add_trace(go.Scatter(
                x=xs, y=ys, mode="lines", line=dict(color=ROUND_COLORS["boundary"], width=1.5, dash="dash"),
                name=BLOCK_LABELS["boundary"], legendgroup="boundary", showlegend="boundary" not in shown,
                meta={"role": "boundary", "run": name}, hoverinfo="skip",
            ), row=row, col=1)
            # one invisible point per boundary carries its hover
            fig.add_trace(go.Scatter(
                x=[m["t"] for m in marks], y=[top] * len(marks), mode="markers",
                marker=dict(symbol="triangle-down", size=9, color=ROUND_COLORS["boundary"]),
                legendgroup="boundary", showlegend=False, meta={"role": "boundary_marker", "run": name},
                customdata=[[m["step"], m["source"].replace("_", " ")] for m in marks],
                hovertemplate="replicas met: %{x:.4f} s<br>sync of step %{customdata[0]} (%{customdata[1]})"
                              f"<extra>{name}</extra>",
            ), row=row, col=1)
            shown.add("boundary")
        counts.append(count)
        k = r.config.replicas
        fig.update_yaxes(tickmode="array", tickvals=list(range(k)), ticktext=[_row_label(r, rep) for rep in range(k)],
                         range=[k - 1 + SYNC_OFFSET + SYNC_WIDTH / 2 + 0.08, -0.5], showgrid=False, zeroline=False,
                         automargin=True, fixedrange=True, row=row, col=1)
    fig.update_xaxes(range=[w0, w1], showgrid=True, zeroline=False)
    fig.update_xaxes(title_text="seconds since the run's start (the same window for every run)", row=n, col=1)
    style_subplot_titles(fig)
    fig.update_annotations(x=0, xanchor="left")  # the subplot titles, at the left like the row labels
    keep_corner_ticks_apart(fig)
    methods = [r.config.method for r in rs]
    head = title or ("Rounds on one time axis: " + " vs ".join(methods) if n > 1 else f"Rounds of {names[0]}")
    sub = (f"{w0:.2f}–{w1:.2f} s" + (" after warm-up" if window is None else "")
           + (", the same seconds for every run" if n > 1 else "")
           + "; one row per replica (its shard 0). Block = one local step "
           "(shades alternate; dotted = straggler pause); red = waiting: blocked on the sync group (exposed, "
           "overlap.py); cyan strip = sync-group collectives in flight; dashed = the last replica arrived at a "
           "sync (round boundary)")
    text = title_text(head, sub)
    height = top_margin(text, extra=34) + plot_px + 130
    fig.update_layout(
        title=title_layout(text), barmode="overlay", bargap=0, template="plotly_white", autosize=True,
        height=height, legend=legend_below(traceorder="normal"), hoverlabel=dict(align="left"),
        margin=dict(l=10, r=20, t=top_margin(text, extra=34), b=40),
        meta={"runs": names, "window": [w0, w1], "marks": marks_meta, "counts": counts,
              "stats": [{str(k): v for k, v in st.items()} for st in all_stats], "representative": "shard 0"},
    )
    return fig
