"""The course runs: every notebook top to bottom once (papermill, small parameters), and hygiene."""

from __future__ import annotations

import ast
import json
import re
import sys
from pathlib import Path

import pytest

from edit_course.tools.notebooks import PATH_WORDS_MAX, ROOT, execute, notebooks, path_words
from edit_course.tools.notebooks import test_parameters as small_parameters
from edit_course.tools.solutions import shipped_problems
from edit_course.verdict import notebook_verdicts

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
def test_valid_under_nbformat_without_warnings(nb):
    """A notebook saved as nbformat 4.5 must give every cell an id (nbformat warns, and will refuse it); the
    course is kept at 4.4, which has none."""
    import warnings

    import nbformat

    with warnings.catch_warnings():
        warnings.simplefilter("error")
        nbformat.validate(nbformat.read(str(nb), as_version=nbformat.NO_CONVERT))


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


@pytest.mark.parametrize("nb", NBS, ids=lambda p: p.stem)
def test_course_shape(nb):
    """What every lesson has (issue 16): a prediction the student writes before the run that settles it,
    answers to open after trying, a Summary, and a way on."""
    cells = json.loads(nb.read_text())["cells"]
    md = ["".join(c["source"]) for c in cells if c["cell_type"] == "markdown"]
    code = ["".join(c["source"]) for c in cells if c["cell_type"] == "code"]
    assert any(re.search(r"^\w*predict\w*\s*=\s*(None|\{)", c, re.M) for c in code), "a prediction cell"
    assert any(re.search(r"^\w*predict\w*\s*=\s*(None|\{)", c, re.M) and "predict" in md_before.lower()
               for c, md_before in _code_with_preceding_markdown(cells)), "the prediction is asked for in the text"
    assert sum(m.count("<details>") for m in md) >= 2 and all(m.count("<details>") == m.count("</details>") for m in md)
    assert any(m.lstrip().startswith("## Summary") for m in md), "a Summary section"
    assert re.search(r"\*\*Next:\*\*.*\]\(", md[-1], re.S), "the last cell says where to go next, with a link"


def _code_with_preceding_markdown(cells: list[dict]) -> list[tuple[str, str]]:
    out, last_md = [], ""
    for c in cells:
        if c["cell_type"] == "markdown":
            last_md = "".join(c["source"])
        else:
            out.append(("".join(c["source"]), last_md))
    return out


def _declared_dependencies() -> set[str]:
    import tomllib

    proj = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]
    reqs = list(proj["dependencies"]) + [r for extra in proj["optional-dependencies"].values() for r in extra]
    names = {r.split("[")[0].split(">")[0].split("<")[0].split("=")[0].split(";")[0].strip().lower() for r in reqs}
    return names | {"edit_lab", "edit_course"}  # the two packages pyproject.toml installs


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
                    f"{nb.name} imports {m}, which is neither edit_lab, edit_course nor a declared dependency"


def capstone_diagnoses() -> dict[str, list]:
    from edit_course.lessons.capstone import mysteries
    from tests.capstone_solver import solve

    return {letter: list(solve(run)) for letter, run in mysteries().items()}


@pytest.mark.parametrize("nb", NBS, ids=lambda p: p.stem)
def test_runs_under_papermill(nb, tmp_path):
    """Every cell runs, top to bottom, with the small parameters (papermill raises on the first cell that
    fails). Once: nbval on a saved-without-outputs notebook would only run every cell a second time."""
    params = small_parameters(nb)
    if nb.name.startswith("08"):  # the capstone checks its check cells with the diagnoses a program finds
        params["DIAGNOSES"] = capstone_diagnoses()
    out, _ = execute(nb, tmp_path / "papermill", params)
    data = json.loads(out.read_text())
    errors = [o for c in data["cells"] if c["cell_type"] == "code" for o in c.get("outputs", [])
              if o.get("output_type") == "error"]
    assert not errors, errors[0].get("evalue")
    # every claim about the run printed as a verdict holds; a timing claim may not on a busy machine, and says so
    crosses = [line for _, ok, timing, line in notebook_verdicts(data) if not ok and not timing]
    assert not crosses, crosses
    # as shipped, no answer is written: every check of the score says "not answered yet" (issue 25)
    assert not shipped_problems(data, nb.name), shipped_problems(data, nb.name)
    # no output names a path of the machine it ran on (issue 40): the checkout's or the run's working directory
    printed = json.dumps([c.get("outputs", []) for c in data["cells"] if c["cell_type"] == "code"])
    leaked = [str(p) for p in (ROOT, tmp_path) if str(p) in printed]
    assert not leaked, f"{nb.name} prints paths of this machine: {leaked}"


LINK = re.compile(r"\]\(([^)\s]+)(?:\s+\"[^\"]*\")?\)|href=\"([^\"]+)\"")


def _relative_links(nb: Path) -> list[str]:
    """Every relative link target in the notebook's markdown cells (web links and in-page anchors left out)."""
    out = []
    for cell in json.loads(nb.read_text())["cells"]:
        if cell["cell_type"] != "markdown":
            continue
        for m in LINK.finditer("".join(cell["source"])):
            target = m.group(1) or m.group(2)
            if target.startswith(("http://", "https://", "mailto:", "#")):
                continue
            out.append(target)
    return out


@pytest.mark.parametrize("nb", NBS, ids=lambda p: p.stem)
def test_relative_links_resolve(nb):
    """Fast, nothing executed: a link from a notebook's text to a file (../docs/edit-method.md, the next
    notebook) names a file that exists in the repository."""
    broken = [t for t in _relative_links(nb) if not (nb.parent / t.split("#", 1)[0]).exists()]
    assert not broken, f"{nb.name} links to missing files: {broken}"


def test_the_link_finder_sees_markdown_links_and_anchors():
    import tempfile

    cell = {"cell_type": "markdown", "metadata": {}, "source": [
        "See [the method](../docs/edit-method.md#4) and [next](01_x.ipynb \"title\"), <a href=\"a.md\">a</a>, "
        "[web](https://example.org) and [here](#top)."]}
    with tempfile.TemporaryDirectory() as d:
        p = Path(d) / "00_x.ipynb"
        p.write_text(json.dumps({"cells": [cell]}))
        assert _relative_links(p) == ["../docs/edit-method.md#4", "01_x.ipynb", "a.md"]


@pytest.mark.parametrize("nb", NBS, ids=lambda p: p.stem)
def test_the_path_is_lean(nb):
    """Issue 25: the path up to the Summary reads in one sitting; the rest sits under "Going further"."""
    words = path_words(nb)
    assert words["path"] <= PATH_WORDS_MAX, \
        f"{nb.name}: {words['path']} words of markdown before the Summary (at most {PATH_WORDS_MAX}): " \
        f"move what goes beyond the lesson after the Summary, under '## Going further'"


def test_path_words_counts_before_and_after_the_summary(tmp_path):
    cells = [{"cell_type": "markdown", "source": ["# 09 · A title\n", "**Exercise 1 (do).** two more"]},
             {"cell_type": "code", "source": ["predict_x = None  # a guess"]},
             {"cell_type": "markdown", "source": ["## Summary\n", "- one | two"]},
             {"cell_type": "markdown", "source": ["## Going further"]}]
    nb = tmp_path / "09_x.ipynb"
    nb.write_text(json.dumps({"cells": cells}))
    assert path_words(nb) == {"path": 10, "after": 9, "cells": 4, "predictions": 1, "exercises": 1}
