"""binder/postBuild works in a fresh virtual environment (the step Binder runs after its environment file).

What Binder's conda step provides (Python and conda-forge's CPU torch with its dependencies) is stood in
for by this test's own torch: the fresh venv sees that torch's distributions through a `.pth` file, as
packages installed in the environment before postBuild runs. Nothing else of the test's environment is
visible to it, so postBuild must still install the lab and every other dependency itself. Linking
instead of `pip install torch` spares unpacking 750 MB, most of the test's time.
"""

from __future__ import annotations

import importlib.metadata
import os
import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]


def _requirements(name: str) -> set[str]:
    """`name` and every distribution it needs here, recursively (normalised names)."""
    from packaging.markers import Marker

    seen: set[str] = set()
    todo = [name]
    while todo:
        key = re.sub(r"[-_.]+", "-", todo.pop()).lower()
        if key in seen:
            continue
        seen.add(key)
        for req in importlib.metadata.distribution(key).requires or []:
            spec, _, marker = req.partition(";")
            if marker and ("extra" in marker or not Marker(marker).evaluate()):
                continue
            todo.append(re.split(r"[ <>=!~\[(]", spec.strip())[0])
    return seen


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


@pytest.mark.slow
def test_postbuild_in_a_fresh_venv(tmp_path):
    """A fresh venv holding only what binder/environment.yml's conda part gives (Python and a CPU torch),
    then binder/postBuild, then the lab imports and a widget and a figure can be built."""
    import torch

    venv = tmp_path / "venv"
    subprocess.run([sys.executable, "-m", "venv", str(venv)], check=True)
    py = venv / "bin" / "python"
    # stand-in for conda-forge's pytorch-cpu: this environment's CPU torch and what it needs (not pip, setuptools:
    # the venv has its own)
    version = torch.__version__.split("+")[0]
    provide_like_conda(py, _requirements("torch") - {"pip", "setuptools"}, tmp_path / "conda-site-packages")
    repo = tmp_path / "repo"
    shutil.copytree(ROOT, repo, ignore=shutil.ignore_patterns(".venv", ".git", "runs", "*.egg-info", "__pycache__"))
    env = dict(os.environ, PATH=f"{venv / 'bin'}{os.pathsep}{os.environ['PATH']}", VIRTUAL_ENV=str(venv))
    env.pop("PYTHONPATH", None)
    subprocess.run(["bash", "binder/postBuild"], cwd=repo, env=env, check=True, timeout=900)
    out = subprocess.run([str(py), "-c", "import edit_lab, ipywidgets, plotly.graph_objects as go, torch, jupyterlab;"
                          "from edit_lab.widgets import StragglerLab; StragglerLab();"
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
