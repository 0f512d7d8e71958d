"""Refresh the executed references of the lessons nbval checks: `make nbval-refs` (or `python -m tests.nbval.refresh
[names]`).

Each reference is its lesson run top to bottom with the lesson's test parameters (papermill, as the course tests
run it), then kept with the outputs of the cells tagged `nbval-check-output` only: those are the outputs that
must not drift (virtual-clock runs, shipped runs, arithmetic, verdicts of deterministic claims, the score), and
`pytest --nbval-lax` compares nothing else. The student notebooks stay without outputs; the tags live in their
cell metadata, invisible in JupyterLab.

The kernel shows figures and tables as what they say, not as a library's serialization (plotly's JSON, pandas'
HTML): tests/nbval/lesson_digest.py, loaded by the kernels of both the refresh and the nbval test.

Refresh after changing a lesson, and read the diff of `tests/nbval/` before committing it: a moved number is
either the change you meant or a regression.
"""

from __future__ import annotations

import argparse
import json
import sys
import tempfile
from pathlib import Path

HERE = Path(__file__).resolve().parent
CHECK_TAG = "nbval-check-output"
#: The lessons whose outputs are checked (their papermill run is deselected: nbval runs every cell of them).
REFERENCES = ("03_sharding_meets_local_sgd", "06_stragglers_and_aedit", "07_scaling_out", "08_capstone",
              "09_streaming_diloco", "10_surviving_a_death")


def lesson(name: str) -> Path:
    from edit_course.tools.notebooks import ROOT

    return ROOT / "notebooks" / f"{name}.ipynb"


def parameters(name: str) -> dict:
    """The lesson's test parameters, as tests/notebooks/test_notebooks.py gives them to papermill."""
    from edit_course.tools.notebooks import test_parameters

    params = test_parameters(lesson(name))
    if name.startswith("08"):  # the capstone's check cells are checked with the diagnoses a program finds
        from edit_course.lessons.capstone import mysteries
        from tests.capstone_solver import solve

        params["DIAGNOSES"] = {letter: list(solve(run)) for letter, run in mysteries().items()}
    return params


def checked(cell: dict) -> bool:
    return cell["cell_type"] == "code" and CHECK_TAG in cell.get("metadata", {}).get("tags", [])


def reference(executed: dict) -> dict:
    """The executed notebook with only the checked cells' outputs (and no papermill run metadata)."""
    nb = json.loads(json.dumps(executed))
    count = 0
    for cell in nb["cells"]:
        cell.get("metadata", {}).pop("papermill", None)
        cell.get("metadata", {}).pop("execution", None)
        cell.pop("id", None)
        if cell["cell_type"] != "code":
            continue
        count += 1
        # nbval refuses a cell with outputs and no execution count ("unrun reference cell")
        cell["execution_count"] = count if checked(cell) else None
        if not checked(cell):
            cell["outputs"] = []
        for out in cell["outputs"]:
            if "execution_count" in out:
                out["execution_count"] = count
    nb["metadata"].pop("papermill", None)
    # the widgets' saved state: new model ids at every run, compared by nothing (no checked cell shows a widget)
    nb["metadata"].pop("widgets", None)
    nb["nbformat_minor"] = 4
    return nb


def refresh(name: str) -> Path:
    import os

    from edit_course.tools.notebooks import execute
    from tests.nbval.lesson_digest import kernel_env

    with tempfile.TemporaryDirectory() as tmp:
        saved = dict(os.environ)
        os.environ.update(kernel_env(Path(tmp) / "kernel"))  # papermill's kernel inherits this environment
        try:
            out, seconds = execute(lesson(name), Path(tmp) / "run", parameters(name))
        finally:
            os.environ.clear()
            os.environ.update(saved)
        nb = reference(json.loads(out.read_text()))
    dest = HERE / f"{name}.ipynb"
    dest.write_text(json.dumps(nb, indent=1, ensure_ascii=False) + "\n")
    n = sum(checked(c) for c in nb["cells"])
    print(f"{dest.name}: {n} checked cells, run in {seconds:.0f} s")
    return dest


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("names", nargs="*", help="only these references (e.g. 08); default: all")
    args = ap.parse_args(argv)
    names = [n for n in REFERENCES if not args.names or any(a in n for a in args.names)]
    if not names:
        print(f"no reference matches {args.names}; the references: {', '.join(REFERENCES)}", file=sys.stderr)
        return 2
    for name in names:
        refresh(name)
    return 0


if __name__ == "__main__":
    sys.exit(main())
