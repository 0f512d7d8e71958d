"""benchmarks/virtual_race.py's summary says what its labels say, on hand-built runs."""

from __future__ import annotations

import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT / "benchmarks"))

import virtual_race  # noqa: E402


def rows() -> list[dict]:
    vals = {"sync": (3.0, 3.2, 3.1), "edit": (2.9, 3.3, 3.0), "aedit": (2.8, 3.1, 3.05), "diloco": (3.4, 3.4, 3.4)}
    return [{"method": m, "seed": s, "val": v, "tokens": 1000 * (i + 1) + s, "steps_fast": 10 + i, "steps_slow": 5}
            for i, (m, vs) in enumerate(vals.items()) for s, v in enumerate(vs)]


def test_paired_counts_the_seeds_where_the_first_is_lower():
    p = virtual_race.paired(rows(), "aedit", "edit")  # 2.8 < 2.9, 3.1 < 3.3, 3.05 > 3.0
    assert p == {"mean_lower": round((0.1 + 0.2 - 0.05) / 3, 4), "lower_in": 2, "seeds": 3}
    assert virtual_race.paired(rows(), "aedit", "missing") == {"mean_lower": None, "lower_in": 0, "seeds": 0}


def test_the_table_holds_mean_spread_tokens_and_steps_per_method():
    rs = rows()
    data = {"runs": rs, "paired": {"aedit_vs_edit": virtual_race.paired(rs, "aedit", "edit"),
                                   "aedit_vs_sync": virtual_race.paired(rs, "aedit", "sync"),
                                   "edit_vs_sync": virtual_race.paired(rs, "edit", "sync")}}
    lines = virtual_race.table_lines(data)
    sync = next(line for line in lines if line.startswith("| sync |"))
    assert sync == "| sync | 3 | 3.100 | 0.200 | 1,001 | 10 / 5 |"
    assert "| diloco | 3 | 3.400 | 0.000 | 4,001 | 13 / 5 |" in lines
    assert lines[-1] == "| diloco | 3 | 3.400 | 0.000 | 4,001 | 13 / 5 |"  # the table rows only
    pairs = virtual_race.paired_lines(data)
    assert pairs[2:] == ["| A-EDiT against EDiT | -0.083 | 2 of 3 seeds |", "| A-EDiT against sync | -0.117 | 3 of 3 seeds |",
                         "| EDiT against sync | -0.033 | 2 of 3 seeds |"]
