"""A one-page, standalone HTML report of a run: `python -m edit_lab report RUN_DIR`.

Why a report besides the notebooks: a run started with the CLI or torchrun on a cluster has no
notebook around it; one file with the key numbers, the timeline of a sync step and the loss,
straggler, penalty and memory figures can be opened anywhere (plotly.js is inlined, no server).
"""

from __future__ import annotations

import datetime
import html
from pathlib import Path
from typing import Any

import pandas as pd

from edit_lab.config import RunConfig
from edit_lab.records.analysis import (
    as_run,
    capacity_bound,
    comm_split,
    comm_totals,
    replica_table,
    run_label,
    sync_window,
    trained_steps,
)
from edit_lab.records.run import Run
from edit_lab.viz.export import figure_div, page
from edit_lab.viz.losses import loss_figure
from edit_lab.viz.memory import memory_figure
from edit_lab.viz.penalty import penalty_figure
from edit_lab.viz.stragglers import straggler_figure
from edit_lab.viz.timeline import timeline_figure


def _table(rows: list[tuple[str, Any]]) -> str:
    cells = "".join(f"<tr><th>{html.escape(k)}</th><td>{html.escape(str(v))}</td></tr>" for k, v in rows)
    return f"<table>{cells}</table>"


def _fmt(x: Any, spec: str = ".4g") -> str:
    if x is None:
        return "–"
    try:
        return format(float(x), spec)
    except (TypeError, ValueError):
        return str(x)


def _config_rows(cfg: RunConfig) -> list[tuple[str, Any]]:
    """The fields that differ from the defaults, plus the mesh: what makes this run this run."""
    default = RunConfig()
    always = ("method", "shards", "replicas", "steps", "model", "seq_len", "batch_size")
    rows = [(k, cfg.get(k)) for k in always]
    for k, v in cfg.flat().items():
        if k in always or k in ("out", "progress"):
            continue
        if v != default.get(k):
            rows.append((k, v))
    return rows


def _df_html(df: pd.DataFrame, floats: str = "{:.4g}") -> str:
    return df.to_html(index=False, float_format=lambda x: floats.format(x), border=0)


def build_report(run: Run) -> str:
    """The report's HTML text (figures in order: timeline, loss, stragglers, penalty, memory)."""
    s, cfg = run.summary, run.config
    steps = max(trained_steps(run).values(), default=0)  # with a time budget not cfg.steps, which it ignored
    comm = comm_totals(run, steps=(0, steps - 1))
    cap = capacity_bound(run)
    tps = s.get("tokens_per_s") or 0.0
    hidden_pct = 100 * comm["hidden_s"] / comm["total_s"] if comm["total_s"] > 0 else 0.0
    key = [
        ("run directory", str(run.path)),
        ("wall-clock time", f"{_fmt(s.get('wall_s'), '.2f')} s for {steps} steps "
                            f"({_fmt(1e3 * (s.get('step_time_s') or 0), '.1f')} ms per step)"),
        ("throughput", f"{_fmt(tps, '.0f')} tokens/s, capacity bound {_fmt(cap, '.0f')} tokens/s "
                       f"({_fmt(100 * tps / cap if cap else 0, '.0f')}%)"),
        ("final loss", f"train {_fmt(s.get('final_train_loss'))}, validation {_fmt(s.get('final_val_loss'))}"),
        ("communication in flight (rank-seconds, training steps, each instant once)",
         f"{_fmt(comm['total_s'], '.3f')} s: hidden under the rank's own compute {_fmt(comm['hidden_s'], '.3f')} s "
         f"({hidden_pct:.0f}%), exposed (the rank waited on it) {_fmt(comm['exposed_s'], '.3f')} s, "
         f"in flight while the rank waited on another collective {_fmt(comm['other_s'], '.3f')} s"),
        ("syncs", sum(1 for x in run.syncs if x.get("kind") == "sync")),
    ]
    window = sync_window(run)
    figs = [
        (f"Timeline of steps {window[0]}–{window[1]}", timeline_figure(run, steps=window, view="full")),
        ("Loss", loss_figure(run)),
        ("Stragglers and throughput", straggler_figure(run)),
    ]
    if run.penalty:
        figs.append(("Penalty decisions", penalty_figure(run, units="all")))
    figs.append(("Memory per rank", memory_figure(run)))
    kinds = comm_split(run, by=("kind", "group"), steps=(0, steps - 1))
    body = [
        f"<h1>Run report: {html.escape(run_label(run))}</h1>",
        f"<p class='note'>written {datetime.datetime.now():%Y-%m-%d %H:%M} by edit_lab; the Chrome/Perfetto "
        f"trace of this run is <code>trace.json</code> in the run directory (open it at ui.perfetto.dev).</p>",
        "<h2>Key numbers</h2>", _table(key),
        "<h2>Configuration (fields that differ from the defaults)</h2>", _table(_config_rows(cfg)),
        "<h2>Per replica</h2>", _df_html(replica_table(run)),
        "<h2>Communication by kind (all ranks, training steps)</h2>",
        "<p class='note'>each collective's own split: two collectives in flight together both count an "
        "instant they share</p>", _df_html(kinds),
    ]
    for i, (heading, fig) in enumerate(figs):
        body.append(f"<h2>{html.escape(heading)}</h2>")
        body.append(figure_div(fig, include_plotlyjs=True if i == 0 else False))
    return page(body, f"edit_lab report: {run_label(run)}")


def write_report(run_dir: str | Path | Run, output: str | Path | None = None) -> Path:
    """Write the report of `run_dir` to `output` (default: <run_dir>/report.html) and return its path."""
    run = as_run(run_dir)
    out = Path(output) if output is not None else run.path / "report.html"
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(build_report(run), encoding="utf-8")
    return out
