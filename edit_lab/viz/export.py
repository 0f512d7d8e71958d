"""Exports: figures as one standalone HTML page, and a run as a Chrome / Perfetto trace.

Standalone means plotly.js is inlined once per page, so the file opens offline, can be mailed, and
needs no server or notebook. The trace is derived from the same events as the timeline (see
`edit_lab.records.trace`): open it at ui.perfetto.dev or chrome://tracing to zoom into single collectives.
"""

from __future__ import annotations

import html
import json
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import plotly.graph_objects as go

from edit_lab.records.analysis import RunLike, StepRange, as_run, event_rows
from edit_lab.records.trace import chrome_trace

PAGE = """<!DOCTYPE html>
<html lang="en">
<head>
<meta charset="utf-8">
<title>{title}</title>
<style>
body {{ font-family: system-ui, -apple-system, "Segoe UI", sans-serif; margin: 1.5em auto; max-width: 1400px;
        color: #222; padding: 0 1em; }}
h1 {{ font-size: 1.5em; margin-bottom: 0.2em; }}
h2 {{ font-size: 1.15em; margin-top: 1.6em; border-bottom: 1px solid #ddd; }}
table {{ border-collapse: collapse; font-size: 0.9em; margin: 0.5em 0; }}
td, th {{ border: 1px solid #ddd; padding: 3px 8px; text-align: left; }}
th {{ background: #f5f5f5; }}
.note {{ color: #555; font-size: 0.9em; }}
</style>
</head>
<body>
{body}
</body>
</html>
"""


def figure_div(fig: go.Figure, include_plotlyjs: bool | str = False) -> str:
    """The figure as an HTML fragment (a div and its script)."""
    return fig.to_html(full_html=False, include_plotlyjs=include_plotlyjs, config={"displaylogo": False})


def page(body_parts: Sequence[str], title: str) -> str:
    return PAGE.format(title=html.escape(title), body="\n".join(body_parts))


def figures_html(figs: go.Figure | Sequence[go.Figure], title: str = "edit_lab figures",
                 headings: Sequence[str] | None = None) -> str:
    """A standalone page with every figure (plotly.js inlined once, before the first figure)."""
    figs = [figs] if isinstance(figs, go.Figure) else list(figs)
    parts = [f"<h1>{html.escape(title)}</h1>"]
    for i, fig in enumerate(figs):
        if headings is not None and i < len(headings):
            parts.append(f"<h2>{html.escape(headings[i])}</h2>")
        parts.append(figure_div(fig, include_plotlyjs=True if i == 0 else False))
    return page(parts, title)


def write_html(figs: go.Figure | Sequence[go.Figure], path: str | Path, title: str = "edit_lab figures",
               headings: Sequence[str] | None = None) -> Path:
    """Write `figs` to one standalone HTML file; returns its path."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(figures_html(figs, title, headings), encoding="utf-8")
    return path


def trace_dict(run: RunLike, steps: StepRange = None) -> dict[str, Any]:
    """The Chrome / Perfetto trace of `run` (optionally only some steps): {"traceEvents": [...], ...}."""
    r = as_run(run)
    return chrome_trace(event_rows(r, steps), r.config, r.overlap)


def write_trace(run: RunLike, path: str | Path | None = None, steps: StepRange = None) -> Path:
    """Write the trace as JSON (default: <run>/trace.json, which the worker also writes); returns its path."""
    r = as_run(run)
    path = Path(path) if path is not None else r.path / "trace.json"
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps(trace_dict(r, steps)))
    return path
