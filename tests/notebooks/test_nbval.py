"""nbval: the lessons whose numbers must not drift, run against their executed references (tests/nbval/).

A reference is its lesson run with the test parameters, holding the outputs of the cells tagged
`nbval-check-output` only (`make nbval-refs` writes them, tests/nbval/refresh.py says which lessons and why).
`pytest --nbval-lax` runs every cell of the reference in a fresh kernel and compares the tagged cells' outputs,
after tests/nbval/sanitize.cfg's sanitizers, so a change that moves a lesson's number fails with nbval's diff.
nbval runs the whole lesson, so its papermill run is deselected (tests/conftest.py), and where chromium runs the
browser tests, a lesson the browser runs is compared there instead (tests/nbval/compare.py); each inner run starts in
a temporary folder, where the lesson writes its runs.
"""

from __future__ import annotations

import json
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from tests.nbval.lesson_digest import kernel_env
from tests.nbval.refresh import CHECK_TAG, HERE, REFERENCES, lesson

SANITIZE = HERE / "sanitize.cfg"
pytestmark = pytest.mark.notebooks


def nbval(notebook: Path, cwd: Path, timeout_s: int = 600) -> subprocess.CompletedProcess:
    """pytest --nbval-lax on one notebook, in a pytest of its own started in `cwd` (no project conftest, no
    xdist): what `make test` asks of every reference. Its kernel shows figures and tables as digests of what they
    say (tests/nbval/lesson_digest.py), as the refresh's kernel did."""
    pytest.importorskip("nbval")
    cmd = [sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", "-p", "no:xdist", "--nbval-lax",
           "--nbval-current-env", f"--nbval-cell-timeout={timeout_s}", "--nbval-sanitize-with", str(SANITIZE),
           str(notebook)]
    return subprocess.run(cmd, cwd=cwd, capture_output=True, text=True, timeout=2 * timeout_s,
                          env=kernel_env(cwd / ".kernel"))


def _cells(nb: dict) -> list[tuple]:
    return [(c["cell_type"], "".join(c["source"]), sorted(c.get("metadata", {}).get("tags", [])))
            for c in nb["cells"] if "injected-parameters" not in c.get("metadata", {}).get("tags", [])]


@pytest.mark.parametrize("name", REFERENCES)
def test_the_reference_is_the_lesson_as_it_stands(name):
    """A lesson edited without refreshing its reference would be checked against old code: refused, with the
    command that refreshes it."""
    ref = json.loads((HERE / f"{name}.ipynb").read_text())
    nb = json.loads(lesson(name).read_text())
    mine, theirs = _cells(ref), _cells(nb)
    changed = [i for i, (a, b) in enumerate(zip(mine, theirs)) if a != b]
    assert len(mine) == len(theirs) and not changed, (
        f"tests/nbval/{name}.ipynb is not notebooks/{name}.ipynb as it stands (cells {changed[:5]} differ, "
        f"{len(mine)} against {len(theirs)} cells): run `make nbval-refs`, then read the diff of tests/nbval/")
    assert any(CHECK_TAG in tags for _, _, tags in theirs), f"{name}: no cell is tagged {CHECK_TAG}"
    unchecked_outputs = [i for i, c in enumerate(ref["cells"]) if c["cell_type"] == "code" and c.get("outputs")
                         and CHECK_TAG not in c.get("metadata", {}).get("tags", [])]
    assert not unchecked_outputs, f"{name}: outputs kept in cells nbval does not compare: {unchecked_outputs}"


@pytest.mark.slow
@pytest.mark.parametrize("name", REFERENCES)
def test_the_lesson_reproduces_its_reference(name, tmp_path):
    copy = tmp_path / f"{name}.ipynb"
    shutil.copy(HERE / f"{name}.ipynb", copy)
    done = nbval(copy, tmp_path)
    assert done.returncode == 0, f"nbval on tests/nbval/{name}.ipynb:\n{done.stdout[-6000:]}\n{done.stderr[-2000:]}"
    assert " passed" in done.stdout, done.stdout[-2000:]


def _notebook(cells: list[tuple[str, str, bool]]) -> dict:
    """A notebook of code cells (source, stored stdout, checked)."""
    return {"cells": [{"cell_type": "code", "execution_count": i,
                       "metadata": {"tags": [CHECK_TAG]} if check else {},
                       "outputs": [{"name": "stdout", "output_type": "stream", "text": [out]}], "source": [src]}
                      for i, (src, out, check) in enumerate(cells, start=1)],
            "metadata": {"kernelspec": {"name": "python3", "display_name": "Python 3", "language": "python"}},
            "nbformat": 4, "nbformat_minor": 4}


def test_a_moved_number_fails_with_its_diff_and_an_unchecked_cell_is_not_compared(tmp_path):
    nb = tmp_path / "lesson.ipynb"
    nb.write_text(json.dumps(_notebook([("print(6 * 7)", "41\n", True),
                                        ("print('drifts')", "anything\n", False),
                                        ("print('run in /tmp/x/runs/a, 0.12345678')",
                                         "run in /home/y/runs/b, 0.1234999\n", True)])))
    failed = nbval(nb, tmp_path, timeout_s=120)
    assert failed.returncode != 0, failed.stdout[-2000:]
    assert "41" in failed.stdout and "42" in failed.stdout, failed.stdout[-3000:]
    assert "1 failed, 2 passed" in failed.stdout, failed.stdout[-2000:]  # the sanitized paths and digits agree
    nb.write_text(nb.read_text().replace('"41\\n"', '"42\\n"'))
    passed = nbval(nb, tmp_path, timeout_s=120)
    assert passed.returncode == 0 and "3 passed" in passed.stdout, passed.stdout[-3000:]
