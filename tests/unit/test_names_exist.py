"""One name, one thing: every module path the prose names exists.

The README, docs/*.md and the docstrings of edit_lab/ and edit_course/ name code as dotted paths
(`edit_lab.core.penalty.softmax_weights`, `edit_course.exercises`) and as file paths (`edit_lab/core/comm.py`,
`edit_lab/rules/`). After a file moves, a name left behind sends a reader nowhere: each must import (a module, or
an attribute of one) or exist on disk.
"""

from __future__ import annotations

import ast
import importlib
import re
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
DOTTED = re.compile(r"\b((?:edit_lab|edit_course)(?:\.[A-Za-z_][A-Za-z0-9_]*)+)")
PATH = re.compile(r"(?<![\w/])((?:edit_lab|edit_course)/[A-Za-z0-9_/]*[A-Za-z0-9_]+(?:\.py)?/?)")
#: Dotted names that are not code: the notebook metadata key the course reads its test parameters from.
NOT_CODE = {"edit_lab.test_parameters"}


def texts() -> list[tuple[str, str]]:
    """(where, text): the README, docs/*.md and every docstring of the two packages."""
    out = [(p.name if p.parent == ROOT else f"docs/{p.name}", p.read_text())
           for p in [ROOT / "README.md", *sorted((ROOT / "docs").glob("*.md"))]]
    for package in ("edit_lab", "edit_course"):
        for path in sorted((ROOT / package).rglob("*.py")):
            for node in ast.walk(ast.parse(path.read_text())):
                if isinstance(node, (ast.Module, ast.ClassDef, ast.FunctionDef, ast.AsyncFunctionDef)):
                    if doc := ast.get_docstring(node, clean=False):
                        out.append((f"{path.relative_to(ROOT)}:{getattr(node, 'lineno', 1)}", doc))
    return out


def resolves(name: str) -> bool:
    """The longest importable prefix of `name`, then the rest as attributes."""
    parts = name.split(".")
    for i in range(len(parts), 0, -1):
        try:
            obj = importlib.import_module(".".join(parts[:i]))
        except ImportError:
            continue
        for attr in parts[i:]:
            if not hasattr(obj, attr):
                return False
            obj = getattr(obj, attr)
        return True
    return False


def exists(path: str) -> bool:
    path = path.rstrip("/")
    return (ROOT / path).exists() or (ROOT / f"{path}.py").exists()


def stale(items: list[tuple[str, str]]) -> list[str]:
    bad = []
    for where, text in items:
        bad += [f"{where}: {n}" for m in DOTTED.finditer(text)
                if (n := m.group(1).rstrip(".")) not in NOT_CODE and not resolves(n)]
        bad += [f"{where}: {m.group(1)}" for m in PATH.finditer(text) if not exists(m.group(1))]
    return bad


@pytest.mark.skipif(not (ROOT / "edit_course").is_dir(), reason="the course is not beside the library")
def test_every_named_module_exists():
    assert not (bad := stale(texts())), "names of code that do not exist (fix or drop them):\n" + "\n".join(bad)


def test_a_stale_name_is_caught():
    prose = [("x", "see `edit_lab.core.penalty.softmax_weights` and edit_lab/core/comm.py, edit_lab/rules/; "
                   "not edit_lab.model.no_such_name, edit_lab.schedule.fragment_landing or edit_lab/widgets.py")]
    assert stale(prose) == ["x: edit_lab.model.no_such_name", "x: edit_lab.schedule.fragment_landing",
                            "x: edit_lab/widgets.py"]
