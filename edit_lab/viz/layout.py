"""Layout that reads in a notebook: figures as wide as the notebook, titles that wrap, legends out of the way.

Why one module: every figure is drawn in JupyterLab from a laptop with the file browser open
(a ~850 px wide output area) up to a full-HD screen (~1750 px), so nothing may depend on a fixed
width. The rules, checked by the browser tests (tests/ui/readability.py) at both sizes:

- no `width`: plotly sizes the figure to the output area (`autosize`), and the panels show
  figures in a `FigurePane` that follows the notebook's width (ui/lab.py);
- a title is wrapped to lines that fit the narrowest width (`title_text`), a run's label on a
  category axis is wrapped onto short lines (`tick_label`), so nothing is rotated into the next row;
- the legend is a horizontal strip below the plot (`legend_below`), so it never takes half
  the width, and the bottom margin grows to hold it.
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    import plotly.graph_objects as go

# Visible characters per line that fit the narrowest output area (~800 px) at each text size.
TITLE_CHARS = 68       # the title (17 px, ~7.5 px a character), clear of the modebar plotly shows on hover
SUBTITLE_CHARS = 130  # its <sup> subtitle (~5.6 px a character)
TICK_CHARS = 14        # a run's name under a bar group, per line
SUBPLOT_TITLE_PX = 13  # subplot titles: smaller than the figure's title, larger than ticks
SUBPLOT_TITLE_LIFT_PX = 8  # and this far above their panel: half a tick label's height, and air

_TAG = re.compile(r"(<[^>]+>)")


def wrap(text: str, width: int) -> str:
    """Break `text` (plotly's pseudo-HTML: <br>, <b>, <sup>…) at spaces into lines of at most `width`
    visible characters; existing <br> are kept, a word longer than `width` stays whole."""
    out_lines = []
    for line in re.split(r"<br\s*/?>", text):
        words = line.split(" ")
        cur, n = "", 0
        for w in words:
            visible = len(_TAG.sub("", w))
            if cur and n + 1 + visible > width:
                out_lines.append(cur)
                cur, n = w, visible
            else:
                cur, n = (f"{cur} {w}", n + 1 + visible) if cur else (w, visible)
        out_lines.append(cur)
    return "<br>".join(out_lines)


def title_text(head: str, sub: str | None = None) -> str:
    """A figure title: the head, then a smaller subtitle, each wrapped to fit a laptop's notebook."""
    text = wrap(head, TITLE_CHARS)
    if sub:
        text += "<br><sup>" + wrap(sub, SUBTITLE_CHARS).replace("<br>", "</sup><br><sup>") + "</sup>"
    return text


def tick_label(name: str, width: int = TICK_CHARS) -> str:
    """A run's label for a category axis, on short lines: 'aedit 2×2, T_sync 0.15 s, slow ×2' becomes
    'aedit 2×2<br>T_sync 0.15 s<br>slow ×2' (broken at its commas first, then at spaces; a word much longer
    than a line, like a run directory's name, is shortened with '…': the hover shows the whole name)."""
    parts = [p.strip() for p in name.split(",") if p.strip()]
    lines: list[str] = []
    for p in parts:
        if lines and len(lines[-1]) + 2 + len(p) <= width:
            lines[-1] = f"{lines[-1]}, {p}"
        else:
            lines.extend(wrap(p, width).split("<br>"))
    return "<br>".join(ln if len(ln) <= width + 2 else ln[:width] + "…" for ln in lines)


def short_run_labels(runs: Sequence) -> list[str]:
    """`analysis.run_label` of each run, and where two runs would read the same, '#1', '#2'… in the order
    given, instead of the run directory's name that `run_labels` adds (too long under a bar)."""
    from edit_lab.records.analysis import as_run, run_label

    base = [run_label(as_run(r)) for r in runs]
    seen: dict[str, int] = {}
    out = []
    for b in base:
        seen[b] = seen.get(b, 0) + 1
        out.append(b if base.count(b) == 1 else f"{b} #{seen[b]}")
    return out


def tick_labels(names: Sequence[str], width: int = TICK_CHARS) -> list[str]:
    return [tick_label(n, width) for n in names]


def legend_below(title: str | None = None, **extra) -> dict:
    """A horizontal legend at the bottom of the figure, under the x axis and its title.

    `yref='container'` anchors it to the figure's bottom edge whatever the plot's height, and plotly
    grows the bottom margin by the legend's height, so it never covers the axes. Where the entries need
    more than one row, plotly gives each the widest entry's width (a grid): long names mean fewer columns.
    """
    legend = dict(orientation="h", x=0, xanchor="left", xref="container", y=0, yanchor="bottom",
                  yref="container", font=dict(size=12), entrywidthmode="pixels", entrywidth=0)
    if title:
        legend["title"] = dict(text=title, side="top")
    legend.update(extra)
    return legend


def keep_corner_ticks_apart(fig, px: int = 4) -> None:
    """A little air between every axis and its tick labels, so where two axes meet (step 0 of one, the
    lowest value of the other) their labels do not touch in the corner."""
    fig.update_xaxes(ticklabelstandoff=px)
    fig.update_yaxes(ticklabelstandoff=px)


def style_subplot_titles(fig) -> None:
    """Every annotation of `fig` so far (call it before adding others: these are the subplot titles) at
    `SUBPLOT_TITLE_PX`, lifted `SUBPLOT_TITLE_LIFT_PX` above its panel.

    Why the lift: plotly puts a subplot title right on its panel's top edge, and an auto-ranged y axis whose top
    tick falls on that edge draws half of the tick's label above it. A title wider than its panel then covers the
    label: 02's τ sweep drew "0.3" under "seconds blocked on the slow link" (2 px) on one run and not on the next,
    since the range comes from measured seconds."""
    fig.update_annotations(font_size=SUBPLOT_TITLE_PX, yshift=SUBPLOT_TITLE_LIFT_PX)


def top_margin(title: str, extra: int = 30) -> int:
    """The top margin (px) a wrapped title needs: ~24 px per title line, ~17 per subtitle line, plus `extra`
    (room for the subplot titles or the annotations above the plot)."""
    lines = re.split(r"<br\s*/?>", title)
    subs = sum(1 for ln in lines if "<sup>" in ln)
    return 16 + 24 * (len(lines) - subs) + 17 * subs + extra


def title_layout(text: str) -> dict:
    """`layout.title` for a wrapped title: at the top left of the figure, its first line fully inside."""
    return dict(text=text, x=0.01, xanchor="left", xref="container", y=1, yanchor="top", yref="container",
                pad=dict(t=24))


def empty_figure(title: str, message: str) -> "go.Figure":
    """A figure with a title and a centred note, for data a run does not have."""
    import plotly.graph_objects as go

    fig = go.Figure()
    fig.add_annotation(text=message, xref="paper", yref="paper", x=0.5, y=0.5, showarrow=False, font=dict(size=14))
    fig.update_layout(title=title_layout(title_text(title)), template="plotly_white", height=300, autosize=True,
                      xaxis=dict(visible=False), yaxis=dict(visible=False), meta={"empty": True})
    return fig
