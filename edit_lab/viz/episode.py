"""A replica's death and its replacement's join on the timeline (survival, docs/edit-method.md §16).

Why a layer of its own over the timeline: the episode is what a reader of a surviving run looks for first (where
did the replica die, how long did the survivors stand, when did the replacement come back), and its pieces come
from records the timeline's bars do not read: the launcher's rows (`survival.jsonl`: the death, the views) and
one survivor's per-sync rows (`syncs.jsonl`: detection, rollback, the view change, the retried sync, the donor's
hand-over). Each piece is a labelled span in a thin band above its replica's lane (hover: what and how long),
and the death and the join are markers with a short label, so nothing covers the bars of the steps.

`episode_spans(run)` is plain data (a test reads it); `add_episode(fig, run, lanes, top, within)` draws it.
"""

from __future__ import annotations

from typing import Any

import plotly.graph_objects as go

from edit_lab.records.events import coords, read_jsonl

#: The file of the launcher's rows (runtime/survive_launch.py's `SURVIVAL`; a record, read here by name).
SURVIVAL_FILE = "survival.jsonl"
#: Each piece of an episode: its legend name and colour.
PIECES = {
    "death": ("death", "#B00020"),
    "detection": ("detection (blocked in the failed sync)", "#E4572E"),
    "rollback": ("rollback", "#F3A712"),
    "view": ("view change", "#E91E63"),
    "transfer": ("state transfer", "#1982C4"),
    "retry": ("retried sync", "#8AC926"),
    "join": ("replacement joins", "#1982C4"),
}
BAND = 0.12  # the band's height, in lane units


def _survivor(deaths: list[int], replicas: int) -> int:
    """The replica whose rows are syncs.jsonl's: the lowest one of the run's start that never died."""
    return min((r for r in range(replicas) if r not in deaths), default=0)


def episode_spans(run: Any) -> list[dict[str, Any]]:
    """The episode as spans {piece, replica, t0, t1, text} (t1 = t0 for a marker), seconds since the common start."""
    path = run.path / SURVIVAL_FILE
    if not path.exists():
        return []
    launcher = read_jsonl(path)
    deaths = [r for r in launcher if r["kind"] == "death"]
    me = _survivor([d["replica"] for d in deaths], run.config.replicas)
    out: list[dict[str, Any]] = []
    for d in deaths:
        t = d["t"] - (d.get("since_last_step_ms") or 0.0) / 1e3  # its last step's start: where it died
        out.append({"piece": "death", "replica": d["replica"], "t0": t, "t1": t,
                    "text": f"replica {d['replica']} dies ({d.get('cause', '')}); confirmed at {d['t']:.3f} s"})
    costs = (run.summary.get("survival") or {}).get("costs_ms") or {} if (run.path / "summary.json").exists() else {}
    load = (costs.get("transfer_joiner_ms") or {}).get("mean")  # the replacement's own rows are not in syncs.jsonl
    for v in (r for r in launcher if r["kind"] == "view" and r.get("joined")):
        for j in v["joined"]:
            out.append({"piece": "join", "replica": j, "t0": v["t"], "t1": v["t"],
                        "text": f"view {v['view']}: replica {j} joins (asked at step {v.get('asked_at_step')})"})
            if load is not None:
                out.append({"piece": "transfer", "replica": j, "t0": v["t"], "t1": v["t"] + load / 1e3,
                            "text": f"replica {j} loads the donor's state (summary.json's mean)"})
    for row in run.syncs:
        kind, ms = row.get("kind"), row.get("ms")
        if kind == "detection" and row.get("t") is not None and row.get("blocked_ms") is not None:
            t1 = float(row["t"])
            out.append({"piece": kind, "replica": me, "t0": t1 - row["blocked_ms"] / 1e3, "t1": t1,
                        "text": f"step {row['step']}: {row.get('error', '')[:80]}"})
        elif kind == "view" and row.get("view", 0) > 0 and row.get("t0") is not None:
            out.append({"piece": kind, "replica": me, "t0": row["t0"], "t1": row["t1"],
                        "text": f"step {row['step']}: view {row['view']} {row['members']} ({row.get('after')})"})
        elif kind in ("rollback", "retry", "transfer") and row.get("t0") is not None and ms is not None:
            out.append({"piece": kind, "replica": me, "t0": row["t0"], "t1": row["t0"] + ms / 1e3,
                        "text": f"step {row['step']}: {kind}" + (f" {row['bytes'] / 1e6:.2f} MB to {row['to']}"
                                                                 if kind == "transfer" else "")})
    return out


def add_episode(fig: go.Figure, run: Any, lanes: dict[int, float], top: float,
                within: tuple[float, float] = (float("-inf"), float("inf"))) -> int:
    """Draw `run`'s episode on the lanes shown (`lanes`: rank → y; `top`: the offset of the top edge of a lane's
    bars; the y axis is reversed, so the band sits just above it); only the pieces that overlap `within` (the
    seconds the figure shows); how many pieces were drawn."""
    spans = episode_spans(run)
    shards = run.config.shards
    ys = {coords(k, shards)[0]: y for k, y in lanes.items() if coords(k, shards)[1] == 0}
    spans = [s for s in spans if s["replica"] in ys and s["t1"] >= within[0] and s["t0"] <= within[1]]
    y_of = lambda s: ys[s["replica"]] + top - 0.5 * BAND - 0.02  # noqa: E731 - above the lane's top row
    for piece, (name, color) in PIECES.items():
        mine = [s for s in spans if s["piece"] == piece]
        if not mine:
            continue
        if piece in ("death", "join"):
            fig.add_trace(go.Scatter(
                x=[s["t0"] for s in mine], y=[y_of(s) for s in mine], mode="markers+text", name=name,
                marker=dict(symbol="x-thin" if piece == "death" else "triangle-right", size=13, color=color,
                            line=dict(width=3, color=color)),
                text=["death" if piece == "death" else "join" for _ in mine], textposition="middle left",
                textfont=dict(size=10, color=color), meta={"role": "episode", "piece": piece},
                customdata=[[s["text"]] for s in mine], hovertemplate="%{customdata[0]}<extra></extra>"))
            continue
        fig.add_trace(go.Bar(
            orientation="h", base=[s["t0"] for s in mine], x=[max(s["t1"] - s["t0"], 1e-4) for s in mine],
            y=[y_of(s) for s in mine], width=BAND, name=name, meta={"role": "episode", "piece": piece},
            marker=dict(color=color, line=dict(width=0)),
            customdata=[[s["text"], 1e3 * (s["t1"] - s["t0"])] for s in mine],
            hovertemplate="%{customdata[0]}<br>%{customdata[1]:.1f} ms<extra></extra>"))
    return len(spans)
