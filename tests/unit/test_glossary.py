"""docs/glossary.md: every RunConfig knob it names (by its flag) exists, and every symbol of the paper the course uses has a row."""

from __future__ import annotations

import re
from pathlib import Path

from edit_lab.config import knobs

GLOSSARY = Path(__file__).resolve().parents[2] / "docs" / "glossary.md"


def _symbol_rows() -> list[list[str]]:
    """The rows of the first table (symbols and settings), as lists of cells."""
    text = GLOSSARY.read_text()
    table = text.split("## Symbols and settings", 1)[1].split("\n## ", 1)[0]
    rows = [[c.strip() for c in line.strip().strip("|").split("|")] for line in table.splitlines()
            if line.startswith("|") and not line.startswith("|---")]
    return rows[1:]  # without the header


def test_every_runconfig_field_named_in_the_glossary_exists():
    fields = set(knobs())  # the flags: `penalty_alpha` for cfg.penalty.alpha
    named = [name for row in _symbol_rows() for name in re.findall(r"`([a-z_0-9]+)`", row[2])]
    assert len(named) >= 20, named
    missing = [n for n in named if n not in fields]
    assert not missing, f"the glossary names RunConfig fields that do not exist: {missing}"


def test_the_papers_symbols_have_a_row():
    symbols = {row[0] for row in _symbol_rows()}
    for s in ("τ", "W", "E", "α", "δ", "T", "φ", "T_sync", "N_min", "ρ", "K", "ε", "λ", "S", "R"):
        assert s in symbols, f"no glossary row for {s}"


def test_every_row_has_five_cells_and_an_authors_column():
    for row in _symbol_rows():
        assert len(row) == 5 and row[3], row
