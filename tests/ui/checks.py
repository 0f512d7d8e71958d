"""What the browser tests check on a notebook page, shared by the test files of this folder.

Split into several test files so that `make test`'s pytest workers (xdist, one file each at a time) run them
side by side; each worker starts one JupyterLab server, one chromium and one JupyterLab tab (conftest.py).
"""

from __future__ import annotations

from edit_course.tools.solutions import shipped_problems
from edit_course.verdict import notebook_verdicts

from tests.nbval.compare import differences, same_run_as_the_browser

from .notebook_page import NotebookPage
from .readability import VIEWPORTS, check_page

# Generous: the notebooks launch real multi-process runs, and CI machines can be small and busy.
RUN_ALL_TIMEOUT_S = 600
PANEL_RUN_TIMEOUT_S = 300

# Every text a plotly figure draws (titles, ticks, legend) and how many marks it has, as one value:
# two states of a figure differ exactly when what the reader sees of it differs.
_FIGURE_JS = """
(plot) => ({
  texts: Array.from(plot.querySelectorAll('text')).map((t) => t.textContent).filter((t) => t),
  traces: plot.querySelectorAll('.trace').length,
  marks: plot.querySelectorAll('.point, path.bar, .scatterlayer path.js-line').length,
  svg: plot.querySelectorAll('.main-svg').length,
})
"""


def run_all_and_check(nb: NotebookPage) -> dict:
    """Run All Cells from the menu; no error on the page, every figure and widget the kernel sent drawn, no
    ✗ printed for a claim that is not a timing (`edit_course.verdict`), and the score cell saying "not answered
    yet" for every check (`solutions.shipped_problems`)."""
    nb.screenshot("opened")
    nb.run_all(RUN_ALL_TIMEOUT_S)
    nb.screenshot("after-run-all")
    errors = nb.errors_shown()
    assert not errors, f"{nb.name} shows errors after Run All Cells:\n" + "\n".join(errors)
    saved = nb.save()
    problems = nb.check_rendered(saved)
    assert not problems, f"{nb.name}: something the kernel sent is not drawn:\n{problems}\n" \
                         f"screenshots: {[str(p) for p in nb.shots]}"
    # every claim about the run that is not a timing holds, as under papermill (tests/notebooks)
    crosses = [f"cell {i}: {line}" for i, ok, timing, line in notebook_verdicts(saved) if not ok and not timing]
    assert not crosses, f"{nb.name} printed claims its own run did not show:\n" + "\n".join(crosses)
    unanswered = shipped_problems(saved, nb.name)  # no answer written: every check "not answered yet"
    assert not unanswered, "\n".join(unanswered)
    return saved


def assert_as_its_reference(saved: dict, name: str) -> None:
    """A lesson with an nbval reference (tests/nbval/): the outputs of its checked cells, as this run in the
    browser saved them, say what the reference says (tests/nbval/compare.py, nbval's rule), so nbval need not
    run it a second time (tests/conftest.py deselects that run)."""
    stem = name.removesuffix(".ipynb")
    if not same_run_as_the_browser(stem):
        return
    problems = differences(saved, stem)
    assert not problems, (f"{name} does not reproduce tests/nbval/{stem}.ipynb (after a deliberate change: "
                          "`make nbval-refs`, then read the diff):\n" + "\n\n".join(problems))


def assert_readable(nb: NotebookPage) -> dict:
    """Every figure and panel of the page readable at each viewport of `VIEWPORTS` (see readability.py)."""
    problems, sliders = check_page(nb)
    assert not problems, (f"{nb.name} is not readable ({len(problems)} problems; viewports {list(VIEWPORTS)}):\n"
                          + "\n".join(f"- {p}" for p in problems)
                          + f"\nscreenshots: {[str(p) for p in nb.shots]}")
    return sliders


def figure_state(plot) -> dict:
    return plot.evaluate(_FIGURE_JS)


def drawn_plotly_outputs(nb: NotebookPage):
    """The plotly figures shown as cell outputs (not inside widgets), each drawn as SVG."""
    return nb.page.locator(".jp-Cell-outputArea > .jp-OutputArea-child > .jp-RenderedPlotly:has(.main-svg)")
