"""The library's own code, shown in a notebook: `show_code("edit-unit-sync")`.

The core of each method is marked in its module with a pair of comments, one scheme everywhere:

    # region edit-unit-sync
    ...the code...
    # endregion edit-unit-sync

`show_code(name)` reads the region from the source file of the *installed* package (located with
importlib, read when called), so a notebook never shows a stale copy of the code it runs;
`show_code(a, b)` shows two regions one after the other; `regions()` lists every region with its file and
lines. The markers are plain comments: they change nothing the
interpreter does. A name is lower case letters, digits and '-'; each name is used once in the package.

What is shown: the lines strictly between the two markers, with the file's own line numbers and the
functions they define, syntax-highlighted in Jupyter (pygments HTML; Markdown with a ```python block and
plain text as fallbacks).
"""

from __future__ import annotations

import ast
import html
import importlib.util
import re
import textwrap
from dataclasses import dataclass
from pathlib import Path

PACKAGE = "edit_lab"
#: The packages whose regions `show_code` finds: the library, then the course.
PACKAGES = ("edit_lab", "edit_course")
_START = re.compile(r"^[ \t]*# region ([a-z0-9][a-z0-9-]*)[ \t]*$")
_END = re.compile(r"^[ \t]*# endregion ([a-z0-9][a-z0-9-]*)[ \t]*$")
_MARKER = re.compile(r"^[ \t]*# (end)?region\b")


class RegionError(ValueError):
    """A region that does not exist, or markers that do not pair up."""


@dataclass(frozen=True)
class CodeRegion:
    """One marked region: where it is and its exact text (the file's lines between the markers)."""

    name: str
    module: str  # e.g. "edit_lab.core.methods.edit"
    path: str  # inside the package's folder, e.g. "edit_lab/core/methods/edit.py"
    first_line: int  # 1-based number of the region's first line (the one after `# region`)
    last_line: int  # 1-based number of its last line (the one before `# endregion`)
    text: str  # those lines, joined with '\n', exactly as in the file
    defines: tuple[str, ...] = ()  # the functions defined in it, as Class.method where inside a class

    @property
    def location(self) -> str:
        return f"{self.path}, lines {self.first_line}–{self.last_line}"

    def title(self) -> str:
        what = f" · {', '.join(self.defines)}" if self.defines else ""
        return f"{self.location} (region {self.name}){what}"

    def code(self) -> str:
        """The text without the indentation every line shares (a method's body reads from the left edge)."""
        return textwrap.dedent(self.text)

    def numbered(self) -> str:
        """Plain text, each line with its line number in the file."""
        width = len(str(self.last_line))
        lines = self.code().split("\n")
        return "\n".join(f"{n:>{width}}  {line}".rstrip() for n, line in enumerate(lines, start=self.first_line))

    # ------------------------------------------------------------ what Jupyter shows
    def _repr_html_(self) -> str:
        head = (f"<div style='font-family: monospace; font-size: 90%; margin: 2px 0'>"
                f"<b>{html.escape(self.title())}</b></div>")
        try:
            from pygments import highlight
            from pygments.formatters import HtmlFormatter
            from pygments.lexers import PythonLexer
        except ImportError:  # pygments comes with IPython; without it, plain numbered text
            return head + f"<pre>{html.escape(self.numbered())}</pre>"
        fmt = HtmlFormatter(linenos="inline", linenostart=self.first_line, noclasses=True, style="default")
        return head + highlight(self.code(), PythonLexer(), fmt)

    def _repr_markdown_(self) -> str:
        return f"**{self.title()}**\n\n```python\n{self.code()}\n```\n"

    def __str__(self) -> str:
        return f"{self.title()}\n{self.numbered()}"

    def _repr_pretty_(self, p, cycle: bool) -> None:  # IPython's plain-text display
        p.text(str(self))


def package_root(package: str = PACKAGE) -> Path:
    """The folder of an installed package (where importlib finds it, editable or not)."""
    spec = importlib.util.find_spec(package)
    if spec is None or not spec.submodule_search_locations:
        raise RegionError(f"package {package!r} is not importable")
    return Path(list(spec.submodule_search_locations)[0])


def _module_files() -> list[tuple[str, Path]]:
    out = []
    for root in map(package_root, PACKAGES):
        out += _package_files(root)
    return out


def _package_files(root: Path) -> list[tuple[str, Path]]:
    out = []
    for f in sorted(root.rglob("*.py")):
        rel = f.relative_to(root.parent)
        if any(part.startswith(".") or part == "__pycache__" for part in rel.parts) or f == Path(__file__):
            continue  # this file's docstring shows the markers as an example: it marks nothing
        parts = list(rel.with_suffix("").parts)
        if parts[-1] == "__init__":
            parts.pop()
        out.append((".".join(parts), f))
    return out


