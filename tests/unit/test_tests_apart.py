"""The library's tests never import the course: tests/unit and tests/distributed run where edit_course is not
installed, and the course's tests (anything that imports edit_course) live beside the course, in tests/course."""

from __future__ import annotations

import ast
from collections.abc import Callable
from pathlib import Path

TESTS = Path(__file__).resolve().parents[1]
LIBRARY_TESTS = ("unit", "distributed")
COURSE = ("edit_course", "tests.course")
IMPORTERS = ("import_module", "importorskip", "__import__")


def imports_of(path: Path, wanted: Callable[[str], bool]) -> list[str]:
    """Every import in one file of a module `wanted` accepts, as `line: module`: import statements anywhere (inside
    functions and under TYPE_CHECKING too) and modules named by string to importlib.import_module,
    pytest.importorskip or __import__ (tests/unit/test_layers.py asks it for the oracles)."""
    found: list[tuple[int, str]] = []
    for node in ast.walk(ast.parse(path.read_text(), filename=str(path))):
        names: list[str] = []
        if isinstance(node, ast.Import):
            names = [a.name for a in node.names]
        elif isinstance(node, ast.ImportFrom) and not node.level:
            names = [node.module or ""]
        elif isinstance(node, ast.Call) and node.args and isinstance(node.args[0], ast.Constant):
            func = node.func.attr if isinstance(node.func, ast.Attribute) else getattr(node.func, "id", "")
            if func in IMPORTERS and isinstance(node.args[0].value, str):
                names = [node.args[0].value]
        found += [(node.lineno, n) for n in names if wanted(n)]
    return [f"{line}: {name}" for line, name in sorted(found)]


def course_imports(path: Path) -> list[str]:
    """Every import of the course in one file (`imports_of`)."""
    return imports_of(path, lambda n: n.split(".")[0] == "edit_course" or n.startswith(COURSE[1]))


def test_no_library_test_imports_the_course():
    bad = {str(p.relative_to(TESTS.parent)): hits for folder in LIBRARY_TESTS
           for p in sorted((TESTS / folder).rglob("*.py")) if (hits := course_imports(p))}
    assert not bad, f"move these to tests/course/ (they test the course): {bad}"


def test_the_check_sees_every_kind_of_import(tmp_path):
    f = tmp_path / "t.py"
    f.write_text("import os\nfrom edit_lab import RunConfig\n"
                 "def t():\n    from edit_course.exercises import nb04\n"
                 "import importlib, pytest\nimportlib.import_module('edit_course.claims')\n"
                 "pytest.importorskip('edit_course')\nfrom tests.course.exercise_asserts import not_yet\n")
    assert course_imports(f) == ["4: edit_course.exercises", "6: edit_course.claims", "7: edit_course",
                                 "8: tests.course.exercise_asserts"]


def test_the_oracles_the_library_tests_import_never_import_the_course():
    """edit_oracles sits apart from the course so that the library's torchft tests can import it: an oracle that
    imported the course would bring it back into tests/distributed through the back door."""
    oracles = TESTS.parent / "edit_oracles"
    bad = {str(p.relative_to(TESTS.parent)): hits for p in sorted(oracles.rglob("*.py")) if (hits := course_imports(p))}
    assert sorted(p.name for p in oracles.rglob("*.py")) == ["__init__.py", "torchft_diloco.py"]  # the check sees them
    assert not bad, f"an oracle imports the course (the library's tests import the oracles): {bad}"
