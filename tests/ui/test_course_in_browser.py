"""The rest of the course through JupyterLab, readability checked: 01, 02 and 03 here, 07, 08 and 09 in
test_course_later_in_browser.py (two files, so that two pytest workers run them side by side); with 00, 04, 05
and 06 (test_notebooks_in_browser.py, test_straggler_panel.py) every notebook of the course runs in the browser
in `make test`.

Each runs through the menus with its small test parameters and is checked as the others are: no error on the
page, everything the kernel sent drawn, no ✗ for a claim that is not a timing, every check "not answered yet",
and readability.py at both viewports. The papermill runs of 01, 02 and 03 are deselected when this file runs
(tests/conftest.py), so each lesson executes once; 07 and 08 also run under nbval against their executed
references (tests/notebooks/test_nbval.py), which compares their outputs, while this file looks at them. The
figure problems this file found when first run (legends over axis titles in 01–03, the 2-D mesh at a fixed
820 px, a cut slider label in 07) are fixed in the figures.
"""

from __future__ import annotations

import pytest

from .browser import COURSE_IN_BROWSER
from .checks import assert_as_its_reference, assert_readable, drawn_plotly_outputs, run_all_and_check

pytestmark = [pytest.mark.ui, pytest.mark.slow, pytest.mark.timeout(1200)]


@pytest.mark.parametrize("name", COURSE_IN_BROWSER)
def test_notebook_runs_and_reads_well_in_the_browser(open_notebook, name):
    check_in_the_browser(open_notebook, name)


def check_in_the_browser(open_notebook, name: str) -> None:
    """Run All Cells, everything drawn, no ✗ that is not a timing, readable at both viewports."""
    nb = open_notebook(name)
    saved = run_all_and_check(nb)
    assert_as_its_reference(saved, name)
    assert drawn_plotly_outputs(nb).count() >= 1, f"{name} should draw its figures"
    assert_readable(nb)
