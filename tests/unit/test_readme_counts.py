"""The README's line counts are the tree's (issue 49, item 5): `scripts/readme_counts.py` computes them."""

from __future__ import annotations

import importlib.util
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]


def _script():
    spec = importlib.util.spec_from_file_location("readme_counts", ROOT / "scripts" / "readme_counts.py")
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


def test_the_readme_counts_are_the_trees(capsys):
    assert _script().main(["--check"]) == 0, capsys.readouterr().out


def test_a_drifted_count_is_found_and_rewritten():
    mod = _script()
    text = (ROOT / "README.md").read_text(encoding="utf-8")
    row = next(ln for ln in text.splitlines() if ln.startswith(" 9  edit_lab/core/mesh.py"))
    count = row.split()[2]
    drifted = text.replace(row, row.replace(f" {count} ", f" {int(count) + 7} ", 1))
    new, differ = mod.expected(drifted)
    assert any(d.startswith("edit_lab/core/mesh.py:") for d in differ)
    assert not any(d.startswith("core path total:") for d in differ)  # the total is summed from the tree, not read
    assert new == text
