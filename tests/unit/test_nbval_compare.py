"""tests/nbval/compare.py: a lesson that ran in the browser, compared with its nbval reference by nbval's rule."""

from __future__ import annotations

import json

import plotly.graph_objects as go

from tests.nbval.compare import differences, output_texts
from tests.nbval.lesson_digest import figure_digest
from tests.nbval.refresh import CHECK_TAG


def _cell(outputs: list[dict], checked: bool = True, source: str = "x") -> dict:
    return {"cell_type": "code", "execution_count": 1, "metadata": {"tags": [CHECK_TAG]} if checked else {},
            "outputs": outputs, "source": [source]}


def _stream(text: str, name: str = "stdout") -> dict:
    return {"output_type": "stream", "name": name, "text": [text]}


def _notebook(cells: list[dict]) -> dict:
    params = {"cell_type": "code", "execution_count": 1, "metadata": {"tags": ["injected-parameters"]},
              "outputs": [], "source": ["STEPS = 6\n"]}
    return {"cells": [params, *cells], "metadata": {}, "nbformat": 4, "nbformat_minor": 4}


FIG = go.Figure(go.Scatter(x=[1, 2, 3], y=[3.7051, 3.6, 3.5], name="edit"), layout_title_text="loss")


def _write_reference(tmp_path, cells: list[dict]) -> None:
    (tmp_path / "99_lesson.ipynb").write_text(json.dumps(_notebook(cells)))


def test_the_same_numbers_pass_and_a_moved_number_fails_with_its_diff(tmp_path):
    _write_reference(tmp_path, [_cell([_stream("final loss 3.705\n")]), _cell([_stream("unchecked 1\n")], False)])
    same = _notebook([_cell([_stream("final loss 3.705\n")]), _cell([_stream("unchecked 2\n")], False)])
    assert differences(same, "99_lesson", tmp_path) == []
    moved = _notebook([_cell([_stream("final loss 3.715\n")]), _cell([_stream("unchecked 1\n")], False)])
    found = differences(moved, "99_lesson", tmp_path)
    assert len(found) == 1 and "-final loss 3.705" in found[0] and "+final loss 3.715" in found[0], found


def test_a_figure_is_compared_as_the_digest_the_reference_kernel_showed(tmp_path):
    """The browser saves plotly's JSON (typed arrays and all); the reference holds the digest text."""
    _write_reference(tmp_path, [_cell([{"output_type": "display_data", "metadata": {},
                                         "data": {"text/plain": figure_digest(FIG)}}])])
    fig_json = json.loads(FIG.to_json())
    ran = _notebook([_cell([{"output_type": "display_data", "metadata": {},
                             "data": {"application/vnd.plotly.v1+json": fig_json, "text/html": "<div>"}}])])
    assert differences(ran, "99_lesson", tmp_path) == []
    fig_json["data"][0]["y"] = [3.9, 3.6, 3.5]
    assert differences(ran, "99_lesson", tmp_path), "a moved point of a figure must fail"


def test_streams_join_as_nbval_joins_them_and_sanitizers_apply_to_both_sides(tmp_path):
    outs = [_stream("a\n"), {"output_type": "execute_result", "data": {"text/plain": "42"}, "metadata": {}},
            _stream("b\n"), _stream("warn\n", "stderr")]
    assert output_texts(outs) == ["a\nb\n", "42", "warn\n"]
    _write_reference(tmp_path, [_cell([_stream("wrote /tmp/pytest-1/runs/x at 2026-12-03 10:00:00, 3.70519\n")])])
    ran = _notebook([_cell([_stream("wrote /tmp/other/runs/y at 2026-12-04 11:11:11, 3.70512\n")])])
    assert differences(ran, "99_lesson", tmp_path) == []


def test_other_cells_than_the_reference_are_refused(tmp_path):
    _write_reference(tmp_path, [_cell([_stream("1\n")], source="print(1)")])
    ran = _notebook([_cell([_stream("1\n")], source="print(2)")])
    assert "make nbval-refs" in differences(ran, "99_lesson", tmp_path)[0]
