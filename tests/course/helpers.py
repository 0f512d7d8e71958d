"""Helpers of the course's tests."""

from __future__ import annotations

from pathlib import Path


def solution_function(notebook: str, name: str, folder, **namespace):
    """The function `name` that solutions/ answers for the notebook numbered `notebook` ("06"), defined from a
    file in `folder` so that `inspect.getsource` finds it, as in a kernel (a rule ships its source)."""
    from edit_course.tools import solutions as sol
    from edit_course.tools.notebooks import notebooks

    nb = next(p for p in notebooks() if p.name.startswith(notebook))
    answer = next(a for a in sol.load(nb).answers if a.assigns == name)
    path = folder / "answer.py"
    path.write_text(answer.source)
    ns: dict = dict(namespace)
    exec(compile(answer.source, str(path), "exec"), ns)  # noqa: S102 - the repository's own answer
    return ns[name]


#: The figure of `executed_site_notebooks`' first notebook.
SITE_FIGURE = {"data": [{"type": "bar", "x": ["r0", "r1"], "y": [3, 4], "name": "</script> in a name"}],
               "layout": {"title": {"text": "a bar"}, "xaxis": {"title": {"text": "replica"}},
                          "yaxis": {"title": {"text": "seconds"}}}}


def executed_site_notebooks(folder: Path) -> Path:
    """Two tiny executed notebooks for the static site (`edit_course.tools.site`) in `folder`, as papermill leaves
    them: a figure, a widget, links, a machine's paths in the outputs, papermill's metadata."""
    import nbformat

    from edit_course.tools import site
    from edit_course.tools.notebooks import ROOT

    folder.mkdir(parents=True)
    run_dir = folder / "runs" / "edit-1"
    first = nbformat.v4.new_notebook()
    first.metadata["papermill"] = {"input_path": str(ROOT / "notebooks" / "00_first.ipynb"),
                                   "output_path": str(folder / "00_first.ipynb")}
    first.cells = [
        nbformat.v4.new_markdown_cell("# 00 · The first lesson\n\n**Learning goal:** draw *one* bar chart.\n\n"
                                      "More words."),
        nbformat.v4.new_code_cell("fig", outputs=[nbformat.v4.new_output(
            "display_data", data={site.PLOTLY_MIME: SITE_FIGURE, "text/plain": "Figure()"})]),
        nbformat.v4.new_code_cell("print(run_dir)", outputs=[nbformat.v4.new_output(
            "stream", name="stdout", text=f"run in {run_dir}\nlab at {ROOT}/edit_lab\nhome {Path.home()}/x\n"
                                          f"scratch /tmp/elsewhere/y\n")]),
        nbformat.v4.new_markdown_cell("## A section\n\nNext: [the second](01_second.ipynb#widgets-here)."),
    ]
    second = nbformat.v4.new_notebook()
    # a run's progress bar, as tqdm draws it in a notebook (a box of a label, the bar and the counts), and its state
    models = {"box": ("HBoxModel", {"children": ["IPY_MODEL_label", "IPY_MODEL_bar", "IPY_MODEL_counts"]}),
              "label": ("HTMLModel", {"value": "edit 2×2: 100%"}),
              "bar": ("FloatProgressModel", {"value": 20.0, "min": 0.0, "max": 20.0}),
              "counts": ("HTMLModel", {"value": " 20/20 [00:03&lt;00:00, 5.1step/s]"})}
    second.metadata["widgets"] = {"application/vnd.jupyter.widget-state+json": {"version_major": 2, "version_minor": 0,
        "state": {k: {"model_name": name, "model_module": "@jupyter-widgets/controls", "model_module_version": "2.0.0",
                      "state": st} for k, (name, st) in models.items()}}}
    second.cells = [
        nbformat.v4.new_markdown_cell("# 01 · The second lesson\n\n**Learning goal.** move a slider.\n\nBack to "
                                      "[the first](00_first.ipynb#a-section), the [glossary](../docs/glossary.md), "
                                      "[a lesson not built](05_missing.ipynb) and "
                                      "[the config](../edit_lab/config.py)."),
        nbformat.v4.new_markdown_cell("## Widgets here"),
        nbformat.v4.new_code_cell("run = launch(cfg)", outputs=[nbformat.v4.new_output(
            "display_data", data={site.WIDGET_MIME: {"model_id": "box", "version_major": 2, "version_minor": 0},
                                  "text/plain": "edit 2×2:   0%|          | 0/20"})]),
        nbformat.v4.new_code_cell("panel", outputs=[nbformat.v4.new_output(
            "execute_result", execution_count=1,
            data={site.WIDGET_MIME: {"model_id": "abc", "version_major": 2, "version_minor": 0},
                  "text/plain": "VBox(children=(FloatSlider(value=0.0),))"})]),
    ]
    nbformat.write(first, str(folder / "00_first.ipynb"))
    nbformat.write(second, str(folder / "01_second.ipynb"))
    return folder
