"""The exact values under a chart, folded: a figure's numbers as a table a reader can check the text against.

A reader should not have to read a value off a curve to check a sentence. `with_values(fig)` shows the figure and,
under it, a closed `<details>` with every point it draws (`figure_values`: one row per point, the panel named by
its y-axis title when the figure has several); `exact_values(table)` folds any table the same way.
"""

from __future__ import annotations

import html
import re
from collections.abc import Sequence
from typing import Any

import pandas as pd

#: More points than this are cut (a timeline's spans are not a table anyone reads); the cut is said.
MAX_ROWS = 400


def exact_values(table: pd.DataFrame, summary: str = "Exact values", digits: int | None = 4) -> Any:
    """`table` folded under `summary` (an HTML `<details>`, closed): the numbers a chart draws, for whoever wants
    them. Returns the IPython HTML object (displayed when it is the last expression of a cell)."""
    from IPython.display import HTML

    shown = table.round(digits) if digits is not None else table
    return HTML(f"<details><summary>{html.escape(summary)}</summary>\n{shown.to_html(na_rep='—')}\n</details>")


def _axis_title(fig: Any, axis: str) -> str:
    """The title of axis `x`, `x2`, `y3`… of `fig` ('' where it has none)."""
    key = f"{axis[0]}axis{axis[1:]}"
    title = fig.layout[key].title.text if key in fig.layout else None
    return title or ""


def _levels(v: Any, n: int) -> list[Any]:
    """A multi-category axis' values (plotly: one sequence per level, each of the points' length) as one label per
    point, "outer · inner"; any other axis' values as they are."""
    v = list(v)
    if v and all(isinstance(level, (list, tuple)) and len(level) == n for level in v) and len(v) != n:
        return [" · ".join(map(str, parts)) for parts in zip(*v)]
    return v


def _points(t: Any) -> tuple[list[Any], list[Any]]:
    """(x, y) of a trace's points. A bar drawn from a `base` (a span: a layout's shard, a timeline's event) shows
    its start and end on the value axis, not its length alone."""
    x, y = _levels(t.x, len(t.y)), _levels(t.y, len(t.x))
    base = getattr(t, "base", None) if getattr(t, "type", "") == "bar" else None
    if base is not None:
        starts = list(base) if isinstance(base, (list, tuple)) else [base] * max(len(x), len(y))
        horizontal = getattr(t, "orientation", None) == "h"
        lengths = x if horizontal else y
        spans = [f"{b:g}–{b + v:g}" for b, v in zip(starts, lengths)]
        x, y = (spans, y) if horizontal else (x, spans)
    return x, y


def figure_values(fig: Any, max_rows: int = MAX_ROWS) -> pd.DataFrame:
    """Every (x, y) point of `fig`'s traces that have both: columns `trace` (its name, else its role), the x and
    the y named by the axes' titles, and `panel` when the traces sit on several axes (the titles of the axes that
    differ between panels: the x-axis's, the y-axis's or both)."""
    rows = []
    drawn = [t for t in fig.data if getattr(t, "x", None) is not None and getattr(t, "y", None) is not None]
    axes = {(t.xaxis or "x", t.yaxis or "y") for t in drawn}
    xs = {_axis_title(fig, a) for a, _ in axes} - {""}  # an untitled axis (a shared one's twin) names nothing
    ys = {_axis_title(fig, b) for _, b in axes} - {""}
    for t in drawn:
        meta = t.meta if isinstance(t.meta, dict) else {}
        name = t.name or meta.get("role", "") + (f" {meta['replica']}" if "replica" in meta else "")
        xt, yt = _axis_title(fig, t.xaxis or "x"), _axis_title(fig, t.yaxis or "y")
        panel = " / ".join(title for title, differs in ((xt, len(xs) > 1), (yt, len(ys) > 1)) if differs and title)
        rows += [{"panel": panel, "trace": name, "x": xi, "y": yi} for xi, yi in zip(*_points(t))]
    table = pd.DataFrame(rows, columns=["panel", "trace", "x", "y"])
    if len(axes) <= 1:
        (xa, ya), = axes or {("x", "y")}
        table = table.drop(columns="panel").rename(columns={"x": _axis_title(fig, xa) or "x",
                                                            "y": _axis_title(fig, ya) or "y"})
    if len(table) > max_rows:
        table = table.head(max_rows)
        table.attrs["cut"] = True
    return table


