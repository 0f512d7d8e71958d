"""Slide metadata for the notebooks: `jupyter nbconvert --to slides` gives a short deck per notebook.

The deck is the lesson's outline for a projector: the title cell with its learning goal, then one slide
per section (a `## ` heading cell with its introduction), a sub-slide per `### ` heading, and the Summary.
Everything else (code, prose between cells, answers, exercises) is skipped: the instructor shows the live
notebook for those. The metadata is computed from the cells, so after editing a notebook run

    python -m edit_course.tools.slides            # rewrite every notebook's slide metadata
    python -m edit_course.tools.slides --check    # exit 1 if a notebook's metadata is not what it should be

and build a deck with `jupyter nbconvert --to slides notebooks/02_local_sgd_and_diloco.ipynb`
(`--post serve` opens it in a browser; the deck is the same for an executed copy: code cells are skipped).
"""

from __future__ import annotations

import argparse
import json
import sys
from typing import Any

from edit_course.tools.notebooks import notebooks


def slide_type(cell: dict[str, Any], first: bool) -> str:
    """What `cell` is in the deck: "slide", "subslide" or "skip"."""
    if first:
        return "slide"
    if cell["cell_type"] != "markdown":
        return "skip"
    text = "".join(cell["source"]).lstrip()
    if text.startswith("## "):
        return "slide"
    if text.startswith("### "):
        return "subslide"
    return "skip"


def with_slides(nb: dict[str, Any]) -> dict[str, Any]:
    """`nb` with every cell's `metadata.slideshow.slide_type` set (other metadata kept)."""
    for i, cell in enumerate(nb["cells"]):
        cell.setdefault("metadata", {})["slideshow"] = {"slide_type": slide_type(cell, i == 0)}
    return nb


def dump(nb: dict[str, Any]) -> str:
    """The notebook as the course saves it (indent 1, UTF-8, a final newline)."""
    return json.dumps(nb, indent=1, ensure_ascii=False) + "\n"


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--check", action="store_true", help="only report notebooks whose slide metadata is stale")
    args = ap.parse_args(argv)
    stale = []
    for path in notebooks():
        text = path.read_text(encoding="utf-8")
        new = dump(with_slides(json.loads(text)))
        if json.loads(new) != json.loads(text):
            stale.append(path.name)
            if not args.check:
                path.write_text(new, encoding="utf-8")
    if args.check and stale:
        print("slide metadata is stale in " + ", ".join(stale) + ": run python -m edit_course.tools.slides")
        return 1
    print(("stale: " if args.check else "rewrote: ") + (", ".join(stale) or "none"))
    return 0


if __name__ == "__main__":
    sys.exit(main())
