"""The course runs: every notebook top to bottom once (papermill, small parameters), and hygiene."""

from __future__ import annotations

import ast
import json
import sys
from pathlib import Path

import pytest

from edit_lab.tools.notebooks import ROOT, execute, notebooks
from edit_lab.tools.notebooks import test_parameters as small_parameters

NBS = notebooks()
pytestmark = pytest.mark.notebooks


def test_there_is_a_course():
    assert len(NBS) >= 8, [p.name for p in NBS]
    assert [p.name[:2] for p in NBS] == [f"{i:02d}" for i in range(len(NBS))]  # numbered in reading order


@pytest.mark.parametrize("nb", NBS, ids=lambda p: p.stem)
def test_saved_without_outputs(nb):
    data = json.loads(nb.read_text())
    for cell in data["cells"]:
        if cell["cell_type"] == "code":
            assert cell.get("outputs", []) == [] and cell.get("execution_count") is None, nb.name


@pytest.mark.parametrize("nb", NBS, ids=lambda p: p.stem)
def test_structure(nb):
    data = json.loads(nb.read_text())
    cells = data["cells"]
    assert cells[0]["cell_type"] == "markdown" and "learning goal" in "".join(cells[0]["source"]).lower()
    tagged = [c for c in cells if "parameters" in c.get("metadata", {}).get("tags", [])]
    assert len(tagged) == 1, "exactly one cell tagged `parameters`"
    assert small_parameters(nb), "metadata.edit_lab.test_parameters makes a small version for the tests"
    src = "".join("".join(c["source"]) for c in cells if c["cell_type"] == "markdown").lower()
    assert "exercise" in src or "question" in src


def _declared_dependencies() -> set[str]:
    import tomllib

    proj = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]
    reqs = list(proj["dependencies"]) + [r for extra in proj["optional-dependencies"].values() for r in extra]
    names = {r.split("[")[0].split(">")[0].split("<")[0].split("=")[0].split(";")[0].strip().lower() for r in reqs}
    return names | {"edit_lab"}


IMPORT_NAMES = {"ipywidgets": "ipywidgets", "plotly": "plotly", "torch": "torch", "pandas": "pandas",
                "numpy": "numpy", "IPython": "ipykernel", "tqdm": "tqdm"}


@pytest.mark.parametrize("nb", NBS, ids=lambda p: p.stem)
def test_imports_are_declared(nb):
    declared = _declared_dependencies()
    stdlib = set(sys.stdlib_module_names)
    for cell in json.loads(nb.read_text())["cells"]:
        if cell["cell_type"] != "code":
            continue
        src = "\n".join(line for line in "".join(cell["source"]).splitlines() if not line.lstrip().startswith(("%", "!")))
        for node in ast.walk(ast.parse(src)):
            mods = [a.name for a in node.names] if isinstance(node, ast.Import) else \
                [node.module] if isinstance(node, ast.ImportFrom) and node.module else []
            for m in mods:
                top = m.split(".")[0]
                if top in stdlib:
                    continue
                assert IMPORT_NAMES.get(top, top).lower().replace("_", "-") in {d.replace("_", "-") for d in declared}, \
                    f"{nb.name} imports {m}, which is neither edit_lab nor a declared dependency"


@pytest.mark.parametrize("nb", NBS, ids=lambda p: p.stem)
def test_runs_under_papermill(nb, tmp_path):
    """Every cell runs, top to bottom, with the small parameters (papermill raises on the first cell that
    fails). Once: nbval on a saved-without-outputs notebook would only run every cell a second time."""
    out, _ = execute(nb, tmp_path / "papermill", small_parameters(nb))
    data = json.loads(out.read_text())
    errors = [o for c in data["cells"] if c["cell_type"] == "code" for o in c.get("outputs", [])
              if o.get("output_type") == "error"]
    assert not errors, errors[0].get("evalue")
