"""The course's later notebooks (07, 08, 09, 10) through JupyterLab, checked as test_course_in_browser.py checks 01-03:
a file of their own, so that `make test`'s workers run the two halves side by side. 07, 08 and 09 also run under
nbval against their executed references (tests/notebooks/test_nbval.py).
"""

from __future__ import annotations

import pytest

from .browser import COURSE_LATER_IN_BROWSER
from .test_course_in_browser import check_in_the_browser

pytestmark = [pytest.mark.ui, pytest.mark.slow, pytest.mark.timeout(1200)]


@pytest.mark.parametrize("name", COURSE_LATER_IN_BROWSER)
def test_later_notebook_runs_and_reads_well_in_the_browser(open_notebook, name):
    check_in_the_browser(open_notebook, name)
