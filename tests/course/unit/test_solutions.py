"""The solutions mode (`python -m edit_course.tools.solutions`, the answers in solutions/), fast: no kernel, no papermill.

- every answer cell an answers file names is found in its notebook and replaced, every blank answer cell
  of a notebook has an answer, and the written notebook differs from the student's in those cells only;
- every exercise's answer (arithmetic, code, the capstone's diagnoses) runs in this process together
  with the cell that checks it, and the check says it is right; the student's own cell in its place
  (a None, the shipped wrong function) is not right, so that these tests can fail;
- the mode refuses, naming the notebook and the marker, when an answer cell moved, and says so when
  there is no solutions/ folder (an installed package); the score line of an executed notebook is read
  and a check that did not pass fails it unless the answers file allows that miss.

The predictions are compared with a run, which the notebook tests execute (and the mode's --execute).
"""

from __future__ import annotations

import ast
import contextlib
import io
import json
import re
from pathlib import Path

import pytest

from edit_course.exercises import CheckResult
from edit_course.tools import solutions as sol
from edit_course.tools.notebooks import notebooks

NBS = notebooks()

#: What a blank answer cell of a student's notebook looks like: `answer = None  # your answer…`,
#: `prediction = None`, a dict of None predictions, a function with a TODO or `# your code`, the
#: capstone's `diagnosis = {"A": (None, {}), …}` and "Your turn" cell.
BLANK = re.compile(r"^(\w*predict\w*|\w*answer\w*|my_\w+)\s*=\s*(None|\{.*None)|TODO|# your code|# Your turn"
                   r"|\(None, \{\}\)", re.M)


def cells(nb: Path) -> list[dict]:
    return json.loads(nb.read_text())["cells"]


@pytest.mark.parametrize("nb", NBS, ids=lambda p: p.stem)
def test_every_answer_cell_is_found_and_only_those_cells_change(nb):
    answers = sol.load(nb)
    solved, placed = sol.solve(nb, answers)
    student = json.loads(nb.read_text())
    assert len(placed) == len(answers.answers) > 0
    assert {k: v for k, v in solved.items() if k != "cells"} == {k: v for k, v in student.items() if k != "cells"}
    assert len(solved["cells"]) == len(student["cells"])
    for i, (before, after) in enumerate(zip(student["cells"], solved["cells"])):
        answer = placed.get(i)
        if answer is None or answer.source is None:
            assert after == before, f"{nb.name} cell {i} changed, and it is no answer cell"
            continue
        src = sol.cell_source(after)
        assert src == answer.source.strip("\n") and src != sol.cell_source(before), (nb.name, i)
        assert {k: v for k, v in after.items() if k != "source"} == {k: v for k, v in before.items() if k != "source"}
        ast.parse(src)  # the answer is Python
        if answer.assigns:
            assert sol.defines(src, answer.assigns), f"{nb.name} cell {i}: the answer does not define {answer.assigns}"
        assert not BLANK.search(src), f"{nb.name} cell {i}: the answer still looks blank:\n{src}"


@pytest.mark.parametrize("nb", NBS, ids=lambda p: p.stem)
def test_no_blank_answer_cell_is_left_out(nb):
    """Every cell of the student's notebook that waits for an answer has one in the answers file."""
    _, placed = sol.solve(nb)
    blank = [i for i, c in enumerate(cells(nb)) if c["cell_type"] == "code" and BLANK.search(sol.cell_source(c))]
    assert blank, f"{nb.name}: no blank answer cell found: the pattern is out of date"
    assert set(blank) <= set(placed), f"{nb.name}: answer cells without an answer: {sorted(set(blank) - set(placed))}"


# ------------------------------------------------------------------------------- running the checks
def run_cell(source: str, ns: dict):
    """Execute a cell's source in `ns` as a kernel would; the value of its last line when that is an
    expression, else of the `passed` it assigns (`passed = check_…(…)`)."""
    tree = ast.parse(source)
    last = tree.body.pop() if tree.body and isinstance(tree.body[-1], ast.Expr) else None
    exec(compile(tree, "<cell>", "exec"), ns)
    if last is not None:
        return eval(compile(ast.Expression(last.value), "<cell>", "eval"), ns)
    return ns.get("passed")


