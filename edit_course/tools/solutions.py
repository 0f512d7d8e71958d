"""The solutions mode: every notebook with every answer filled in, every check passing.

    python -m edit_course.tools.solutions OUT [--execute] [--test-parameters] [names...]

writes OUT/<notebook>.ipynb for every notebook (or those whose file name contains one of `names`), each
a copy of the student's notebook in which every answer cell is replaced by its answer. With --execute
it then runs each written notebook top to bottom with papermill (in OUT/executed/, the notebook's own
defaults, or its small test parameters with --test-parameters), prints the score line the notebook's
score cell printed ("Score: P of N checks passed…"; 08: "N of 3 right") and exits 1 if a check did not
pass, unless the answers file lists that check as one that may miss (a prediction of a wall-clock timing,
or one a cell compares only at the defaults), with why.

The answers are not in the package: they live in the repository's `solutions/` folder, one file per
notebook (`solutions/nb00.py` for `00_…`), found next to the `edit_lab` package directory and loaded by
path. A wheel installs the package alone, so there the mode refuses with a message saying so. Each file
holds plain data (no import of the lab):

- `NOTEBOOK`: the notebook's file name;
- `ANSWERS`: one dict per answer cell, with
  `marker` (the cell's first line, exactly as the student's notebook has it), `assigns` (the name the cell
  defines, checked too; None for a cell of comments the student turns into code), `kind` ("exercise",
  "code", "prediction", "diagnosis" or "written"), `source`
  (the cell that replaces it; None keeps the cell as shipped, for an exercise that passes as shipped),
  and, for what tests/course/unit/test_solutions.py runs in-process: `check` (a line of the cell that checks
  it), `setup` (lines naming the cells to run before it), `says` (what the check prints when right,
  "Correct" unless given) and `result` (an expression for the verdict when the check cell ends on none);
- `MAY_MISS`: {check name as score() prints it: (when, why)}, when "always" (a wall-clock timing) or
  "test parameters" (it compares only at the defaults);
- optionally `SCORE_CELL` and `SCORE_PATTERN`: a line of the cell that prints the score and a regular
  expression with the passed and total counts (default: the `score();` cell and "Score: P of N").

An answer cell that is not found, or found twice, is refused with the notebook and the marker named, so a
notebook edit that moves or rewords an answer cell breaks this mode loudly instead of leaving a blank.
"""

from __future__ import annotations

import argparse
import ast
import copy
import importlib.util
import json
import re
import sys
from dataclasses import dataclass, field
from pathlib import Path
from types import ModuleType
from typing import Any

from edit_course import lab_root

ROOT = lab_root()
SOLUTIONS = ROOT / "solutions"
NOTEBOOKS = ROOT / "notebooks"

SCORE_CELL = "score();"
SCORE_PATTERN = r"Score: (\d+) of (\d+) checks passed"
CHECK_LINE = re.compile(r"^\s+(\w+)\s+(correct|not yet right|not answered yet)\s*$")
WHEN = ("always", "test parameters")
KINDS = ("exercise", "code", "prediction", "diagnosis", "written")


class SolutionsError(Exception):
    """A solutions file or a notebook does not fit: the message names the notebook and the marker."""


# ------------------------------------------------------------------------------------------ answers
@dataclass(frozen=True)
class Answer:
    """One answer cell: how to find it in the student's notebook and what replaces it."""

    marker: str
    assigns: str | None
    kind: str
    source: str | None
    check: str | None = None
    setup: tuple[str, ...] = ()
    says: str = "Correct"
    result: str | None = None

    @classmethod
    def of(cls, notebook: str, d: dict[str, Any]) -> Answer:
        unknown = set(d) - {f for f in cls.__dataclass_fields__}
        if unknown or not {"marker", "assigns", "kind", "source"} <= set(d):
            raise SolutionsError(f"{notebook}: an answer needs marker, assigns, kind and source "
                                 f"(unknown fields: {sorted(unknown)}): {d.get('marker')!r}")
        if d["kind"] not in KINDS:
            raise SolutionsError(f"{notebook}: answer {d['marker']!r} has kind {d['kind']!r}, not one of {KINDS}")
        return cls(**{**d, "setup": tuple(d.get("setup", ()))})


