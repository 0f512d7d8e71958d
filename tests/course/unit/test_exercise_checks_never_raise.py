"""No exercise check ever raises at a student: every public `check_*` of every edit_course/exercises/nb*.py,
found by inspection (a new check is covered without touching this file), given any bad answer a student can
type, prints one friendly line and returns a falsy result; and the sources hold no `assert` statement and no
`raise AssertionError`.

A check's first parameter is the answer (a number, a list, a prediction or the reader's function); its
defaulted parameters are left alone; its other required parameters (what the run measured, for a
prediction) get the realistic values the notebooks pass, from `REQUIRED` below.
"""

from __future__ import annotations

import ast
import importlib
import inspect
import re
import tempfile
from pathlib import Path
from typing import Any

import pytest

import edit_course.exercises as exercises
from edit_course.exercises import CheckResult, compare_prediction, compare_yes_no
from edit_course.verdict import FAIL, PASS, parse
from edit_lab import RunConfig

PACKAGE_DIR = Path(exercises.__file__).parent

# The other required parameters of a check, as the notebooks pass them (`grep -n "check_" notebooks/*.ipynb`).
REQUIRED: dict[str, dict[str, Any]] = {
    "check_gather_prediction": {"measured": 9, "model": "tiny"},                 # 00: all-gathers of one step
    "check_slowdown_prediction": {"measured": 0.56, "factor": 2.0},              # 01: ratio, SLOW_FACTOR
    "check_bytes_ratio_prediction": {"measured": 10.0, "interval": 10},          # 02: saving ratio, TAU
    "check_state_prediction": {"measured": 0.5, "shards": 4},                    # 03: measured, S_max
    "check_prediction_cheaper": {"edit_ms": 12.5, "diloco_ms": 30.0,             # 04: exposed ms, the setting
                                 "setting": "tiny, 4×64 tokens, 20 MB/s + 2 ms"},
    "check_prediction_same_bits": {"same": True},                                # 07: torchrun vs launch()
    # 05: a real run of the notebook's base; every bad answer here is refused before any process starts
    "check_weighting_in_a_run": {"base": RunConfig(method="edit", model="nano", steps=4),
                                 "out": Path(tempfile.gettempdir()) / "edit-lab-never-raise"},
    # 01: a real 1 × 2 run of the notebook's base; every bad answer here is refused before any process starts
    "check_all_reduce_in_a_run": {"base": RunConfig(method="sync", shards=1, replicas=2, model="nano", seq_len=32,
                                                    batch_size=4, steps=4),
                                  "out": Path(tempfile.gettempdir()) / "edit-lab-never-raise"},
    # 06: a real run of the notebook's virtual-clock base; every bad answer here is refused before it starts
    "check_straggler_in_a_run": {"base": RunConfig(method="edit", clock="virtual", shards=1, replicas=2,
                                                   model="nano", seq_len=32, batch_size=4, steps=4),
                                 "out": Path(tempfile.gettempdir()) / "edit-lab-never-raise"},
    # 02: a real run of the notebook's base; every bad answer here is named on toy tensors before any launch
    "check_outer_step_in_a_run": {"base": RunConfig(method="diloco", model="nano", steps=4),
                                  "out": Path(tempfile.gettempdir()) / "edit-lab-never-raise"},
    # 03: a real 2 × 2 run of the notebook's base; every bad answer here fails the plain check, nothing starts
    "check_sync_group_in_a_run": {"base": RunConfig(method="edit", shards=2, replicas=2, model="nano", steps=4),
                                  "out": Path(tempfile.gettempdir()) / "edit-lab-never-raise"},
    # 04: a real 2 × 2 EDiT run of the notebook's base; every bad answer here fails the replay check, nothing starts
    "check_schedule_in_a_run": {"base": RunConfig(method="edit", shards=2, replicas=2, model="nano", steps=4),
                                "out": Path(tempfile.gettempdir()) / "edit-lab-never-raise"},
}

# What every falsy verdict line starts with (never a verdict symbol of edit_course.verdict).
NOT_RIGHT = ("Not yet: ", "Not answered yet. ", "Not quite: ", "Not this time. ")


def _raises(*args: Any, **kwargs: Any) -> Any:
    raise RuntimeError(f"{FAIL} boom\n{PASS} a second line that looks like a verdict")


class _Opaque:
    """An object that cannot be shown, counted, iterated or converted."""

    def __repr__(self) -> str:
        raise ValueError("no repr")

    def __float__(self) -> float:
        raise RuntimeError("no float")

    def __iter__(self):
        raise RuntimeError("no iter")


class _Multiline:
    def __repr__(self) -> str:
        return f"first line\n{FAIL} looks like a failed claim"


def _bad_answers() -> dict[str, Any]:
    import numpy as np
    import torch

    return {
        "None": None, "'abc'": "abc", "''": "", "[]": [], "[1]": [1], "(1, 2, 3)": (1, 2, 3), "{}": {},
        "-1": -1, "1e9": 1e9, "nan": float("nan"), "inf": float("inf"), "object()": object(),
        "a lambda that raises": _raises, "a lambda returning None": lambda *a, **k: None,
        "a lambda returning 'abc'": lambda *a, **k: "abc", "a lambda returning [object()]": lambda *a, **k: [object()],
        "a lambda returning 1e9": lambda *a, **k: 1e9, "a lambda of no arguments": lambda: 0,
        "a numpy array": np.array([1.0, 2.0]), "a tensor": torch.tensor([1.0, 2.0]),
        "an opaque object": _Opaque(), "a multi-line repr": _Multiline(),
    }


