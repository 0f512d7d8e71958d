"""Write the lab's lock and the environment files that follow it, from a fresh venv's `pip freeze` (`make lock`).

    python scripts/lock.py FREEZE.txt --torch 'torch==2.13.0'

`requirements.lock` holds one exact version per package: what `make install`, `.ci/run`, Binder and the
Colab instructions install. torch is not in it: TORCH_SPEC pins it (a CPU build here, a CUDA build for a GPU
user), and its own dependencies are in the lock. Nor is pip (every venv brings its own) or the lab itself.

`environment.yml` (conda users) and `binder/environment.yml` (Binder) list the same pins in their pip part,
and conda-forge's CPU build of the same torch version in their conda part, so that conda never pulls CUDA
libraries. tests/unit/test_environment_files.py checks that the three files and pyproject.toml agree.
"""

from __future__ import annotations

import argparse
import datetime
import re
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
LOCK = ROOT / "requirements.lock"
ENV_FILES = {
    "environment.yml": """\
# conda / mamba environment for local use, the lab's lock as conda packages and pins:
#   mamba env create -f environment.yml && mamba activate edit-lab
#   pip install --no-deps -e .
""",
    "binder/environment.yml": """\
# Binder (repo2docker) builds the image from this file, then runs binder/postBuild, which installs edit_lab
# itself (pip install -e '.[lab]', which finds every dependency here), and starts the server through
# binder/start (one thread per worker process).
""",
}
COMMON = """\
# Written by `make lock` (scripts/lock.py) from requirements.lock: edit that (make lock), never this file.
# tests/unit/test_environment_files.py checks that it agrees with the lock and pyproject.toml.
# torch is conda-forge's CPU build of the locked torch version (pytorch-cpu): pip then finds it installed
# and adds no CUDA wheels. JupyterLab 4 with ipywidgets 8 needs no extension step.
"""
#: Packages a venv brings itself, or that are not pinned by the lock (torch: TORCH_SPEC; the lab: the checkout).
NOT_LOCKED = {"pip", "torch", "edit-lab"}


def normalise(name: str) -> str:
    """PEP 503 name."""
    return re.sub(r"[-_.]+", "-", name).lower()


def read_pins(text: str) -> dict[str, str]:
    """{normalised name: version} of `name==version` lines (comments, blanks and URL installs skipped)."""
    pins = {}
    for line in text.splitlines():
        line = line.split("#", 1)[0].strip()
        m = re.fullmatch(r"([A-Za-z0-9][A-Za-z0-9._-]*)==([^\s;]+)", line)
        if m:
            pins[normalise(m.group(1))] = m.group(2)
    return pins


def torch_version(spec: str) -> str:
    m = re.fullmatch(r"\s*torch\s*==\s*([0-9][^\s,;+]*)(\+\S+)?\s*", spec)
    if not m:
        raise SystemExit(f"scripts/lock.py: --torch must pin one version (torch==X.Y.Z), not {spec!r}")
    return m.group(1)


def lock_text(pins: dict[str, str], torch: str, today: str) -> str:
    head = (f"# The lab's lock: every package `make install` installs, at one version each (torch: TORCH_SPEC,\n"
            f"# torch=={torch} here; its dependencies are below). Written by `make lock` on {today} for Python "
            f"{sys.version_info.major}.{sys.version_info.minor}\n"
            f"# on Linux x86_64; an upgrade is `make upgrade` and a reviewed diff of this file. Do not edit by hand.\n")
    return head + "".join(f"{name}=={pins[name]}\n" for name in sorted(pins))


def env_text(path: str, pins: dict[str, str], torch: str) -> str:
    lines = [ENV_FILES[path] + COMMON, "name: edit-lab", "channels:", "  - conda-forge", "dependencies:",
             "  - python=3.11", "  - pip", f"  - pytorch-cpu={torch}", "  - pip:"]
    lines += [f"      - {name}=={pins[name]}" for name in sorted(pins)]
    return "\n".join(lines) + "\n"


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("freeze", type=Path, help="`uv pip freeze --exclude-editable` of a venv installed from pyproject")
    ap.add_argument("--torch", default="torch==2.13.0", help="the Makefile's TORCH_SPEC")
    args = ap.parse_args(argv)
    torch = torch_version(args.torch)
    pins = {n: v for n, v in read_pins(args.freeze.read_text()).items() if n not in NOT_LOCKED}
    if "uv" not in pins or "setuptools" not in pins:
        raise SystemExit("scripts/lock.py: the freeze must hold uv and setuptools (make install uses both)")
    today = datetime.date.today().isoformat()
    LOCK.write_text(lock_text(pins, torch, today))
    for path in ENV_FILES:
        (ROOT / path).write_text(env_text(path, pins, torch))
    print(f"{LOCK.name}: {len(pins)} packages (torch=={torch} from TORCH_SPEC); "
          f"{', '.join(ENV_FILES)} follow it")
    return 0


if __name__ == "__main__":
    sys.exit(main())