@dataclass(frozen=True)
class Solutions:
    """A notebook's answers file, read."""

    notebook: str
    answers: tuple[Answer, ...]
    may_miss: dict[str, tuple[str, str]] = field(default_factory=dict)
    score_cell: str = SCORE_CELL
    score_pattern: str = SCORE_PATTERN


def solutions_file(notebook: Path | str) -> Path:
    """solutions/nb00.py for 00_welcome.ipynb."""
    return SOLUTIONS / f"nb{Path(notebook).name[:2]}.py"


def _module(path: Path) -> ModuleType:
    spec = importlib.util.spec_from_file_location(f"edit_lab_solutions_{path.stem}", path)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def load(notebook: Path | str) -> Solutions:
    """The answers of `notebook` (a path or a file name), from the repository's solutions/ folder."""
    name = Path(notebook).name
    if not SOLUTIONS.is_dir():
        raise SolutionsError(
            f"no solutions/ folder next to the edit_lab package (looked for {SOLUTIONS}): the answers ship only "
            f"with a checkout of the repository, not with an installed package. Run this from a clone.")
    path = solutions_file(name)
    if not path.is_file():
        raise SolutionsError(f"{name}: no answers file {path.relative_to(ROOT)}")
    m = _module(path)
    if getattr(m, "NOTEBOOK", None) != name:
        raise SolutionsError(f"{path.relative_to(ROOT)} is for {getattr(m, 'NOTEBOOK', None)!r}, not {name}")
    answers = tuple(Answer.of(name, d) for d in m.ANSWERS)
    may_miss = dict(getattr(m, "MAY_MISS", {}))
    for check, (when, why) in may_miss.items():
        if when not in WHEN or not why:
            raise SolutionsError(f"{name}: MAY_MISS[{check!r}] needs a `when` of {WHEN} and a reason")
    return Solutions(name, answers, may_miss, getattr(m, "SCORE_CELL", SCORE_CELL),
                     getattr(m, "SCORE_PATTERN", SCORE_PATTERN))


# ------------------------------------------------------------------------------------ finding cells
def cell_source(cell: dict) -> str:
    src = cell.get("source", "")
    return "".join(src) if isinstance(src, list) else src


def defines(source: str, name: str) -> bool:
    """Whether `source` assigns `name` or defines a function of that name at its top level."""
    try:
        tree = ast.parse(source)
    except SyntaxError:
        return False
    for node in tree.body:
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)) and node.name == name:
            return True
        targets = node.targets if isinstance(node, ast.Assign) else [node.target] \
            if isinstance(node, (ast.AnnAssign, ast.AugAssign)) else []
        if any(isinstance(t, ast.Name) and t.id == name for t in targets):
            return True
    return False


def find_answer(cells: list[dict], answer: Answer, notebook: str) -> int:
    """The index of the one code cell whose first line is `answer.marker` and which defines `answer.assigns`."""
    hits = [i for i, c in enumerate(cells) if c.get("cell_type") == "code"
            and cell_source(c).split("\n", 1)[0].rstrip() == answer.marker.rstrip()
            and (answer.assigns is None or defines(cell_source(c), answer.assigns))]
    if len(hits) != 1:
        raise SolutionsError(
            f"{notebook}: the answer cell " + (f"of `{answer.assigns}` " if answer.assigns else "")
            + f"starting with {answer.marker!r} is "
            + ("not in the notebook (moved, reworded or removed?): update solutions/"
               f"{solutions_file(notebook).name}" if not hits else f"in {len(hits)} cells ({hits}), not one"))
    return hits[0]


