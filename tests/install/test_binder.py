"""binder/postBuild works in a fresh virtual environment (the step Binder runs after its environment file)."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]


@pytest.mark.slow
def test_postbuild_in_a_fresh_venv(tmp_path):
    """A fresh venv holding only what binder/environment.yml's conda part gives (Python and a CPU torch),
    then binder/postBuild, then the lab imports and a widget and a figure can be built."""
    import torch

    venv = tmp_path / "venv"
    subprocess.run([sys.executable, "-m", "venv", str(venv)], check=True)
    py = venv / "bin" / "python"
    # stand-in for conda-forge's pytorch-cpu: the CPU torch this machine installs (version from the running one)
    version = torch.__version__.split("+")[0]
    subprocess.run([str(py), "-m", "pip", "install", "-q", f"torch=={version}"], check=True, timeout=600)
    repo = tmp_path / "repo"
    shutil.copytree(ROOT, repo, ignore=shutil.ignore_patterns(".venv", ".git", "runs", "*.egg-info", "__pycache__"))
    env = dict(os.environ, PATH=f"{venv / 'bin'}{os.pathsep}{os.environ['PATH']}", VIRTUAL_ENV=str(venv))
    env.pop("PYTHONPATH", None)
    subprocess.run(["bash", "binder/postBuild"], cwd=repo, env=env, check=True, timeout=900)
    out = subprocess.run([str(py), "-c", "import edit_lab, ipywidgets, plotly.graph_objects as go, torch, jupyterlab;"
                          "from edit_lab.widgets import StragglerLab; StragglerLab();"
                          "print(torch.__version__, ipywidgets.__version__)"],
                         cwd=tmp_path, env=env, capture_output=True, text=True, timeout=300)
    assert out.returncode == 0, out.stderr
    assert out.stdout.split()[0].split("+")[0] == version  # postBuild kept the CPU torch, pulled no other build
    listed = subprocess.run([str(py), "-m", "pip", "list"], capture_output=True, text=True, env=env).stdout.lower()
    assert "nvidia" not in listed
    start = subprocess.run(["bash", str(repo / "binder" / "start"), "bash", "-c", "echo $OMP_NUM_THREADS"],
                           capture_output=True, text=True)
    assert start.stdout.strip() == "1"
