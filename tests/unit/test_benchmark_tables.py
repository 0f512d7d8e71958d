"""The published benchmark tables (docs/benchmarks.md) are what their result files render, and result files
record how they were made."""

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

BENCHMARKS = ROOT / "docs" / "benchmarks.md"


@pytest.mark.parametrize("page", render.PAGES, ids=lambda p: p.relative_to(ROOT).as_posix())
def test_every_marked_table_equals_what_its_result_files_render(page):
    """docs/benchmarks.md holds the tables; the README too, should a marker ever stay or come back there."""
    problems = render.check(page)
    where = page.relative_to(ROOT).as_posix()
    assert not problems, "\n".join(problems) + f"\n(re-render with `python benchmarks/render.py --update {where}`)"


def test_the_benchmarks_page_marks_every_table_that_has_result_files():
    assert render.PAGES[0] == BENCHMARKS
    marked = {name for name, _, _ in render.marked_tables(BENCHMARKS.read_text())}
    assert marked == set(render.TABLES)
    readme = {name for name, _, _ in render.marked_tables((ROOT / "README.md").read_text())}
    assert readme <= set(render.TABLES)


def test_a_changed_number_is_caught_and_update_puts_it_back(tmp_path):
    readme = tmp_path / "README.md"
    table = render.render("aedit_loss")
    readme.write_text("# t\n\n<!-- rendered: aedit_loss -->\n" + "\n".join(table) + "\n\nafter\n")
    assert render.check(readme) == []
    number = table[2].split("|")[4].split()[0]  # the first row's mean loss, e.g. "2.3475"
    changed = f"{float(number) + 0.0123:.4f}"
    readme.write_text(readme.read_text().replace(number, changed, 1))
    (problem,) = render.check(readme)
    assert "table 'aedit_loss' differs" in problem and changed in problem
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


def test_the_straggler_tables_state_what_their_labels_say():
    """stragglers.table_lines on a hand-built result: medians over repeats, shares of the scenario's own bound."""
    import stragglers

    def scenario(tput: dict, in_run: float, loss: float | None = None) -> dict:
        out = {"per_repeat": {m: list(v) for m, v in tput.items()},
               "in_run_per_repeat": {m: [in_run] for m in ("edit", "aedit")},
               "whole_per_repeat": {m: [0.0] for m in tput}}
        if loss is not None:
            out |= {"val_loss_at_equal_time": {"edit": loss, "aedit": loss - 0.1}, "equal_time_s": 12.0}
        return out

    data = {"methods": ["edit", "aedit"], "meshes": {"1x4": {
        "step_s": 0.5, "sync_period_s": 8.0, "aedit_steps_ratio": 1.9, "random_pause_overshoot": 0.02,
        "scenarios": {"clean": scenario({"edit": [100, 300, 200], "aedit": [200] * 3, "bound": [400] * 3}, 0.9),
                      "consistent": scenario({"edit": [150] * 3, "aedit": [270] * 3, "bound": [300] * 3}, 0.8, 2.5),
                      "random": scenario({"edit": [50] * 3, "aedit": [100] * 3, "bound": [125] * 3}, 0.7, 3.0)}}}}
    throughput = stragglers.table_lines(data, "throughput:1x4")
    assert "medians of 3" in throughput[0]
    # edit: median 200 clean; 150 = 50% of the straggler run's bound 300; 50 = 25% of 200, 40% of the bound 125
    assert throughput[2] == "| edit | 200 | 150 | 50% | 50 | 25% | 40% |"
    assert throughput[3] == "| aedit | 200 | 270 | 90% | 100 | 50% | 80% |"
    assert throughput[4] == "| capacity bound | 400 | 300 | 100% | 125 | 31% | 100% |"
    assert stragglers.table_lines(data, "in_run")[2] == "| edit | 90% | 80% | 70% |"
    loss = stragglers.table_lines(data, "loss")
    assert "(12 s)" in loss[0] and loss[3] == "| aedit | 2.4000 | 2.9000 |"
    assert stragglers.table_lines(data, "timings")[2] == "| 1x4 | 500 ms | 8000 ms | 1.90 | +2.0% |"
    with pytest.raises(ValueError, match="unknown part"):
        stragglers.table_lines(data, "nope")
