"""Where a benchmark's result goes, and what it records so that a reader can tell how it was made.

Every benchmark writes one JSON file under `benchmarks/results/` through `write_result`: its own numbers
(every repeat and every seed, not only the medians a table shows) next to `provenance()`: the command
line, the git commit and whether the tree had uncommitted changes, the torch and Python versions, the
CPU count, the platform, the date, and the load average before and after (a busy machine explains a
noisy timing). No host name and no filesystem path is recorded: a result file is committed with the code.
`benchmarks/render.py` turns these files into the tables of docs/benchmarks.md.
"""

from __future__ import annotations

import json
import os
import platform
import shlex
import subprocess
import sys
from datetime import datetime, timezone
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
RESULTS = ROOT / "benchmarks" / "results"

#: The keys `provenance()` adds to every result file.
PROVENANCE_KEYS = ("command", "git_commit", "git_dirty", "torch", "python", "cpu_count", "platform", "date",
                   "load_avg_before", "load_avg_after")


def _git(*args: str) -> str | None:
    try:
        return subprocess.run(["git", *args], cwd=ROOT, capture_output=True, text=True, check=True).stdout.strip()
    except (OSError, subprocess.CalledProcessError):
        return None


def portable_arg(arg: str) -> str:
    """An argument as it may be committed: a path inside the repository relative to it, any other
    absolute path replaced by `<path>/` and its last part (no machine's layout in a result file)."""
    name, eq, value = arg.partition("=") if arg.startswith("--") and "=" in arg else ("", "", arg)
    if not os.path.isabs(value):
        return arg
    p = Path(value)
    try:
        rel = str(p.resolve().relative_to(ROOT))
    except ValueError:
        rel = f"<path>/{p.name}"
    return f"{name}{eq}{rel}"


def command_line(script: str, argv: list[str]) -> str:
    """`python benchmarks/<script> <args>` as typed, the way docs/benchmarks.md quotes it."""
    return " ".join(["python", f"benchmarks/{Path(script).name}", *(shlex.quote(portable_arg(a)) for a in argv)])


def load_average() -> float | None:
    try:
        return round(os.getloadavg()[0], 2)
    except (AttributeError, OSError):
        return None


def provenance(script: str, argv: list[str], load_before: float | None = None) -> dict[str, Any]:
    """How a result was made (see the module docstring); `load_before`: `load_average()` taken at the start."""
    import torch

    status = _git("status", "--porcelain", "--untracked-files=no")
    return {
        "command": command_line(script, argv),
        "git_commit": _git("rev-parse", "HEAD") or "unknown",
        "git_dirty": None if status is None else bool(status),
        "torch": torch.__version__,
        "python": platform.python_version(),
        "cpu_count": os.cpu_count(),
        "platform": f"{platform.system()} {platform.machine()}",
        "date": datetime.now(timezone.utc).isoformat(timespec="seconds"),
        "load_avg_before": load_before,
        "load_avg_after": load_average(),
    }


def write_result(path: str | Path, payload: dict[str, Any], script: str, argv: list[str] | None = None,
                 load_before: float | None = None) -> Path:
    """`payload` with its provenance first, as indented JSON at `path` (a bare name lands in RESULTS)."""
    path = Path(path)
    if not path.is_absolute() and path.parent == Path("."):
        path = RESULTS / path
    path.parent.mkdir(parents=True, exist_ok=True)
    argv = sys.argv[1:] if argv is None else argv
    data = {**provenance(script, argv, load_before), **payload}
    path.write_text(json.dumps(data, indent=1, ensure_ascii=False) + "\n")
    return path


def read_result(path: str | Path) -> dict[str, Any]:
    path = Path(path)
    return json.loads((path if path.is_absolute() or path.exists() else RESULTS / path).read_text())
