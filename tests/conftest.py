"""Top-level pytest setup.

Put the repository root on sys.path only when ``edit_lab`` is not importable, so the
suite also runs from a plain checkout; an installed (editable) package always wins.

Each notebook is executed once per session: when the browser tests that run a notebook through
JupyterLab are collected too (and chromium is there to run them), its papermill run is deselected.
"""

from __future__ import annotations

import importlib.util
import sys
from pathlib import Path

if importlib.util.find_spec("edit_lab") is None:
    sys.path.insert(0, str(Path(__file__).resolve().parents[1]))


def pytest_collection_modifyitems(config, items):
    from tests.ui.browser import NOTEBOOKS_RUN_IN_BROWSER, find_chromium

    in_browser = {i.nodeid.split("::")[0] for i in items if "/ui/test_lab_ui.py" in i.nodeid.replace("\\", "/")}
    if not in_browser or find_chromium() is None:
        return
    stems = {name.removesuffix(".ipynb") for name in NOTEBOOKS_RUN_IN_BROWSER}
    again = [i for i in items if "test_runs_under_papermill[" in i.nodeid
             and i.nodeid.split("[", 1)[1].rstrip("]") in stems]
    if again:
        config.hook.pytest_deselected(items=again)
        items[:] = [i for i in items if i not in again]
