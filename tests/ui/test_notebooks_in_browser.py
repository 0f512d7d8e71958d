"""The lab in a real browser: notebooks run through JupyterLab's menus, checked as the reader sees them.

Each test saves screenshots of the states it checks into its tmp_path (listed in the test's output
and named in every failure message). Run the browser tests alone with `make test-ui`; notebook 06 and
its StragglerLab panel are test_straggler_panel.py's.

Drawn is not enough: after running notebooks 00, 04 and 05, every figure (every tab of every
panel too) and every control is checked for readability by geometry (readability.py) at 1280×800
with JupyterLab's file browser open and at 1920×1080, on the same executed page: no text over
another, nothing cut, figures as wide as the notebook, every slider's value in view.
"""

from __future__ import annotations

import pytest

from .browser import RUN_IN_BROWSER_BY
from .checks import assert_readable, drawn_plotly_outputs, figure_state, run_all_and_check

pytestmark = [pytest.mark.ui, pytest.mark.slow, pytest.mark.timeout(1200)]

WELCOME, PREFETCH, PENALTY = RUN_IN_BROWSER_BY["test_notebooks_in_browser.py"]


def test_welcome_notebook_runs_and_draws(open_notebook):
    nb = open_notebook(WELCOME)
    run_all_and_check(nb)

    figures = drawn_plotly_outputs(nb)
    assert figures.count() >= 2, f"{WELCOME} should draw at least the timeline and the loss figure, " \
                                 f"drew {figures.count()}"
    for i in range(figures.count()):
        state = figure_state(figures.nth(i))
        assert state["svg"] >= 1 and state["traces"] >= 1, f"figure {i} of {WELCOME} has no traces: {state}"
        nb.screenshot(f"figure-{i}", figures.nth(i))
    # the TimelineExplorer panel: its controls and its FigureWidget, drawn
    explorer = nb.page.locator(".jp-OutputArea-output:has(.jupyter-widgets .widget-slider):has(.js-plotly-plot)")
    assert explorer.count() >= 1, f"{WELCOME}: no widget panel with a slider and a figure on the page"
    state = figure_state(explorer.first.locator(".js-plotly-plot").first)
    assert state["svg"] >= 1 and state["traces"] >= 1, f"the explorer's figure is not drawn: {state}"
    nb.screenshot("explorer", explorer.first)
    sliders = assert_readable(nb)
    assert all(n >= 1 for n in sliders.values()), f"the explorer's step slider was not checked: {sliders}"


@pytest.mark.parametrize("name", [PREFETCH, PENALTY])
def test_notebook_runs_and_reads_well(open_notebook, name):
    """Notebooks 04 (StragglerLab, a bandwidth panel) and 05 (a penalty panel), run through the menus."""
    nb = open_notebook(name)
    run_all_and_check(nb)
    assert drawn_plotly_outputs(nb).count() >= 2, f"{name} should draw figures"
    sliders = assert_readable(nb)
    if name == PREFETCH:
        assert all(n >= 6 for n in sliders.values()), f"the StragglerLab's sliders were not all checked: {sliders}"
