"""`make notebooks`: run every notebook with its own defaults, timed, as a reader would.

Prints a markdown table (notebook, seconds, first figure, the ✓ and ✗ of its claim cells (`edit_course.verdict`),
ok) for docs/benchmarks.md ("The notebooks with their own defaults"), then every ✗ line; outputs go to runs/notebooks/.
"First figure" is when the first cell that shows a plotly figure or a widget finished, counted from the
start of the first cell (papermill's per-cell start and end times in the executed notebook).
"""

from __future__ import annotations

import argparse
import json
import sys
import traceback
from datetime import datetime
from pathlib import Path

from edit_course.tools.notebooks import ROOT, execute, notebooks
from edit_course.verdict import notebook_verdicts

FIGURE_TYPES = ("application/vnd.plotly.v1+json", "application/vnd.jupyter.widget-view+json")


def first_figure_s(executed: Path) -> float | None:
    """Seconds from the first cell's start to the end of the first cell that drew a figure or a widget."""
    cells = [c for c in json.loads(executed.read_text())["cells"] if c["cell_type"] == "code"]

    def at(cell: dict, key: str) -> datetime | None:
        t = cell.get("metadata", {}).get("papermill", {}).get(key)
        return datetime.fromisoformat(t.replace("Z", "+00:00")) if t else None

    start = next((at(c, "start_time") for c in cells if at(c, "start_time")), None)
    for c in cells:
        if any(t in o.get("data", {}) for o in c.get("outputs", []) for t in FIGURE_TYPES) and at(c, "end_time"):
            return (at(c, "end_time") - start).total_seconds() if start else None
    return None


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__)
    ap.add_argument("names", nargs="*", help="only notebooks whose file name contains one of these")
    ap.add_argument("--out", default=str(ROOT / "runs" / "notebooks"))
    args = ap.parse_args(argv)
    rows, failed, crosses = [], 0, []
    for nb in notebooks():
        if args.names and not any(n in nb.name for n in args.names):
            continue
        print(f"running {nb.name} ...", flush=True)
        try:
            out, seconds = execute(nb, Path(args.out))
            found = notebook_verdicts(json.loads(out.read_text()))
            crosses += [f"{nb.name} cell {i}: {line}" for i, ok, _, line in found if not ok]
            rows.append((nb.name, seconds, first_figure_s(out), sum(f[1] for f in found),
                         sum(not f[1] for f in found), "ok"))
        except Exception:
            traceback.print_exc()
            rows.append((nb.name, float("nan"), None, 0, 0, "FAILED"))
            failed += 1
    print("\n| notebook | seconds (defaults, 2 CPU cores) | first figure (s) | ✓ | ✗ | result |\n"
          "|---|---:|---:|---:|---:|---|")
    for name, s, first, yes, no, ok in rows:
        print(f"| {name} | {s:.0f} | {'—' if first is None else f'{first:.0f}'} | {yes} | {no} | {ok} |")
    if crosses:
        print("\nClaims their own run did not show:\n" + "\n".join(crosses))
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
