"""edit_course: the course beside the library. The notebooks import it; it imports `edit_lab`; `edit_lab` never
imports it (tests/unit/test_layers.py).

What is here: `claims/` (the ✓/✗ verdict cells, each computed from the lesson's own run), `verdict`,
`exercises/` (the code exercises' checks, one module per notebook), `lessons/` (helpers of one notebook each:
04's sync timing, 06's races, 08's capstone), `panels/` (one panel per notebook, and 05's detector playground),
`figures/` (the notebooks' idealised and sweep figures), `source` (`show_code`), `tools/` (make notebooks,
solutions mode, slides, the mysteries), and the data the lessons read:

- `MYSTERIES`: the capstone's three runs (package data);
- `RESULTS` and `BENCHMARKS_PAGE`: the benchmark result files and docs/benchmarks.md that the paper boxes
  quote. `data/` holds links to `benchmarks/results/` and `docs/benchmarks.md`, so there is one copy of each,
  and a wheel (`pip install .`) ships their contents: the lessons find them from any directory.
- `lab_root()`: the source checkout, for the tools that edit its notebooks and solutions.
"""

from __future__ import annotations

import os
from pathlib import Path

HERE = Path(__file__).resolve().parent
DATA = HERE / "data"
#: The benchmark results the lessons quote (written by benchmarks/, results_io.RESULTS).
RESULTS = DATA / "results"
#: The benchmarks page whose hand-typed tables the lessons quote (`claims.benchmark_rows`).
BENCHMARKS_PAGE = DATA / "benchmarks.md"
#: The capstone's mystery runs (notebook 08).
MYSTERIES = HERE / "mysteries"


def lab_root() -> Path:
    """The lab's source checkout: `$EDIT_LAB_ROOT`, else the folder that holds this package (a clone, or an
    editable install). Only the tools that rewrite the notebooks and solutions use it, and say so when it has
    no `notebooks/`; the lessons read package data."""
    env = os.environ.get("EDIT_LAB_ROOT")
    return Path(env).resolve() if env else HERE.parent
