"""Every notebook carries slide metadata (`edit_course.tools.slides`): its deck is the lesson's outline."""

from __future__ import annotations

import json
import re

from edit_course.tools import slides
from edit_course.tools.notebooks import notebooks


def md(text: str) -> dict:
    return {"cell_type": "markdown", "metadata": {}, "source": [text]}


def test_the_outline_is_the_title_the_sections_and_their_subsections():
    cells = [md("# 02 · Title\n\n**Learning goal:** …"), md("## 1. A section\n\nIts introduction."),
             {"cell_type": "code", "metadata": {"tags": ["parameters"]}, "source": ["## not a heading\n"]},
             md("Prose between cells."), md("### A subsection"), md("  ## Summary\n\n- one")]
    nb = slides.with_slides({"cells": cells})
    assert [c["metadata"]["slideshow"]["slide_type"] for c in nb["cells"]] == [
        "slide", "slide", "skip", "skip", "subslide", "slide"]
    assert nb["cells"][2]["metadata"]["tags"] == ["parameters"]  # other metadata kept


def test_every_notebook_carries_its_slide_metadata():
    assert slides.main(["--check"]) == 0, "run python -m edit_course.tools.slides"


def test_nbconvert_builds_the_deck_of_headings_without_the_code():
    from nbconvert import SlidesExporter

    path = next(p for p in notebooks() if p.name.startswith("03"))
    body, _ = SlidesExporter().from_filename(str(path))
    cells = json.loads(path.read_text())["cells"]
    sections = ["".join(c["source"]).lstrip()[3:].splitlines()[0].strip() for c in cells
                if c["cell_type"] == "markdown" and "".join(c["source"]).lstrip().startswith("## ")]
    shown = [re.sub(r"<[^>]+>", "", h).replace("¶", "").strip() for h in re.findall(r"<h2[^>]*>(.*?)</h2>", body, re.S)]
    assert shown == sections and "Summary" in shown
    code = next("".join(c["source"]) for c in cells if c["cell_type"] == "code" and "import" in "".join(c["source"]))
    assert code.splitlines()[0] not in body  # code cells are not in the deck
