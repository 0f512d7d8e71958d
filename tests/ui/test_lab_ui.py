"""The lab in a real browser: notebooks run through JupyterLab's menus, checked as the reader sees them.

Each test saves screenshots of the states it checks into its tmp_path (listed in the test's output
and named in every failure message). Run alone with `make test-ui`.

Drawn is not enough: after running notebooks 00, 04, 05 and 06, every figure (every tab of every
panel too) and every control is checked for readability by geometry (readability.py) at 1280×800
with JupyterLab's file browser open and at 1920×1080, on the same executed page: no text over
another, nothing cut, figures as wide as the notebook, every slider's value in view.
"""

from __future__ import annotations

import re
import time

import nbformat
import pytest

from edit_lab.verdict import notebook_verdicts
from edit_lab.widgets import FIGURES, StragglerLab

from .browser import NOTEBOOKS_RUN_IN_BROWSER
from .notebook_page import NotebookPage
from .readability import VIEWPORTS, check_page

pytestmark = [pytest.mark.ui, pytest.mark.slow, pytest.mark.timeout(1200)]

WELCOME, PREFETCH, PENALTY, STRAGGLERS = NOTEBOOKS_RUN_IN_BROWSER
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
    """Run All Cells from the menu; no error on the page, every figure and widget the kernel sent drawn, and no
    ✗ printed for a claim that is not a timing (`edit_lab.verdict`)."""
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
    return saved


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


def _slow_factor_control() -> tuple[str, float]:
    """The straggler slider's label and step, read from the panel itself so a rename is followed."""
    lab = StragglerLab(launcher=lambda cfg: None)
    return lab.slow_factor.description, float(lab.slow_factor.step)


def test_straggler_panel_reruns_from_the_browser(open_notebook):
    nb = open_notebook(STRAGGLERS)
    run_all_and_check(nb)
    assert drawn_plotly_outputs(nb).count() >= 2, f"{STRAGGLERS} should draw straggler and loss figures"
    page = nb.page
    label, step = _slow_factor_control()

    panel = page.locator(".jp-OutputArea-output").filter(
        has=page.locator(".widget-button", has_text=re.compile(r"^\s*Run\s*$"))).filter(
        has=page.locator(".widget-label", has_text=label))
    assert panel.count() >= 1, f"{STRAGGLERS}: no StragglerLab panel (a Run button and a {label!r} slider)"
    panel = panel.first
    run_button = page.locator(".widget-button", has_text=re.compile(r"^\s*Run\s*$"))
    button = panel.locator(run_button)
    slider = panel.locator(".widget-slider").filter(has=page.locator(".widget-label", has_text=label))
    handle = slider.locator(".noUi-handle")
    readout = slider.locator(".widget-readout")
    plots = panel.locator(".js-plotly-plot")
    assert plots.count() == len(FIGURES), f"the panel should hold {len(FIGURES)} figures, has {plots.count()}"
    status = panel.locator(".widget-hbox").filter(has=run_button).locator(".widget-html-content")
    status_before = status.last.inner_text()

    check_preview_follows_the_slider(nb, panel, slider.locator(".noUi-handle"), step)

    # every tab's FigureWidget is drawn; the straggler tab is the one that compares runs
    for name in FIGURES:
        panel.locator(".lm-TabBar-tab", has_text=name).first.click()
        state = figure_state(plots.nth(FIGURES.index(name)))
        assert state["svg"] >= 1, f"the {name!r} tab of the panel has no SVG: {state}"
    panel.locator(".lm-TabBar-tab", has_text="stragglers").first.click()
    strag = plots.nth(FIGURES.index("stragglers"))
    before = figure_state(strag)
    nb.screenshot("panel-before", panel)

    # move the slider with the keyboard, to a factor no run on the page has yet
    current = float(handle.get_attribute("aria-valuenow"))
    text_before = " ".join(before["texts"])
    target = next(v for v in (3.0, 2.5, 3.5, 2.0, 4.0, 1.5) if v != current and f"slow ×{v:g}" not in text_before)
    handle.click()
    keys = round((target - current) / step)
    for _ in range(abs(keys)):
        handle.press("ArrowRight" if keys > 0 else "ArrowLeft")
    deadline = time.monotonic() + 30
    while readout.inner_text().strip() != f"{target:.2f}" and time.monotonic() < deadline:
        time.sleep(0.2)
    assert readout.inner_text().strip() == f"{target:.2f}", \
        f"the slider shows {readout.inner_text()!r} after {abs(keys)} key presses, expected {target:.2f}"
    nb.screenshot("slider-moved", panel)

    # press Run: a real run with the slow replica, then the figures redraw
    button.click()
    nb.wait_for(lambda: nb.kernel_state() == "busy" or "running" in status.last.inner_text(), 60,
             "the Run button to start a run")
    nb.wait_idle(PANEL_RUN_TIMEOUT_S, "the run started by the Run button")
    want = f"slow ×{target:g}"
    nb.wait_for(lambda: want in " ".join(figure_state(strag)["texts"]), 60,
             f"the straggler figure to show the new run ({want!r})")
    after = figure_state(strag)
    status_after = status.last.inner_text()
    nb.screenshot("panel-after-run", panel)
    panel.locator(".lm-TabBar-tab", has_text="loss").first.click()
    nb.screenshot("panel-after-run-loss", panel)

    assert "failed" not in status_after, f"the run failed: {status_after}"
    assert "tokens/s" in status_after and status_after != status_before, \
        f"the summary did not change to the new run's throughput: {status_before!r} -> {status_after!r}"
    assert after["texts"] != before["texts"] and want not in text_before, (before, after)
    assert after["marks"] >= 1 and after["svg"] >= 1, after
    problems = nb.check_rendered(nb.save())
    assert not problems, f"after the run from the panel:\n{problems}"
    # readable with the three runs it now compares, on a laptop with the file browser open and full HD
    sliders = assert_readable(nb)
    assert all(n >= 6 for n in sliders.values()), f"the StragglerLab's sliders were not all checked: {sliders}"