def run_exercise(nb: Path, answer: sol.Answer, solved: bool) -> tuple[object, str]:
    """The answer (or, not `solved`, the student's cell in its place) with its setup cells and its check cell,
    in the notebook's order, in a fresh namespace; (the verdict, what was printed)."""
    student = cells(nb)
    name = nb.name
    at = sol.find_answer(student, answer, name)
    check_at = sol.find_line(student, answer.check, name)
    setup = sorted({sol.find_line(student, line, name) for line in answer.setup} - {at, check_at})
    answers = {sol.find_answer(student, a, name): a for a in sol.load(nb).answers}

    def source(i: int) -> str:
        mine = answers.get(i)
        if mine is None or mine.source is None or (i == at and not solved):
            return sol.cell_source(student[i])
        return mine.source

    ns: dict = {"__name__": "__main__"}
    out = io.StringIO()
    with contextlib.redirect_stdout(out):
        for i in setup:
            assert i < at, f"{name}: setup cell {i} comes after the answer cell {at}"
            run_cell(source(i), ns)
        value = run_cell(source(at), ns)
        if check_at != at:
            value = run_cell(source(check_at), ns)
        if answer.result:
            value = eval(answer.result, ns)
    return value, out.getvalue()


def checked(nb: Path) -> list[sol.Answer]:
    return [a for a in sol.load(nb).answers if a.check]


@pytest.mark.parametrize("nb", NBS, ids=lambda p: p.stem)
def test_every_exercise_answer_passes_its_check(nb):
    exercises = checked(nb)
    if nb.name.startswith(tuple(f"{i:02d}" for i in range(9))):
        assert exercises, f"{nb.name}: no exercise with a check in its answers file"
    for answer in exercises:
        value, printed = run_exercise(nb, answer, solved=True)
        where = f"{nb.name}, {answer.assigns}: {printed.strip()[-500:]}"
        assert bool(value), where
        if isinstance(value, CheckResult):
            assert value.state == CheckResult.CORRECT, where
        assert answer.says in printed, where


@pytest.mark.parametrize("nb", NBS, ids=lambda p: p.stem)
def test_the_students_cell_in_its_place_does_not_pass(nb):
    """The same run with the shipped cell (None, the wrong function, an empty diagnosis): the check says no."""
    for answer in checked(nb):
        if answer.source is None:  # passes as shipped, by design (04's schedule)
            continue
        value, printed = run_exercise(nb, answer, solved=False)
        assert not bool(value), f"{nb.name}, {answer.assigns}: the student's cell passed: {printed.strip()[-300:]}"
        assert answer.says not in printed, printed


# ------------------------------------------------------------------------------- the mode's refusals
def test_a_moved_answer_cell_is_refused_with_the_notebook_and_the_marker(tmp_path):
    nb = next(p for p in NBS if p.name.startswith("02"))
    answers = sol.load(nb)
    data = json.loads(nb.read_text())
    target = sol.find_answer(data["cells"], answers.answers[-1], nb.name)
    data["cells"][target]["source"] = ["answer = None  # reworded\n"]
    moved = tmp_path / nb.name
    moved.write_text(json.dumps(data))
    with pytest.raises(sol.SolutionsError) as e:
        sol.solve(moved)
    said = str(e.value)
    assert nb.name in said and answers.answers[-1].marker in said and "not in the notebook" in said
    data["cells"].append(json.loads(nb.read_text())["cells"][target])  # now the answer cell twice
    data["cells"][target] = data["cells"][-1]
    moved.write_text(json.dumps(data))
    with pytest.raises(sol.SolutionsError, match="in 2 cells"):
        sol.solve(moved)