def find_line(cells: list[dict], line: str, notebook: str) -> int:
    """The index of the one code cell that has `line` as one of its lines (leading/trailing spaces ignored)."""
    hits = [i for i, c in enumerate(cells) if c.get("cell_type") == "code"
            and line.strip() in (x.strip() for x in cell_source(c).splitlines())]
    if len(hits) != 1:
        raise SolutionsError(f"{notebook}: the cell with the line {line!r} is "
                             + ("not in the notebook" if not hits else f"in {len(hits)} cells ({hits}), not one"))
    return hits[0]


def as_lines(source: str) -> list[str]:
    """A cell source as the notebook JSON stores it: lines with their newlines, the last one without."""
    return source.splitlines(keepends=True)


def solve(notebook: Path, solutions: Solutions | None = None) -> tuple[dict, dict[int, Answer]]:
    """The student's notebook with every answer cell replaced, and {cell index: its answer}; refuses a
    notebook in which an answer cell the answers file names is missing or ambiguous."""
    solutions = solutions or load(notebook)
    nb = json.loads(Path(notebook).read_text())
    cells = nb["cells"]
    placed: dict[int, Answer] = {}
    for answer in solutions.answers:
        i = find_answer(cells, answer, solutions.notebook)
        if i in placed:
            raise SolutionsError(f"{solutions.notebook}: {answer.marker!r} and {placed[i].marker!r} name one cell")
        placed[i] = answer
    out = copy.deepcopy(nb)
    for i, answer in placed.items():
        if answer.source is not None:
            out["cells"][i]["source"] = as_lines(answer.source.strip("\n"))
    return out, placed


def write(notebook: Path, out_dir: Path) -> Path:
    """Write the solved notebook to out_dir/<its name>, in the notebooks' own JSON layout."""
    nb, _ = solve(notebook)
    out_dir.mkdir(parents=True, exist_ok=True)
    out = out_dir / Path(notebook).name
    out.write_text(json.dumps(nb, indent=1, ensure_ascii=False) + "\n")
    return out


# ------------------------------------------------------------------------------------------ scoring
@dataclass
class Score:
    """What an executed notebook's score cell printed, and which misses the answers file allows."""

    notebook: str
    line: str | None
    passed: int
    total: int
    checks: list[tuple[str, str]]
    allowed: list[str]
    failed: list[str]

    @property
    def ok(self) -> bool:
        return self.line is not None and not self.failed


def printed(cell: dict) -> str:
    """What an executed code cell printed (its stream outputs, joined)."""
    return "".join(cell_source({"source": o.get("text", "")}) for o in cell.get("outputs", [])
                   if o.get("output_type") == "stream")


def check_lines(text: str) -> list[tuple[str, str]]:
    """The (check, state) lines `exercises.score()` printed in `text`."""
    return [(c.group(1), c.group(2)) for line in text.splitlines() if (c := CHECK_LINE.match(line))]


def score_of(executed: dict, solutions: Solutions, test_parameters: bool) -> Score:
    """Read the score cell's printed lines; a check that did not pass fails unless MAY_MISS allows it."""
    name = solutions.notebook
    try:
        i = find_line(executed["cells"], solutions.score_cell, name)
    except SolutionsError as e:
        return Score(name, None, 0, 0, [], [], [str(e)])
    text = printed(executed["cells"][i])
    lines = text.splitlines()
    found = [(j, m) for j, line in enumerate(lines) if (m := re.search(solutions.score_pattern, line))]
    if not found:
        return Score(name, None, 0, 0, [], [], [f"{name}: no score line in the score cell's output: {text[-300:]!r}"])
    j, m = found[-1]
    passed, total = int(m.group(1)), int(m.group(2))
    checks = check_lines(text)
    allowed, failed = [], []
    for check, state in checks:
        if state == "correct":
            continue
        when, why = solutions.may_miss.get(check, (None, None))
        if when == "always" or (when == "test parameters" and test_parameters):
            allowed.append(f"{check} ({state}): {why}")
        else:
            failed.append(f"{check}: {state}")
    if not checks and passed != total:  # a score line without per-check lines (08): every one must pass
        failed.append(f"{passed} of {total}")
    return Score(name, lines[j].strip(), passed, total, checks, allowed, failed)