def _plain(text: Any) -> str:
    """An axis tick's label without plotly's HTML (`<b>`, `<br><sup>…</sup>` become spaces)."""
    return re.sub(r"\s+", " ", re.sub(r"<[^>]+>", " ", str(text))).strip()


def _covered(spans: list[tuple[float, float]]) -> float:
    """The length of the union of (start, end) spans: every instant once, however many spans cover it."""
    total, reach = 0.0, float("-inf")
    for a, b in sorted(spans):
        if b > reach:
            total += b - max(a, reach)
            reach = b
    return total


def _row_labels(ax: Any) -> list[tuple[float, str]]:
    """(tick value, label) of a y axis, labels without HTML; a label that repeats (a timeline's "sync-group comm"
    under every replica) is prefixed with the part before " · " of the nearest tick below it that differs."""
    ticks = sorted(zip(ax.tickvals or (), (_plain(t) for t in ax.ticktext or ())))
    texts = [t for _, t in ticks]
    out, owner = [], ""
    for v, t in ticks:
        if texts.count(t) == 1:
            owner = t.split(" · ")[0]
            out.append((v, t))
        else:
            out.append((v, f"{owner} · {t}" if owner else t))
    return out


def span_totals(fig: Any, panels: Sequence[str] | None = None) -> pd.DataFrame:
    """A figure of spans (horizontal bars drawn from a `base`: a timeline, rounds on one clock) summed per panel,
    row and kind: the seconds each kind covers, every instant once, as the figures' subtitles count them.

    A timeline's spans are too many to read one by one (`figure_values` cuts them at `MAX_ROWS`); their sums are
    what a sentence beside the figure states ("waited 67 %", "exposed 59.8 ms"). Two spans of one kind that
    overlap (two units in flight at once) count their common instants once. A span's row is the y tick nearest to
    it; its panel is its y axis, named by `panels` in the order of the axes (y, y2, …) where given, else by the
    axis' number. Traces that are not spans (markers, lines) are left out."""
    axes = sorted({t.yaxis or "y" for t in fig.data}, key=lambda a: int(a[1:] or 1))
    names = dict(zip(axes, panels)) if panels is not None else {a: f"panel {a[1:] or 1}" for a in axes}
    spans: dict[tuple[str, str, str], list[tuple[float, float]]] = {}
    for t in fig.data:
        if getattr(t, "type", "") != "bar" or getattr(t, "orientation", None) != "h" or t.base is None:
            continue
        ticks = _row_labels(fig.layout[f"yaxis{(t.yaxis or 'y')[1:]}"])
        starts = list(t.base) if isinstance(t.base, (list, tuple)) else [t.base] * len(t.x)
        for y, a, length in zip(t.y, starts, t.x):
            row = min(ticks, key=lambda tv: abs(tv[0] - y))[1] if ticks else str(y)
            spans.setdefault((names.get(t.yaxis or "y", t.yaxis), row, t.name or ""), []).append((a, a + length))
    unit = next((_axis_title(fig, k.replace("axis", "")) for k in fig.layout
                 if k.startswith("xaxis") and _axis_title(fig, k.replace("axis", ""))), "")
    in_s = "second" in unit or "(s)" in unit
    column = "ms covered (each instant once)" if in_s else f"{unit or 'x'} covered (each instant once)"
    rows = [{"panel": p, "row": r, "kind": k, column: (1e3 if in_s else 1.0) * _covered(v)}
            for (p, r, k), v in spans.items()]
    table = pd.DataFrame(rows, columns=["panel", "row", "kind", column])
    return table if len(axes) > 1 else table.drop(columns="panel")


def with_values(fig: Any, summary: str = "Exact values of the figure", table: pd.DataFrame | None = None) -> None:
    """Show `fig`, then its points folded under it (`figure_values`, `exact_values`), or `table` where given (a
    chart whose points are too many to read one by one: `span_totals` of a timeline)."""
    from IPython.display import display

    table = figure_values(fig) if table is None else table
    display(fig)
    display(exact_values(table, summary + (f" (the first {MAX_ROWS} points)" if table.attrs.get("cut") else "")))