def test_without_a_solutions_folder_the_mode_says_why(tmp_path, monkeypatch, capsys):
    monkeypatch.setattr(sol, "SOLUTIONS", tmp_path / "solutions")
    with pytest.raises(sol.SolutionsError, match="no solutions/ folder.*installed package"):
        sol.load(NBS[0])
    assert sol.main([str(tmp_path / "out"), "00"]) == 2
    assert "no solutions/ folder" in capsys.readouterr().err
    assert not (tmp_path / "out").exists()


def test_the_command_writes_the_solved_notebooks(tmp_path, capsys):
    assert sol.main([str(tmp_path), "03", "07"]) == 0
    written = sorted(p.name for p in tmp_path.glob("*.ipynb"))
    assert written == sorted(p.name for p in NBS if p.name[:2] in ("03", "07"))
    for name in written:
        solved, _ = sol.solve(next(p for p in NBS if p.name == name))
        assert json.loads((tmp_path / name).read_text()) == solved
    assert "wrote" in capsys.readouterr().out


# ------------------------------------------------------------------------------- reading the score
def executed(score_source: str, printed: str) -> dict:
    return {"cells": [{"cell_type": "code", "source": score_source, "metadata": {},
                       "outputs": [{"output_type": "stream", "name": "stdout", "text": printed}]}]}


def test_the_score_line_is_read_and_only_a_listed_miss_is_forgiven():
    answers = sol.load(next(p for p in NBS if p.name.startswith("00")))
    assert answers.may_miss["compare_prediction"][0] == "test parameters"
    printed = ("  compare_prediction          not answered yet\n  check_rank                  correct\n"
               "  check_all_gathers_per_step  correct\nScore: 2 of 3 checks passed; the lines above say which are "
               "still open.\n")
    nb = executed("from edit_course.exercises import score\n\nscore();", printed)
    at_test = sol.score_of(nb, answers, test_parameters=True)
    assert at_test.ok and at_test.line.startswith("Score: 2 of 3") and len(at_test.allowed) == 1
    at_defaults = sol.score_of(nb, answers, test_parameters=False)
    assert not at_defaults.ok and at_defaults.failed == ["compare_prediction: not answered yet"]
    wrong = sol.score_of(executed("score();", printed.replace("check_rank                  correct",
                                                              "check_rank                  not yet right")),
                         answers, test_parameters=True)
    assert wrong.failed == ["check_rank: not yet right"]
    assert not sol.score_of(executed("print(1)", "1\n"), answers, test_parameters=True).ok  # no score cell

    capstone = sol.load(next(p for p in NBS if p.name.startswith("08")))
    cell = 'verdicts = {}\nprint(f"{sum(verdicts.values())} of 3 right")'
    assert sol.score_of(executed(cell, "mystery A: … is right.\n3 of 3 right\n"), capstone, False).ok
    assert not sol.score_of(executed(cell, "2 of 3 right\n"), capstone, False).ok


def _score_cell(text: str) -> dict:
    return {"cells": [{"cell_type": "code", "source": "from edit_course.exercises import score\n\nscore();",
                       "outputs": [{"output_type": "stream", "name": "stdout", "text": text}]}]}


def test_a_shipped_notebook_scores_every_check_as_not_answered_yet():
    """The student's side of the score cell (issue 25): as shipped, a check may say "not answered yet" or, for an
    exercise whose shipped code works, "correct"; a verdict against an answer nobody wrote is a problem."""
    fine = "  check_a  not answered yet\n  check_b  correct\nScore: 1 of 2 checks passed; the lines above say which.\n"
    assert sol.shipped_problems(_score_cell(fine), "09_x.ipynb") == []
    wrong = sol.shipped_problems(_score_cell("  check_a  not yet right\nScore: 0 of 1 checks passed; …\n"), "09_x")
    assert wrong == ["09_x: check_a says 'not yet right' with no answer written"]
    empty = sol.shipped_problems(_score_cell("No check has run in this kernel yet: run the exercise cells\n"), "09_x")
    assert len(empty) == 1 and "lists no check" in empty[0]
    assert sol.shipped_problems({"cells": [{"cell_type": "code", "source": "x = 1", "outputs": []}]}, "08_x") == []
