"""The README's line counts, computed from the tree: `--check` fails when one drifted, no flag rewrites them.

    python scripts/readme_counts.py           # rewrite the counts in README.md
    python scripts/readme_counts.py --check   # exit 1 and name each count that differs (tests/unit/test_readme_counts.py)

Two blocks of README.md's "Architecture" section carry numbers: the tree (lines of Python per layer, the
last number of a row) and the core path (lines per file, and their sum "with the model"). A count is every
line of the files it names, blank lines and docstrings included, as `wc -l` counts them.
"""

from __future__ import annotations

import re
import sys
from collections.abc import Callable
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
README = ROOT / "README.md"
LIB = ROOT / "edit_lab"


def lines(paths: list[Path]) -> int:
    return sum(len(p.read_text(encoding="utf-8").splitlines()) for p in paths)


def py(folder: Path) -> list[Path]:
    return sorted(folder.rglob("*.py"))


def layer0() -> list[Path]:
    """The torch-free facts: the configuration, every top-level module but the API and the command line, and the
    readers' rules."""
    top = [p for p in LIB.glob("*.py") if p.name not in ("__init__.py", "__main__.py")]
    return py(LIB / "config") + sorted(top) + py(LIB / "rules")


#: A tree row, by the text it starts with, and the files its number counts.
TREE: dict[str, Callable[[], list[Path]]] = {
    "edit_lab/": lambda: py(LIB),
    "  config/ registry.py": layer0,
    **{f"  {name}/": (lambda name=name: py(LIB / name))
       for name in ("records", "core", "train", "clock", "runtime", "viz", "ui")},
    "  __init__.py __main__.py": lambda: [LIB / "__init__.py", LIB / "__main__.py"] + py(LIB / "tools"),
    "edit_course/": lambda: py(ROOT / "edit_course"),
    "edit_oracles/": lambda: py(ROOT / "edit_oracles"),
}
PATH_ROW = re.compile(r"^( ?\d+| \+)\s+(edit_lab/\S+\.py)\s+(\d[\d,]*)\s")
TOTAL = re.compile(r"\*\*([\d,]+) lines\*\* with the model")


def fmt(n: int) -> str:
    return f"{n:,}"


def expected(text: str) -> tuple[str, list[str]]:
    """README.md with every count as the tree has it, and what differed (row, written, counted)."""
    out, differ, path_total = [], [], 0
    for line in text.splitlines(keepends=True):
        body = line.rstrip("\n")
        for prefix, files in TREE.items():
            m = re.search(r"(\d[\d,]*)\s*$", body)
            if body.startswith(prefix) and m:
                n = fmt(lines(files()))
                if m.group(1) != n:
                    differ.append(f"{prefix.strip()}: {m.group(1)} written, {n} counted")
                width = len(m.group(1))
                body = body[:m.start(1)].rstrip() + " " * max(1, m.start(1) - len(body[:m.start(1)].rstrip()) + width
                                                             - len(n)) + n
                break
        m = PATH_ROW.match(body)
        if m:
            n = lines([ROOT / m.group(2)])
            path_total += n
            if m.group(3) != str(n):
                differ.append(f"{m.group(2)}: {m.group(3)} written, {n} counted")
            body = body[:m.start(3)] + f"{n:>{len(m.group(3))}}"[-max(len(m.group(3)), len(str(n))):] + body[m.end(3):]
        out.append(body + ("\n" if line.endswith("\n") else ""))
    new = "".join(out)
    m = TOTAL.search(new)
    if m and m.group(1) != fmt(path_total):
        differ.append(f"core path total: {m.group(1)} written, {fmt(path_total)} counted")
        new = new[:m.start(1)] + fmt(path_total) + new[m.end(1):]
    return new, differ


def main(argv: list[str] | None = None) -> int:
    argv = sys.argv[1:] if argv is None else argv
    text = README.read_text(encoding="utf-8")
    new, differ = expected(text)
    if "--check" in argv:
        for d in differ:
            print(f"README.md: {d} (python scripts/readme_counts.py rewrites them)")
        return 1 if differ else 0
    README.write_text(new, encoding="utf-8")
    print(f"README.md: {len(differ)} count(s) rewritten")
    return 0


if __name__ == "__main__":
    sys.exit(main())