def shipped_problems(executed: dict, notebook: str) -> list[str]:
    """What is wrong with the score a student's notebook, run as shipped (no answer written), printed.

    Every check must say "not answered yet", or "correct" for the exercises that pass as shipped (a working
    default the student changes and watches); "not yet right" would be a verdict against an answer nobody
    wrote. A notebook without a `score();` cell (08, whose check cell counts right diagnoses) has nothing to
    read here; one with it must list at least one check and print its score line.
    """
    cells = executed.get("cells", [])
    if not any(SCORE_CELL in cell_source(c) for c in cells if c.get("cell_type") == "code"):
        return []
    i = find_line(cells, SCORE_CELL, notebook)
    text = printed(cells[i])
    checks = check_lines(text)
    problems = [f"{notebook}: {check} says {state!r} with no answer written" for check, state in checks
                if state not in ("not answered yet", "correct")]
    if not checks or not re.search(SCORE_PATTERN, text):
        problems.append(f"{notebook}: the score cell lists no check or no score line: {text[-300:]!r}")
    return problems


def execute(written: Path, out_dir: Path, test_parameters: bool) -> tuple[Score, float]:
    """Run a written notebook with papermill in out_dir; its score."""
    from edit_course.tools.notebooks import execute as run_notebook
    from edit_course.tools.notebooks import test_parameters as small

    solutions = load(written)
    params = small(NOTEBOOKS / written.name) if test_parameters else {}
    out, seconds = run_notebook(written, out_dir, params)
    return score_of(json.loads(out.read_text()), solutions, test_parameters), seconds


# ---------------------------------------------------------------------------------------------- CLI
def selected(names: list[str]) -> list[Path]:
    from edit_course.tools.notebooks import notebooks

    chosen = [nb for nb in notebooks() if not names or any(n in nb.name for n in names)]
    if not chosen:
        raise SolutionsError(f"no notebook's name contains any of {names}")
    return chosen


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="python -m edit_course.tools.solutions", description=__doc__.splitlines()[0])
    ap.add_argument("out", type=Path, help="folder for the solved notebooks (OUT/<notebook>.ipynb)")
    ap.add_argument("names", nargs="*", help="only notebooks whose file name contains one of these (e.g. 02 05)")
    ap.add_argument("--execute", action="store_true", help="run each written notebook with papermill and score it")
    ap.add_argument("--test-parameters", action="store_true",
                    help="with --execute: the notebook's small test parameters instead of its defaults")
    args = ap.parse_intermixed_args(argv)  # OUT --execute 02 05: names after the options too
    try:
        chosen = selected(args.names)
        written = [write(nb, args.out) for nb in chosen]  # all first: a missing answer stops before any run
    except SolutionsError as e:
        print(f"solutions: {e}", file=sys.stderr)
        return 2
    for path in written:
        print(f"wrote {path}")
    if not args.execute:
        return 0
    bad = 0
    for path in written:
        print(f"running {path.name} ({'test parameters' if args.test_parameters else 'defaults'}) ...", flush=True)
        try:
            score, seconds = execute(path, args.out / "executed", args.test_parameters)
        except Exception as e:  # a cell that raised (papermill names it), or a missing kernel
            print(f"{path.name}: FAILED to run: {type(e).__name__}: {str(e).strip()[-2000:]}")
            bad += 1
            continue
        print(f"{path.name}: {score.line or 'no score line'} ({seconds:.0f} s)")
        for line in score.allowed:
            print(f"  may miss, and did: {line}")
        for line in score.failed:
            print(f"  NOT PASSED: {line}")
        bad += not score.ok
    return 1 if bad else 0


if __name__ == "__main__":
    sys.exit(main())
