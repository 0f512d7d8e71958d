"""Top-level pytest setup.

Put the repository root on sys.path only when ``edit_lab`` is not importable, so the
suite also runs from a plain checkout; an installed (editable) package always wins.

Each notebook is executed once per session: when the browser test that runs a notebook through
JupyterLab is collected too (and chromium is there to run it), or nbval runs it against its reference
(tests/notebooks/test_nbval.py), its papermill run is deselected; and a lesson the browser runs is compared
with its nbval reference there (tests/nbval/compare.py), so nbval's own run of it is deselected too.
The longest files are put first, for `make test`'s two xdist workers (LONGEST_FIRST).
"""

from __future__ import annotations

import importlib.util
import sys
from pathlib import Path

if importlib.util.find_spec("edit_lab") is None:
    sys.path.insert(0, str(Path(__file__).resolve().parents[1]))


#: The longest test files, longest first (seconds of a fresh clone's run on 2 cores). `make test` runs pytest
#: with two xdist workers, each taking one whole file at a time in this order (--no-loadscope-reorder):
#: started first, they run side by side instead of leaving one worker alone with them at the end.
LONGEST_FIRST = ("tests/ui/test_notebooks_in_browser.py",  # ~250 (00, 04, 05)
                 "tests/ui/test_course_in_browser.py",  # ~200 (01, 02, 03)
                 "tests/ui/test_course_later_in_browser.py",  # ~170 (07, 08, 09)
                 "tests/ui/test_straggler_panel.py",  # ~150 (06 and its panel's run)
                 "tests/ui/test_subshells.py",  # ~170 (the panel's Run and the interrupt, comms on and off subshells)
                 "tests/install/test_binder.py",  # ~35
                 "tests/notebooks/test_nbval.py",  # ~20 (08 under nbval; 03, 06, 07, 09 are checked in the browser)
                 "tests/notebooks/test_notebooks.py",  # hygiene; papermill only where no browser runs a lesson
                 "tests/ui/test_checks_catch_problems.py",  # ~60
                 "tests/distributed/test_cli.py",  # ~90
                 "tests/distributed/test_engine.py",  # ~60
                 "tests/distributed/test_sim_matches_virtual.py",  # ~18 (33 trainings on the virtual clock)
                 "tests/distributed/test_virtual_time_only.py",  # ~12 (11 configurations, real and time only)
                 # the longest unit files (`make test-fast` is these first, then the rest alphabetically)
                 "tests/unit/test_simulate.py",  # ~10
                 "tests/course/unit/test_panels.py",  # ~9
                 "tests/unit/test_examples.py",  # ~8
                 "tests/unit/test_straggler_lab_clock.py",  # ~6
                 "tests/unit/test_viz_figures.py")  # ~6


def _file(item) -> str:
    return item.nodeid.split("::")[0].replace("\\", "/")


def pytest_collection_modifyitems(config, items):
    from tests.ui.browser import RUN_IN_BROWSER_BY, find_chromium

    rank = {f: i for i, f in enumerate(LONGEST_FIRST)}
    items.sort(key=lambda item: rank.get(_file(item), len(rank)))  # stable: the rest keep their order

    # a lesson nbval runs against its reference (tests/notebooks/test_nbval.py) is not run by papermill again
    by_nbval = {i.nodeid.split("[", 1)[1].rstrip("]") for i in items
                if "test_the_lesson_reproduces_its_reference[" in i.nodeid}
    if by_nbval and importlib.util.find_spec("nbval") is not None:
        _deselect(config, items, by_nbval)

    files = {_file(i).rsplit("/", 1)[-1] for i in items if "/ui/" in _file(i)}
    in_browser = {nb for f, nbs in RUN_IN_BROWSER_BY.items() if f in files for nb in nbs}
    if not in_browser or find_chromium() is None:
        return
    from tests.nbval.compare import same_run_as_the_browser

    stems = {name.removesuffix(".ipynb") for name in in_browser}
    _deselect(config, items, stems)
    # a lesson the browser runs is compared with its nbval reference there (tests/ui/checks.py,
    # assert_as_its_reference): nbval's own run of it is deselected too
    again = [i for i in items if "test_the_lesson_reproduces_its_reference[" in i.nodeid
             and (stem := i.nodeid.split("[", 1)[1].rstrip("]")) in stems and same_run_as_the_browser(stem)]
    if again:
        config.hook.pytest_deselected(items=again)
        items[:] = [i for i in items if i not in again]


def _deselect(config, items, stems: set[str]) -> None:
    """Deselect the papermill runs of these notebooks (run once per session, elsewhere)."""
    again = [i for i in items if "test_runs_under_papermill[" in i.nodeid
             and i.nodeid.split("[", 1)[1].rstrip("]") in stems]
    if again:
        config.hook.pytest_deselected(items=again)
        items[:] = [i for i in items if i not in again]
