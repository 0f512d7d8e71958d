"""The preview figure: what the simulator predicts, next to what a real run measured when there is one.

Left, the predicted timeline of every replica (computing, straggler pause, waiting on the sync group),
drawn from the simulated events; right, tokens/s per replica, predicted and (after a run) measured.
`comparison_rows` is the same comparison as numbers (the panel's table, the benchmark's rows).
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any, Protocol

import plotly.graph_objects as go

from edit_lab.records.overlap import merge

if TYPE_CHECKING:
    from edit_lab.config import RunConfig


class Predicted(Protocol):
    """What the figure reads of a prediction (the simulator's `edit_lab.clock.sim.predict.Prediction`): a figure
    draws records and imports no clock (tests/unit/test_layers.py)."""

    config: RunConfig
    summary: dict[str, Any]
    events: list[dict[str, Any]]

COLORS = {"computing": "#4C78A8", "straggler pause": "#F58518", "waiting on the sync group": "#E45756",
          "predicted": "#72B7B2", "measured": "#54A24B"}
WORK = {"compute_fwd", "compute_bwd", "optimizer", "outer_step", "eval"}


def _segments(pred: Predicted, replica: int) -> dict[str, list[tuple[float, float]]]:
    evs = [e for e in pred.events if e["replica"] == replica]
    waits = [(e["t0"], e["t1"]) for e in evs if e["group"] == "sync" and e["kind"] == "wait"]
    waits += [(e["t1"] - e["data"].get("exposed", 0.0), e["t1"]) for e in evs
              if e["group"] == "sync" and e["kind"] != "wait" and not e["data"].get("overlapped")]
    return {"computing": merge((e["t0"], e["t1"]) for e in evs if e["kind"] in WORK),
            "straggler pause": merge((e["t0"], e["t1"]) for e in evs if e["kind"] == "straggle"),
            "waiting on the sync group": merge(waits)}


def comparison_rows(pred: Predicted, measured: dict[str, Any] | None = None) -> list[dict[str, Any]]:
    """One row per replica and one for the whole run: predicted (and measured) tokens/s, waiting, steps."""
    rows = []
    s = pred.summary
    for r, v in s["per_replica"].items():
        m = (measured or {}).get("per_replica", {}).get(r, {})
        rows.append({"who": f"replica {r}", "tokens_per_s": v["tokens_per_s"],
                     "measured_tokens_per_s": m.get("tokens_per_s"), "sync_wait_s": v["sync_wait_s"],
                     "measured_sync_wait_s": m.get("sync_wait_s"), "steps": v["steps"], "measured_steps": m.get("steps")})
    rows.append({"who": "run", "tokens_per_s": s["tokens_per_s"],
                 "measured_tokens_per_s": (measured or {}).get("tokens_per_s"),
                 "sync_wait_s": sum(v["sync_wait_s"] for v in s["per_replica"].values()),
                 "measured_sync_wait_s": (sum(v["sync_wait_s"] for v in measured["per_replica"].values())
                                          if measured else None),
                 "steps": s["steps"], "measured_steps": (measured or {}).get("steps")})
    return rows


def comparison_html(pred: Predicted, measured: dict[str, Any] | None = None) -> str:
    """The rows as a small HTML table (the panel shows it under the preview)."""
    def num(x: Any, fmt: str) -> str:
        return "–" if x is None else format(x, fmt)

    head = ("<tr><th></th><th>tokens/s predicted</th><th>measured</th><th>waiting (s) predicted</th>"
            "<th>measured</th><th>steps predicted</th><th>measured</th></tr>")
    body = "".join(
        f"<tr><td>{r['who']}</td><td>{num(r['tokens_per_s'], '.0f')}</td>"
        f"<td>{num(r['measured_tokens_per_s'], '.0f')}</td>"
        f"<td>{num(r['sync_wait_s'], '.2f')}</td><td>{num(r['measured_sync_wait_s'], '.2f')}</td>"
        f"<td>{r['steps']}</td><td>{num(r['measured_steps'], 'd')}</td></tr>"
        for r in comparison_rows(pred, measured))
    style = ("<style>.edit-lab-preview th, .edit-lab-preview td {padding: 2px 12px; text-align: right}</style>")
    return f"{style}<table class='edit-lab-preview' style='border-collapse: collapse'>{head}{body}</table>"


def preview_figure(pred: Predicted, measured: dict[str, Any] | None = None, note: str = "") -> go.Figure:
    """Predicted timeline per replica (left) and tokens/s per replica, predicted and measured (right).

    Two x-axes side by side laid out by hand rather than by `make_subplots`: the figure is rebuilt on
    every control change, and this keeps it to a few milliseconds.
    """
    cfg, s = pred.config, pred.summary
    names = [f"replica {r}" for r in range(cfg.replicas)]
    traces: list[dict[str, Any]] = []
    segments = [_segments(pred, r) for r in range(cfg.replicas)]
    for label in ("computing", "straggler pause", "waiting on the sync group"):
        base, width, ys = [], [], []
        for r in range(cfg.replicas):
            for a, b in segments[r][label]:
                base.append(a)
                width.append(b - a)
                ys.append(names[r])
        traces.append(dict(type="bar", x=width, y=ys, base=base, orientation="h", name=label,
                           marker=dict(color=COLORS[label], line=dict(width=0)), offsetgroup="timeline",
                           xaxis="x", yaxis="y",
                           hovertemplate=f"{label}<br>%{{base:.3f}} s + %{{x:.3f}} s<extra></extra>"))
    pred_tps = [s["per_replica"][str(r)]["tokens_per_s"] for r in range(cfg.replicas)]
    traces.append(dict(type="bar", x=names, y=pred_tps, name="predicted", marker=dict(color=COLORS["predicted"]),
                       text=[f"{v:.0f}" for v in pred_tps], textposition="outside", cliponaxis=False,
                       offsetgroup="predicted", xaxis="x2", yaxis="y2"))
    top = max(pred_tps, default=0.0)
    if measured:
        meas = [measured["per_replica"].get(str(r), {}).get("tokens_per_s", 0.0) for r in range(cfg.replicas)]
        traces.append(dict(type="bar", x=names, y=meas, name="measured", marker=dict(color=COLORS["measured"]),
                           text=[f"{v:.0f}" for v in meas], textposition="outside", cliponaxis=False,
                           offsetgroup="measured", xaxis="x2", yaxis="y2"))
        top = max([top] + meas)
    length = f"{cfg.time_budget:g} s budget" if cfg.time_budget else f"{cfg.steps} steps"
    title = (f"preview of {cfg.method}, {length}: {s['tokens_per_s']:.0f} tokens/s predicted"
             + (f", {measured['tokens_per_s']:.0f} measured" if measured else "")
             + (f"<br><sup>{note}</sup>" if note else ""))
    sub = dict(xref="paper", yref="paper", y=1.0, yanchor="bottom", showarrow=False, font=dict(size=13))
    layout = dict(
        title=dict(text=title, x=0.01, xanchor="left"), barmode="group", height=410,
        margin=dict(l=90, r=20, t=100, b=90), legend=dict(orientation="h", y=-0.3, yanchor="top", x=0.0),
        xaxis=dict(domain=[0.0, 0.6], title=dict(text="seconds")),
        yaxis=dict(autorange="reversed", anchor="x"),
        xaxis2=dict(domain=[0.72, 1.0], anchor="y2"),
        yaxis2=dict(anchor="x2", range=[0, 1.25 * top if top > 0 else 1], title=dict(text="tokens/s")),
        annotations=[dict(text="predicted timeline", x=0.0, xanchor="left", **sub),
                     dict(text="tokens/s per replica", x=0.72, xanchor="left", **sub)],
        meta={"tokens_per_s": s["tokens_per_s"], "method": cfg.method, "simulated": True})
    return go.Figure(data=traces, layout=layout)
