"""The browser checks themselves: on pages broken on purpose they must name exactly what is broken.

A front-end bundle that fails to load, and figures and controls made unreadable next to a readable one.
"""

from __future__ import annotations

import re

import nbformat
import pytest

from .readability import check_page

pytestmark = [pytest.mark.ui, pytest.mark.slow, pytest.mark.timeout(1200)]


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
            "f.add_trace(go.Bar(x=[1, 2], y=[4, 3]), row=1, col=2)\nf.update_layout(width=500)\n"
            "f.add_annotation(x=1, y=3.5, showarrow=False, row=1, col=2)"),
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
    assert re.search(r"cell 0, .*'new text' \[annotation\] is plotly's placeholder", text.replace('"', "'")), text
    assert re.search(r"cell 2: the value '1.50' of the slider 'slider number 2 of two' is out of view",
                     text.replace('"', "'")), text
    assert not [p for p in problems if "cell 1" in p], text  # the readable figure: no false alarm