BLOCKED = {
    # no ipywidgets and no plotly front end: every widget and every figure is missing
    "widgets-and-plotly": (r"/lab/extensions/(@jupyter-widgets/jupyterlab-manager|jupyterlab-plotly)/",
                           {0: "widget view", 1: "plotly figure", 2: "widget view"}),
    # no anywidget: only the FigureWidget (plotly's anywidget) fails, the rest renders
    "anywidget": (r"/lab/extensions/anywidget/", {2: "a widget view failed"}),
}


@pytest.mark.parametrize("blocked", list(BLOCKED))
def test_the_checks_fail_when_widgets_and_figures_do_not_render(open_notebook, lab_server, blocked):
    """Make a front-end bundle fail to load: the same checks must then name exactly the cells it broke."""
    pattern, expected = BLOCKED[blocked]
    nb_json = nbformat.v4.new_notebook(metadata={"kernelspec": {"name": "python3", "language": "python",
                                                                 "display_name": "Python 3 (ipykernel)"}})
    nb_json.cells = [
        nbformat.v4.new_code_cell("import ipywidgets as W\nW.VBox([W.FloatSlider(description='x'), "
                                  "W.Button(description='Run')])"),
        nbformat.v4.new_code_cell("import plotly.graph_objects as go\ngo.Figure(go.Bar(x=[1, 2], y=[3, 4]))"),
        nbformat.v4.new_code_cell("go.FigureWidget(go.Bar(x=[1, 2], y=[3, 4]))"),
    ]
    name = f"ui_blocked_{blocked}.ipynb"
    nbformat.write(nb_json, str(lab_server.root_dir / name))
    nb = open_notebook(name, prefix=f"blocked-{blocked}", block=re.compile(pattern))
    nb.run_all(120)
    nb.screenshot("after-run-all")
    problems = nb.check_rendered(nb.save())
    flagged = {int(m) for m in re.findall(r"^cell (\d+) ", "\n".join(problems.items), re.M)}
    assert flagged == set(expected), f"expected problems in cells {sorted(expected)}, got:\n{problems}"
    for cell, words in expected.items():
        assert any(p.startswith(f"cell {cell} ") and words in p for p in problems.items), (cell, words, str(problems))


