"""Finding, parameterising and executing the course notebooks (papermill), shared by tests and `make`.

Each notebook carries, in its metadata under `edit_lab.test_parameters`, the overrides that make it
small enough for the test suite; its own `parameters` cell holds the defaults a reader runs.
"""

from __future__ import annotations

import json
import time
from pathlib import Path
from typing import Any

from edit_course import lab_root

ROOT = lab_root()
NOTEBOOKS = ROOT / "notebooks"


def notebooks() -> list[Path]:
    return sorted(NOTEBOOKS.glob("[0-9][0-9]_*.ipynb"))


def test_parameters(path: Path) -> dict[str, Any]:
    meta = json.loads(path.read_text())["metadata"]
    return dict(meta.get("edit_lab", {}).get("test_parameters", {}))


def execute(path: Path, out_dir: Path, parameters: dict[str, Any] | None = None, timeout_s: int = 900) -> tuple[Path, float]:
    """Run a notebook top to bottom with papermill in `out_dir` (its working directory); (output, seconds)."""
    import papermill as pm

    out_dir.mkdir(parents=True, exist_ok=True)
    out = out_dir / path.name
    t0 = time.perf_counter()
    pm.execute_notebook(str(path), str(out), parameters=parameters or {}, cwd=str(out_dir), kernel_name="python3",
                        progress_bar=False, execution_timeout=timeout_s, log_output=False)
    return out, time.perf_counter() - t0


def parameterize(path: Path, out_dir: Path, parameters: dict[str, Any]) -> Path:
    """Write a copy of the notebook with papermill's injected-parameters cell, without executing it."""
    import nbformat
    from papermill.iorw import load_notebook_node
    from papermill.parameterize import parameterize_notebook

    # load_notebook_node (as papermill's own execute does) gives every cell a `tags` list:
    # parameterize_notebook reads `cell.metadata.tags` and fails on an untagged cell otherwise
    nb = load_notebook_node(str(path))
    nb = parameterize_notebook(nb, parameters)
    out_dir.mkdir(parents=True, exist_ok=True)
    out = out_dir / path.name
    nbformat.write(nb, str(out))
    return out


#: How long a notebook's path may be (words of markdown before its Summary), issue 25: the lesson a reader
#: goes through in one sitting; what goes beyond it sits after the Summary, under "Going further".
PATH_WORDS_MAX = 1500


def path_words(path: Path) -> dict[str, int]:
    """Words of markdown on a notebook's path (every markdown cell before the one that opens `## Summary`)
    and after it (the Summary, "Going further"), with its counts of cells, predictions and exercises.

    A word is a run of non-space characters, so markup (`**`, `|` of a table) counts where it stands
    apart: the same count a reader's `wc -w` of the markdown gives.
    """
    import re

    cells = json.loads(Path(path).read_text())["cells"]
    out = {"path": 0, "after": 0, "cells": len(cells), "predictions": 0, "exercises": 0}
    after = False
    for c in cells:
        src = "".join(c["source"])
        if c["cell_type"] == "markdown":
            after = after or src.lstrip().startswith("## Summary")
            out["after" if after else "path"] += len(re.findall(r"\S+", src))
            out["exercises"] += len(re.findall(r"\*\*Exercise \d", src))
        elif re.search(r"^\w*predict\w*\s*=\s*(None|\{)", src, re.M):
            out["predictions"] += 1
    return out
