"""Every benchmark table that a result file backs, rendered from `benchmarks/results/`.

    python benchmarks/render.py                               # print each table (markdown) under its name
    python benchmarks/render.py aedit_loss                    # one table
    python benchmarks/render.py --check docs/benchmarks.md    # exit 1 when a marked table differs
    python benchmarks/render.py --update docs/benchmarks.md   # rewrite the marked tables in place

The tables live in docs/benchmarks.md (`PAGES`: the pages that may hold marked tables; the README
links to it). In such a page a rendered table follows a marker line `<!-- rendered: NAME -->` (NAME a
key of `TABLES`); the table is the block of `|` lines right after it. A table without a marker is typed
by hand: its section says which measurement it comes from and why there is no result file for it
(`UNRENDERED`). The check is a unit test (tests/unit/test_benchmark_tables.py), so a published figure
and its result file cannot drift apart silently.
"""

from __future__ import annotations

import argparse
import importlib
import re
import sys
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))

from results_io import RESULTS, read_result  # noqa: E402

#: The pages whose marked tables `make tables` and the unit test check: the benchmarks page first.
PAGES = (HERE.parent / "docs" / "benchmarks.md", HERE.parent / "README.md")

MARKER = re.compile(r"^<!-- rendered: ([a-z0-9_]+) -->\s*$")


@dataclass(frozen=True)
class Table:
    """One published table: the result files it is made of (in the table's row order) and how."""

    files: tuple[str, ...]
    render: Callable[[list[dict]], list[str]]


def _aedit_loss(results: list[dict]) -> list[str]:
    from aedit_loss import render_files

    return render_files(results)


def _engine_vs_fsdp2(results: list[dict]) -> list[str]:
    from engine_vs_fsdp2 import table_of_result

    (data,) = results
    return table_of_result(data).splitlines()


def _binder_memory(results: list[dict]) -> list[str]:
    from binder_memory import table

    return table(results)


def _one(module: str, function: str) -> Callable[[list[dict]], list[str]]:
    """A table drawn from one result file by `module.function(data)` (the benchmark script's own renderer)."""
    def render(results: list[dict]) -> list[str]:
        (data,) = results
        return getattr(importlib.import_module(module), function)(data)

    return render


def _stragglers(part: str) -> Callable[[list[dict]], list[str]]:
    def render(results: list[dict]) -> list[str]:
        from stragglers import table_lines

        (data,) = results
        return table_lines(data, part)

    return render


TABLES: dict[str, Table] = {
    "aedit_loss": Table(("aedit_loss.json", "aedit_loss_step_weighting.json", "aedit_loss_no_softmax.json",
                         "aedit_loss_weight_per_step.json", "aedit_loss_period5.json", "aedit_loss_period20.json",
                         "aedit_loss_budget40.json", "aedit_loss_slow_link.json",
                         "aedit_loss_slow_link_step_weighting.json"), _aedit_loss),
    "engine_vs_fsdp2": Table(("engine_vs_fsdp2.json",), _engine_vs_fsdp2),
    "binder_memory": Table(("binder_memory.json",), _binder_memory),
    "preview_vs_real": Table(("preview_vs_real.json",), _one("preview_vs_real", "table_lines")),
    "preview_latency": Table(("preview_latency.json",), _one("preview_latency", "table_lines")),
    "preview_latency_methods": Table(("preview_latency.json",), _one("preview_latency", "method_lines")),
    "preview_latency_loaded": Table(("preview_latency_loaded.json",), _one("preview_latency", "table_lines")),
    "penalty_rule": Table(("penalty_rule.json",), _one("penalty_rule", "table_lines")),
    "penalty_rule_verify": Table(("penalty_rule.json",), _one("penalty_rule", "verify_lines")),
    "penalty_edges": Table(("penalty_edges.json",), _one("penalty_edges", "page_lines")),
    "virtual_race": Table(("virtual_race.json",), _one("virtual_race", "table_lines")),
    "virtual_race_paired": Table(("virtual_race.json",), _one("virtual_race", "paired_lines")),
    "virtual_race_64": Table(("virtual_race_64.json",), _one("virtual_race", "table_lines")),
    "virtual_race_64_paired": Table(("virtual_race_64.json",), _one("virtual_race", "paired_lines")),
    "wire_ratio": Table(("wire_ratio.json",), _one("wire_ratio", "table_lines")),
    "backup_workers": Table(("backup_workers.json",), _one("backup_workers", "table_lines")),
    "mkl_pin": Table(("mkl_pin.json",), _one("mkl_pin", "table_lines")),
    "virtual_vs_real": Table(("virtual_vs_real.json",), _one("virtual_vs_real", "table_lines")),
    "streaming_vs_edit": Table(("streaming_vs_edit.json",), _one("streaming_vs_edit", "table_lines")),
    "sparseloco": Table(("sparseloco.json",), _one("sparseloco", "table_lines")),
    **{f"stragglers_{part.replace(':', '_')}": Table(("stragglers.json",), _stragglers(part))
       for part in ("throughput:2x2", "throughput:1x4", "in_run", "loss", "timings")},
}