def public_checks() -> list[tuple[str, Any]]:
    """(module:name, function) of every public check_* defined in edit_course/exercises/nb*.py."""
    found = []
    for path in sorted(PACKAGE_DIR.glob("nb*.py")):
        module = importlib.import_module(f"{exercises.__name__}.{path.stem}")
        for name, fn in inspect.getmembers(module, inspect.isfunction):
            if name.startswith("check_") and fn.__module__ == module.__name__:
                found.append((f"{path.stem}:{name}", fn))
    return found


CHECKS = public_checks()


def _call(fn: Any, bad: Any) -> Any:
    """`fn(bad, **its other required parameters)`, defaulted ones left alone."""
    params = list(inspect.signature(fn).parameters.values())
    kwargs = {}
    for p in params[1:]:
        if p.default is inspect.Parameter.empty and p.kind not in (p.VAR_POSITIONAL, p.VAR_KEYWORD):
            assert p.name in REQUIRED.get(fn.__name__, {}), (
                f"{fn.__name__} requires {p.name!r}: add the value the notebook passes to REQUIRED")
            kwargs[p.name] = REQUIRED[fn.__name__][p.name]
    return fn(bad, **kwargs)


def _assert_falsy_and_said(result: Any, out: str, what: str) -> None:
    assert isinstance(result, CheckResult), (what, result)
    assert not result, (what, out)
    assert out.count("\n") == 1 and out.endswith("\n"), (what, out)  # one line
    assert out.startswith(NOT_RIGHT), (what, out)
    assert parse(out) == [], (what, out)  # never read as a claim's verdict by the notebook tests


def test_every_module_has_checks_and_every_check_is_found():
    modules = {name.split(":")[0] for name, _ in CHECKS}
    assert modules == {p.stem for p in PACKAGE_DIR.glob("nb*.py")}
    assert len(CHECKS) >= 20


def test_required_table_names_only_existing_checks():
    names = {fn.__name__: fn for _, fn in CHECKS}
    for check, kwargs in REQUIRED.items():
        assert check in names, f"REQUIRED names {check}, which no longer exists"
        assert set(kwargs) <= set(inspect.signature(names[check]).parameters), check


@pytest.mark.parametrize("name, fn", CHECKS, ids=[n for n, _ in CHECKS])
def test_a_bad_answer_is_said_never_raised(name, fn, capsys):
    for what, bad in _bad_answers().items():
        result = _call(fn, bad)
        _assert_falsy_and_said(result, capsys.readouterr().out, f"{name}({what})")


@pytest.mark.parametrize("name, fn", CHECKS, ids=[n for n, _ in CHECKS])
def test_the_result_displays_nothing_in_a_notebook(name, fn, capsys):
    formatters = pytest.importorskip("IPython.core.formatters")
    result = _call(fn, None)
    capsys.readouterr()
    assert formatters.DisplayFormatter().format(result) == ({}, {}), name  # no bare True/False under the message
    assert repr(result).startswith("<check: "), name


def test_the_prediction_helpers_the_notebooks_call_directly(capsys):
    for what, bad in _bad_answers().items():
        result = compare_prediction(bad, 3.0, what="units flagged", why="Every unit at once.", abs_tol=0.5)
        _assert_falsy_and_said(result, capsys.readouterr().out, f"compare_prediction({what})")
        result = compare_yes_no(bad, True, "It was.")
        _assert_falsy_and_said(result, capsys.readouterr().out, f"compare_yes_no({what})")


# ------------------------------------------------------------------------------------- the sources
SOURCES = sorted(PACKAGE_DIR.glob("*.py"))


@pytest.mark.parametrize("path", SOURCES, ids=lambda p: p.name)
def test_no_assert_and_no_raise_assertion_error_in_the_sources(path):
    text = path.read_text()
    assert "raise AssertionError" not in text, path.name
    assert not re.search(r"^\s*assert\s", text, re.MULTILINE), path.name
    for node in ast.walk(ast.parse(text)):
        assert not isinstance(node, ast.Assert), f"{path.name}:{node.lineno}: an assert statement"
        if isinstance(node, ast.Raise) and node.exc is not None:
            exc = node.exc.func if isinstance(node.exc, ast.Call) else node.exc
            assert not (isinstance(exc, ast.Name) and exc.id == "AssertionError"), f"{path.name}:{node.lineno}"


@pytest.mark.parametrize("path", SOURCES, ids=lambda p: p.name)
def test_no_message_starts_a_line_with_a_verdict_symbol(path):
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.Constant) and isinstance(node.value, str):
            for line in node.value.splitlines():
                assert not line.lstrip().startswith((PASS + " ", FAIL + " ")), f"{path.name}:{node.lineno}: {line!r}"
