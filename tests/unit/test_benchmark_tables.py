"""The README's benchmark tables are what their result files render, and result files record how they were made."""

from __future__ import annotations

import json
import platform
import socket
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT / "benchmarks"))

import render  # noqa: E402
import results_io  # noqa: E402


def test_every_marked_readme_table_equals_what_its_result_files_render():
    problems = render.check(ROOT / "README.md")
    assert not problems, "\n".join(problems) + "\n(re-render with `python benchmarks/render.py --update README.md`)"


def test_the_readme_marks_the_tables_that_have_result_files():
    marked = {name for name, _, _ in render.marked_tables((ROOT / "README.md").read_text())}
    assert "aedit_loss" in marked
    assert marked <= set(render.TABLES)


def test_a_changed_number_is_caught_and_update_puts_it_back(tmp_path):
    readme = tmp_path / "README.md"
    table = render.render("aedit_loss")
    readme.write_text("# t\n\n<!-- rendered: aedit_loss -->\n" + "\n".join(table) + "\n\nafter\n")
    assert render.check(readme) == []
    readme.write_text(readme.read_text().replace("1.9094", "1.9000", 1))
    (problem,) = render.check(readme)
    assert "table 'aedit_loss' differs" in problem and "1.9000" in problem
    assert render.update(readme) == 1
    assert render.check(readme) == [] and readme.read_text().endswith("\n\nafter\n")


def test_a_marker_without_a_known_table_is_reported(tmp_path):
    readme = tmp_path / "README.md"
    readme.write_text("<!-- rendered: no_such_table -->\n| a |\n")
    (problem,) = render.check(readme)
    assert "unknown table 'no_such_table'" in problem


def test_a_result_file_records_its_provenance_without_host_or_paths(tmp_path):
    path = results_io.write_result(tmp_path / "r.json", {"runs": [{"seed": 0, "value": 1.5}]}, "bench.py",
                                   ["--seeds", "0", "--out", str(tmp_path / "runs"), f"--json={ROOT}/x.json"],
                                   load_before=0.5)
    data = json.loads(path.read_text())
    assert set(results_io.PROVENANCE_KEYS) <= set(data) and data["runs"] == [{"seed": 0, "value": 1.5}]
    assert data["command"] == "python benchmarks/bench.py --seeds 0 --out '<path>/runs' --json=x.json"
    assert data["python"] == platform.python_version() and data["load_avg_before"] == 0.5
    assert isinstance(data["git_dirty"], (bool, type(None))) and len(data["git_commit"]) in (40, 7)
    text = path.read_text()
    assert socket.gethostname() not in text and str(tmp_path) not in text and str(ROOT) not in text


@pytest.mark.parametrize("arg, portable", [
    ("--steps", "--steps"),
    ("relative/dir", "relative/dir"),
    ("/somewhere/else/runs", "<path>/runs"),
    ("--out=/somewhere/else/runs", "--out=<path>/runs"),
])
def test_absolute_paths_in_a_command_line_are_not_recorded(arg, portable):
    assert results_io.portable_arg(arg) == portable