def _functions(tree: ast.AST) -> list[tuple[str, int, int]]:
    """(qualified name, first line, last line) of every function in a module, e.g. 'EDiTMethod.issue'
    (decorators included in the lines; a nested function is named after the function it is in)."""
    out: list[tuple[str, int, int]] = []

    def walk(node: ast.AST, prefix: str) -> None:
        for child in ast.iter_child_nodes(node):
            if isinstance(child, (ast.FunctionDef, ast.AsyncFunctionDef)):
                first = min([child.lineno] + [d.lineno for d in child.decorator_list])
                out.append((prefix + child.name, first, child.end_lineno or child.lineno))
                walk(child, f"{prefix}{child.name}.")
            elif isinstance(child, ast.ClassDef):
                walk(child, f"{prefix}{child.name}.")
            else:
                walk(child, prefix)

    walk(tree, "")
    return out


def _defines(functions: list[tuple[str, int, int]], first: int, last: int) -> tuple[str, ...]:
    """The functions that begin in lines first..last (not those nested in one of them); for a region that
    defines none, 'inside F' with F the innermost function it is part of."""
    inside = [(n, a, b) for n, a, b in functions if first <= a <= last]
    if inside:
        tops = [n for n, a, b in inside if not any(a2 < a and b <= b2 for _, a2, b2 in inside)]
        return tuple(tops)
    around = [(n, a, b) for n, a, b in functions if a < first and last <= b]
    if around:
        name = max(around, key=lambda f: f[1])[0]
        return (f"inside {name}",)
    return ()


def parse_regions(text: str, module: str, path: str) -> list[CodeRegion]:
    """The regions of one file's text. Raises RegionError for markers that do not pair up or an empty region."""
    lines = text.split("\n")
    functions = _functions(ast.parse(text))
    out: list[CodeRegion] = []
    open_at: dict[str, int] = {}
    for i, line in enumerate(lines, start=1):
        if not _MARKER.match(line):
            continue
        s, e = _START.match(line), _END.match(line)
        if s:
            if open_at:
                raise RegionError(f"{path}:{i}: region {s.group(1)!r} starts inside {next(iter(open_at))!r}: "
                                  f"regions do not nest")
            open_at[s.group(1)] = i
        elif e:
            name = e.group(1)
            if name not in open_at:
                raise RegionError(f"{path}:{i}: '# endregion {name}' without its '# region {name}'")
            start = open_at.pop(name)
            first, last = start + 1, i - 1
            body = lines[first - 1:last]
            if not any(b.strip() for b in body):
                raise RegionError(f"{path}:{start}: region {name!r} is empty")
            out.append(CodeRegion(name, module, path, first, last, "\n".join(body), _defines(functions, first, last)))
        else:
            raise RegionError(f"{path}:{i}: malformed marker {line.strip()!r}: use '# region NAME' / "
                              f"'# endregion NAME', NAME of a-z, 0-9 and '-'")
    if open_at:
        name, at = next(iter(open_at.items()))
        raise RegionError(f"{path}:{at}: region {name!r} is never closed ('# endregion {name}')")
    return out


def regions() -> dict[str, CodeRegion]:
    """Every region of the installed package by name, read from its files now (never a cached copy)."""
    found: dict[str, CodeRegion] = {}
    root = package_root().parent
    for module, f in _module_files():
        text = f.read_text(encoding="utf-8")
        if "# region" not in text and "# endregion" not in text:
            continue
        for r in parse_regions(text, module, f.relative_to(root).as_posix()):
            if r.name in found:
                raise RegionError(f"region {r.name!r} is marked twice: {found[r.name].location} and {r.location}")
            found[r.name] = r
    return found


@dataclass(frozen=True)
class CodeListing:
    """Several regions shown one after the other (what `show_code(a, b)` returns)."""

    regions: tuple[CodeRegion, ...]

    def _repr_html_(self) -> str:
        return "".join(r._repr_html_() for r in self.regions)

    def _repr_markdown_(self) -> str:
        return "\n".join(r._repr_markdown_() for r in self.regions)

    def __str__(self) -> str:
        return "\n\n".join(str(r) for r in self.regions)

    def _repr_pretty_(self, p, cycle: bool) -> None:
        p.text(str(self))


def show_code(region: str, *more: str) -> CodeRegion | CodeListing:
    """The region `region` of the library's code (and the regions `more`, shown after it), ready to display:
    leave it as a cell's last expression.

    Raises RegionError, naming every known region, for a name that is not marked anywhere.
    """
    known = regions()
    for name in (region, *more):
        if name not in known:
            listing = ", ".join(sorted(known)) or "none"
            raise RegionError(f"no code region {name!r} in {PACKAGE}; known regions: {listing}")
    if not more:
        return known[region]
    return CodeListing(tuple(known[name] for name in (region, *more)))


def regions_table() -> str:
    """One line per region: name, file and lines, what it defines (for a quick look: print(regions_table()))."""
    rows = sorted(regions().values(), key=lambda r: (r.path, r.first_line))
    width = max((len(r.name) for r in rows), default=0)
    return "\n".join(f"{r.name:<{width}}  {r.location}  {', '.join(r.defines)}" for r in rows)
