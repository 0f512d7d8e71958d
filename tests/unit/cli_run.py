"""`python -m edit_lab run …` in a fresh interpreter, as a user types it, and what that interpreter imported.

A refusal is fast because it comes before anything heavy is loaded: the launcher imports torch only
once a configuration is accepted (edit_lab/__init__.py). So the tests assert what the refusing process
had imported when it exited (no torch, no numpy, no pandas), which does not depend on how busy the
machine is, instead of how many seconds it took.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
ENV = dict(os.environ, PYTHONPATH=str(ROOT) + os.pathsep + os.environ.get("PYTHONPATH", ""))
#: what a refusal must not have loaded: each costs a second or more to import on a loaded 2-core machine
HEAVY = ("torch", "numpy", "pandas")

# `python -m edit_lab run ARGS`, which writes the names of its imported modules to a file when it exits
_MAIN = """
import atexit, json, os, runpy, sys
atexit.register(lambda: open(os.environ["EDIT_LAB_MODULES_FILE"], "w").write(json.dumps(sorted(sys.modules))))
runpy.run_module("edit_lab", run_name="__main__", alter_sys=True)
"""


def cli_run(*args: str) -> tuple[subprocess.CompletedProcess, set[str]]:
    """(the finished process, the heavy modules it had imported) of `python -m edit_lab run *args`."""
    with tempfile.TemporaryDirectory() as tmp:
        modules = Path(tmp) / "modules.json"
        res = subprocess.run([sys.executable, "-c", _MAIN, "run", *args], capture_output=True, text=True,
                             timeout=120, env={**ENV, "EDIT_LAB_MODULES_FILE": str(modules)}, cwd=ROOT)
        imported = set(json.loads(modules.read_text()))
    return res, {m for m in imported if m.split(".")[0] in HEAVY}