def test_the_readability_check_names_what_a_reader_cannot_read(open_notebook, lab_server):
    """The geometry check on figures and controls made unreadable on purpose, next to a readable figure:
    it must name the overlapping texts, the narrow figure and the hidden slider value, and nothing else."""
    nb_json = nbformat.v4.new_notebook(metadata={"kernelspec": {"name": "python3", "language": "python",
                                                                 "display_name": "Python 3 (ipykernel)"}})
    nb_json.cells = [
        nbformat.v4.new_code_cell(
            "from plotly.subplots import make_subplots\nimport plotly.graph_objects as go\n"
            "f = make_subplots(rows=1, cols=2, subplot_titles=('left title that is long enough to run over',"
            " 'right title that is just as long'))\nf.add_trace(go.Bar(x=[1, 2], y=[3, 4]), row=1, col=1)\n"
            "f.add_trace(go.Bar(x=[1, 2], y=[4, 3]), row=1, col=2)\nf.update_layout(width=500)"),
        nbformat.v4.new_code_cell("go.Figure(go.Bar(x=['a', 'b'], y=[1, 2]), layout=dict(title='readable'))"),
        nbformat.v4.new_code_cell(
            "import ipywidgets as W\nW.HBox([W.FloatSlider(value=1.5, description=f'slider number {i} of two',"
            " style={'description_width': '200px'}, layout=W.Layout(width='600px', min_width='600px'))"
            " for i in (1, 2)])"),
    ]
    name = "ui_unreadable.ipynb"
    nbformat.write(nb_json, str(lab_server.root_dir / name))
    nb = open_notebook(name, prefix="unreadable")
    nb.run_all(120)
    problems, sliders = check_page(nb, viewports=("1280x800+files",))
    text = "\n".join(problems)
    assert sliders == {"1280x800+files": 2}, sliders
    assert re.search(r"cell 0, .*'left title that is long enough to run over' \[annotation\] overlaps "
                     r"'right title that is just as long' \[annotation\]", text.replace('"', "'")), text
    assert re.search(r"cell 0, .*the figure is 500 px wide", text), text
    assert re.search(r"cell 2: the value '1.50' of the slider 'slider number 2 of two' is out of view",
                     text.replace('"', "'")), text
    assert not [p for p in problems if "cell 1" in p], text  # the readable figure: no false alarm


def check_preview_follows_the_slider(nb: NotebookPage, panel, handle, step: float) -> None:
    """The preview tab (edit_lab/sim, selected when the panel opens) redraws when a slider moves, without
    pressing Run. How fast is a benchmark's claim (benchmarks/preview_latency.py: within a second); the
    bound here only says it came without Run, and holds on a loaded machine."""
    preview = panel.locator(".js-plotly-plot").nth(FIGURES.index("preview"))
    nb.wait_for(lambda: "tokens/s predicted" in " ".join(figure_state(preview)["texts"]), 60,
                "the preview figure to be drawn")
    nb.screenshot("preview-before", panel)
    handle.click()
    nb.wait_idle(60, "the click on the slider")  # a click may move the handle: let its redraw settle first
    before = figure_state(preview)
    value = float(handle.get_attribute("aria-valuenow"))
    handle.press("ArrowRight" if value + step <= float(handle.get_attribute("aria-valuemax")) else "ArrowLeft")
    t0 = time.monotonic()
    after = before
    while time.monotonic() - t0 < 20.0 and after["texts"] == before["texts"]:
        after = figure_state(preview)
    took = time.monotonic() - t0
    nb.screenshot("preview-after", panel)
    assert after["texts"] != before["texts"], f"the preview did not change in {took:.0f} s after the slider moved"
    nb.wait_idle(60, "the preview's redraw")
