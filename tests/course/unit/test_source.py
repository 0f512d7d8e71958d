"""The code regions notebooks show (`edit_course.source`): every region a notebook names exists, is exactly the
file's lines between its markers, and the markers are comments only."""

from __future__ import annotations

import ast
import json
import re
from pathlib import Path

import pytest

from edit_course import source
from edit_course.source import CodeRegion, RegionError, parse_regions, regions, show_code

NOTEBOOKS = Path(__file__).resolve().parents[3] / "notebooks"
_CALL = re.compile(r"show_code\(([^)]*)\)")
_NAME = re.compile(r"""["']([^"']+)["']""")


def notebook_regions() -> dict[str, list[str]]:
    """Region name → the notebooks whose code cells call show_code with it."""
    found: dict[str, list[str]] = {}
    for nb_path in sorted(NOTEBOOKS.glob("*.ipynb")):
        nb = json.loads(nb_path.read_text(encoding="utf-8"))
        for cell in nb["cells"]:
            if cell["cell_type"] == "code":
                for args in _CALL.findall("".join(cell["source"])):
                    for name in _NAME.findall(args):
                        found.setdefault(name, []).append(nb_path.name)
    return found


def _between_markers(region: CodeRegion) -> str:
    """The file's lines strictly between '# region NAME' and '# endregion NAME', found without the parser."""
    lines = (source.package_root().parent / region.path).read_text(encoding="utf-8").split("\n")
    start = [i for i, ln in enumerate(lines) if ln.strip() == f"# region {region.name}"]
    end = [i for i, ln in enumerate(lines) if ln.strip() == f"# endregion {region.name}"]
    assert len(start) == len(end) == 1, f"{region.name}: markers {start} / {end}"
    assert region.first_line == start[0] + 2 and region.last_line == end[0]
    return "\n".join(lines[start[0] + 1:end[0]])


def test_every_region_a_notebook_names_exists_and_is_the_files_lines():
    named = notebook_regions()
    assert named, "no show_code(...) call found in any notebook: the scan or the notebooks changed"
    known = regions()
    for name, notebooks in named.items():
        assert name in known, f"{', '.join(notebooks)} show region {name!r}, which no module marks"
        r = known[name]
        assert r.text.strip(), f"region {name} is empty"
        assert r.text == _between_markers(r)


def test_every_region_is_exact_and_the_core_ones_exist():
    known = regions()
    for r in known.values():
        assert r.text == _between_markers(r)
        assert r.defines, f"{r.name}: names no function"
    for name in ("edit-prefetch", "edit-unit-sync", "outer-step", "detector-test", "detector-update",
                 "softmax-weights", "aedit-meeting", "co2-outer-step", "stop-check", "time-budget-stop"):
        assert name in known
    assert known["softmax-weights"].defines == ("softmax_weights",)
    assert known["edit-unit-sync"].defines == ("EDiTMethod.issue", "EDiTMethod.finish")
    assert known["time-budget-stop"].defines == ("inside Trainer.run",)


def test_markers_are_comments_only():
    """Removing every marker line leaves the same syntax tree (a marker inside a string would not)."""
    root = source.package_root().parent
    for path in {r.path for r in regions().values()}:
        text = (root / path).read_text(encoding="utf-8")
        bare = "\n".join(ln for ln in text.split("\n") if not re.match(r"^\s*# (end)?region\b", ln))
        assert ast.dump(ast.parse(text)) == ast.dump(ast.parse(bare)), path


def test_several_regions_show_one_after_the_other():
    both = show_code("outer-step", "co2-outer-step")
    assert [r.name for r in both.regions] == ["outer-step", "co2-outer-step"]
    page = both._repr_html_()
    assert page.index("edit_lab/core/outer.py") < page.index("edit_lab/core/methods/co2.py")
    with pytest.raises(RegionError, match="'nope'"):
        show_code("outer-step", "nope")


def test_unknown_region_lists_the_known_ones():
    with pytest.raises(RegionError) as e:
        show_code("no-such-region")
    msg = str(e.value)
    assert "no-such-region" in msg
    for name in regions():
        assert name in msg


def test_rendering_names_file_and_lines():
    r = show_code("softmax-weights")
    assert r.path == "edit_lab/rules/weighting_rule.py" and r.module == "edit_lab.rules.weighting_rule"
    page = r._repr_html_()
    assert "edit_lab/rules/weighting_rule.py" in page and f"lines {r.first_line}–{r.last_line}" in page
    assert "softmax_weights" in page
    md = r._repr_markdown_()
    assert "```python\ndef softmax_weights(" in md  # dedented: a top-level function is unchanged
    numbered = r.numbered().split("\n")
    assert numbered[0].lstrip().startswith(f"{r.first_line}  def softmax_weights(")
    assert len(numbered) == r.last_line - r.first_line + 1
    method = show_code("detector-update")
    assert method.code().startswith("def update(self")  # a method's indentation is removed for display
    assert method.text.startswith("    def update(self")  # but the text itself is the file's


@pytest.mark.parametrize("text, problem", [
    ("# region a\nx = 1\n", "never closed"),
    ("x = 1\n# endregion a\n", "without its"),
    ("# region a\n# region b\nx = 1\n# endregion b\n# endregion a\n", "do not nest"),
    ("# region a\n\n# endregion a\n", "empty"),
    ("# region A_B\nx = 1\n# endregion A_B\n", "malformed"),
])
def test_bad_markers_are_refused(text, problem):
    with pytest.raises(RegionError, match=problem):
        parse_regions(text, "m", "m.py")


def test_parse_regions_reads_lines_and_functions():
    text = "class C:\n    # region r1\n    def f(self):\n        return 1\n    # endregion r1\n"
    (r,) = parse_regions(text, "m", "m.py")
    assert (r.first_line, r.last_line, r.defines) == (3, 4, ("C.f",))
    assert r.text == "    def f(self):\n        return 1"
