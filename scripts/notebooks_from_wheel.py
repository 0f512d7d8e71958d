"""Install the lab as a user would (`pip install .`, not editable) into a fresh venv, then run every notebook
from a folder outside the repository, under papermill with its test parameters (issue 37).

    .venv/bin/python scripts/notebooks_from_wheel.py [--keep DIR]

Why a script and not a test: it installs the lock into a new venv (about two minutes) and runs all ten
notebooks (several minutes on 2 cores), too long for `make test`, whose `tests/install/test_binder.py` checks
the install itself. What it shows: the installed packages find everything a lesson reads (the shipped runs, the
mysteries, the benchmark results the paper boxes quote) as package data, with no checkout on the path.
Exit status 0 when every notebook ran without an error; a table of seconds per notebook is printed.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
TORCH_SPEC = "torch==2.13.0"


def run(cmd: list[str], **kw) -> None:
    print("+", " ".join(cmd), flush=True)
    subprocess.run(cmd, check=True, **kw)


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--keep", type=Path, help="work in this folder (kept) instead of a temporary one")
    ap.add_argument("--only", nargs="*", help="notebook name prefixes (default: all)")
    args = ap.parse_args()
    work = args.keep or Path(tempfile.mkdtemp(prefix="edit-lab-wheel-"))
    work.mkdir(parents=True, exist_ok=True)
    venv, outside = work / "venv", work / "outside"
    py = venv / "bin" / "python"
    if not py.exists():
        run([sys.executable, "-m", "venv", str(venv)])
        run([str(py), "-m", "pip", "install", "-q", TORCH_SPEC])
        run([str(py), "-m", "pip", "install", "-q", "-r", str(ROOT / "requirements.lock")])
        run([str(py), "-m", "pip", "install", "-q", "--no-deps", "--no-build-isolation", str(ROOT)])
    env = {k: v for k, v in os.environ.items() if k not in ("PYTHONPATH", "VIRTUAL_ENV")}
    env["PATH"] = f"{venv / 'bin'}{os.pathsep}{env['PATH']}"
    outside.mkdir(exist_ok=True)
    where = subprocess.run([str(py), "-c", "import edit_lab, edit_course; print(edit_lab.__file__); "
                            "print(edit_course.RESULTS.is_dir(), edit_course.BENCHMARKS_PAGE.is_file(), "
                            "edit_course.MYSTERIES.is_dir())"], cwd=outside, env=env, capture_output=True, text=True,
                           check=True).stdout.split("\n")
    print("installed at", where[0], "| results, page, mysteries found:", where[1], flush=True)
    if str(ROOT) in where[0] or "site-packages" not in where[0]:
        print("edit_lab is not the installed package", file=sys.stderr)
        return 2

    sys.path.insert(0, str(ROOT))
    from tests.notebooks.test_notebooks import capstone_diagnoses  # the capstone's checks need a diagnosis

    rows, failed = [], 0
    for nb in sorted((ROOT / "notebooks").glob("[0-9][0-9]_*.ipynb")):
        if args.only and not any(nb.name.startswith(p) for p in args.only):
            continue
        here = outside / nb.stem
        here.mkdir(exist_ok=True)
        src = here / nb.name
        shutil.copy(nb, src)
        params = json.loads(nb.read_text())["metadata"]["edit_lab"]["test_parameters"]
        if nb.name.startswith("08"):
            params["DIAGNOSES"] = capstone_diagnoses()
        (here / "params.json").write_text(json.dumps(params))
        t0 = time.perf_counter()
        proc = subprocess.run([str(py), "-m", "papermill", str(src), str(here / f"out-{nb.name}"), "-f",
                               str(here / "params.json"), "--cwd", str(here), "-k", "python3", "--no-progress-bar"],
                              cwd=here, env=env, capture_output=True, text=True)
        dt = time.perf_counter() - t0
        ok = proc.returncode == 0
        failed += not ok
        rows.append((nb.stem, dt, "ok" if ok else "FAILED"))
        print(f"{nb.stem:<36} {dt:6.1f} s  {'ok' if ok else 'FAILED'}", flush=True)
        if not ok:
            print(proc.stderr[-3000:], file=sys.stderr)
    print(f"\n{len(rows) - failed} of {len(rows)} notebooks ran from {outside} on the installed wheel "
          f"({sum(r[1] for r in rows):.0f} s)")
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
