"""binder/postBuild works in a fresh virtual environment (the step Binder runs after its environment file).

What Binder's environment step provides is stood in for by this test's own packages: conda-forge's CPU
torch and every package of binder/environment.yml's pip list, each with what it requires, are linked into
the fresh venv through a `.pth` file, as packages installed before postBuild runs. Nothing else of the
test's environment is visible, so the check is two-sided: postBuild must then install the lab and nothing
else (a dependency the lab needs and environment.yml lacks would be installed here, and fail the test),
and keep the CPU torch. Linking instead of installing spares unpacking about 1 GB of wheels and compiling
them, which was most of the test's time.
"""

from __future__ import annotations

import importlib.metadata
import json
import os
import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]


def _requirements(name: str) -> set[str]:
    """`name` (a requirement string, extras allowed) and every distribution it needs here, recursively,
    following the extras each requirement asks for (normalised names)."""
    from packaging.requirements import Requirement

    seen: set[tuple[str, str]] = set()
    todo = [Requirement(name)]
    while todo:
        req = todo.pop()
        key = re.sub(r"[-_.]+", "-", req.name).lower()
        for extra in [""] + sorted(req.extras):
            if (key, extra) in seen:
                continue
            seen.add((key, extra))
            for dep in importlib.metadata.distribution(key).requires or []:
                dep = Requirement(dep)
                if dep.marker is None or dep.marker.evaluate({"extra": extra}):
                    todo.append(dep)
    return {key for key, _ in seen}


def provide_like_conda(venv_python: Path, names: set[str], into: Path) -> None:
    """Make the distributions `names` of this environment installed packages of `venv_python`'s venv.

    Each one's top-level folders and files and its .dist-info are linked into `into`, which a `.pth`
    file puts on the venv's sys.path: pip then lists them as installed, as it does conda's packages."""
    into.mkdir()
    for name in names:
        dist = importlib.metadata.distribution(name)
        root = Path(dist.locate_file(""))
        tops = {Path(str(f)).parts[0] for f in dist.files or [] if not str(f).startswith("..")}
        for top in tops:
            if not (into / top).exists() and (root / top).exists():
                (into / top).symlink_to(root / top)
    site = subprocess.run([str(venv_python), "-c", "import sysconfig; print(sysconfig.get_path('purelib'))"],
                          capture_output=True, text=True, check=True).stdout.strip()
    (Path(site) / "conda-stand-in.pth").write_text(f"{into}\n")


def environment_packages() -> set[str]:
    """binder/environment.yml's pip packages and the torch its conda part gives, with all they need here."""
    import yaml

    spec = yaml.safe_load((ROOT / "binder" / "environment.yml").read_text())
    pip = next(d["pip"] for d in spec["dependencies"] if isinstance(d, dict))
    names: set[str] = set()
    for req in ["torch", *pip]:
        names |= _requirements(req)
    return names - {"pip", "setuptools"}  # the venv has its own


@pytest.mark.slow
def test_postbuild_in_a_fresh_venv(tmp_path):
    """A fresh venv holding only what binder/environment.yml gives (Python, a CPU torch, its pip list),
    then binder/postBuild: it installs the lab alone, and the lab imports and builds a widget and a figure."""
    import torch

    venv = tmp_path / "venv"
    subprocess.run([sys.executable, "-m", "venv", str(venv)], check=True)
    py = venv / "bin" / "python"
    version = torch.__version__.split("+")[0]
    provided = environment_packages()
    provide_like_conda(py, provided, tmp_path / "conda-site-packages")
    repo = tmp_path / "repo"
    shutil.copytree(ROOT, repo, ignore=shutil.ignore_patterns(".venv", ".git", "runs", "*.egg-info", "__pycache__"))
    env = dict(os.environ, PATH=f"{venv / 'bin'}{os.pathsep}{os.environ['PATH']}", VIRTUAL_ENV=str(venv))
    env.pop("PYTHONPATH", None)
    build = subprocess.run(["bash", "binder/postBuild"], cwd=repo, env=env, capture_output=True, text=True,
                           timeout=900)
    assert build.returncode == 0, build.stdout[-3000:] + build.stderr[-3000:]
    installed = re.findall(r"^Successfully installed (.*)$", build.stdout, re.M)
    added = {re.sub(r"[-_.]+", "-", n.rsplit("-", 1)[0]).lower() for n in installed[-1].split()} if installed else set()
    assert added - {"setuptools"} == {"edit-lab"}, \
        f"postBuild installed more than the lab: binder/environment.yml lacks what it added:\n{installed}"
    # and pinned JupyterLab's settings where the server reads them (tests/ui/test_subshells.py says why)
    overrides = venv / "share" / "jupyter" / "lab" / "settings" / "overrides.json"
    assert json.loads(overrides.read_text()) == json.loads((ROOT / "binder" / "jupyterlab-overrides.json").read_text())
    out = subprocess.run([str(py), "-c", "import edit_lab, ipywidgets, plotly.graph_objects as go, torch, jupyterlab;"
                          "from edit_lab.ui.lab import StragglerLab; StragglerLab();"
                          "print(torch.__version__, ipywidgets.__version__, torch.__file__)"],
                         cwd=tmp_path, env=env, capture_output=True, text=True, timeout=300)
    assert out.returncode == 0, out.stderr
    torch_version, _, torch_file = out.stdout.split()
    # postBuild kept the CPU torch the environment gave, pulled no other build
    assert torch_version.split("+")[0] == version and "conda-site-packages" in torch_file
    listed = subprocess.run([str(py), "-m", "pip", "list"], capture_output=True, text=True, env=env).stdout.lower()
    assert "nvidia" not in listed
    start = subprocess.run(["bash", str(repo / "binder" / "start"), "bash", "-c", "echo $OMP_NUM_THREADS"],
                           capture_output=True, text=True)
    assert start.stdout.strip() == "1"