#: docs/benchmarks.md tables still typed by hand, and why (their benchmarks now write result files; the next run fills them).
UNRENDERED = {
    "edit_overlap": "deep model, 44 steps × 3 methods and a 600-step loss part: too long to re-run on a shared machine",
    "penalty_defaults": "a selection of rows of a replay; benchmarks/results/penalty_defaults.json predates it",
    "penalty": "measured with the detector defaults before D10; re-running changes what the section describes",
    "notebooks": "timings of `make notebooks`, not a benchmark script",
}


def render(name: str) -> list[str]:
    table = TABLES[name]
    missing = [f for f in table.files if not (RESULTS / f).exists()]
    if missing:
        raise FileNotFoundError(f"{name}: no result file {', '.join(missing)} under benchmarks/results/")
    return table.render([read_result(RESULTS / f) for f in table.files])


def marked_tables(text: str) -> list[tuple[str, int, int]]:
    """(name, first line, end line) of every table following a marker in `text` (0-based, end exclusive)."""
    lines = text.splitlines()
    out = []
    for i, line in enumerate(lines):
        m = MARKER.match(line)
        if m:
            start = end = i + 1
            while end < len(lines) and lines[end].startswith("|"):
                end += 1
            out.append((m.group(1), start, end))
    return out


def check(page: Path) -> list[str]:
    """One line per marked table of `page` that is not what its result files render (empty: all equal)."""
    lines = page.read_text().splitlines()
    problems = []
    for name, start, end in marked_tables(page.read_text()):
        if name not in TABLES:
            problems.append(f"{page.name}: unknown table {name!r} (known: {', '.join(TABLES)})")
            continue
        try:
            want = render(name)
        except FileNotFoundError as e:
            problems.append(str(e))
            continue
        have = lines[start:end]
        if have != want:
            diff = [f"  line {start + 1 + k}: {page.name} {h!r}\n    rendered {w!r}"
                    for k, (h, w) in enumerate(zip(have, want)) if h != w][:3]
            count = f" ({len(have)} rows in {page.name}, {len(want)} rendered)" if len(have) != len(want) else ""
            problems.append(f"{page.name}: table {name!r} differs from its result files{count}\n" + "\n".join(diff))
    return problems


def update(page: Path) -> int:
    """Rewrite every marked table of `page` from its result files; returns how many changed."""
    lines = page.read_text().splitlines()
    changed = 0
    for name, start, end in reversed(marked_tables(page.read_text())):
        want = render(name)
        if lines[start:end] != want:
            lines[start:end] = want
            changed += 1
    page.write_text("\n".join(lines) + "\n")
    return changed


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("names", nargs="*", metavar="NAME", help=f"tables: {', '.join(TABLES)} (default: all)")
    ap.add_argument("--check", type=Path, metavar="FILE", help="compare FILE's marked tables (docs/benchmarks.md)")
    ap.add_argument("--update", type=Path, metavar="FILE", help="rewrite FILE's marked tables in place")
    args = ap.parse_args(argv)
    unknown = [n for n in args.names if n not in TABLES]
    if unknown:
        ap.error(f"unknown table {unknown[0]!r}: one of {', '.join(TABLES)}")
    if args.check:
        problems = check(args.check)
        print("\n".join(problems) if problems else f"{args.check.name}: every marked table equals its result files")
        return 1 if problems else 0
    if args.update:
        print(f"{args.update.name}: {update(args.update)} table(s) rewritten")
        return 0
    for name in args.names or TABLES:
        print(f"## {name} ({', '.join(TABLES[name].files)})\n")
        try:
            print("\n".join(render(name)) + "\n")
        except FileNotFoundError as e:
            print(f"({e})\n")
    for name, why in UNRENDERED.items():
        if name in TABLES and all((RESULTS / f).exists() for f in TABLES[name].files):
            continue
        print(f"## {name}: typed by hand ({why})\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
