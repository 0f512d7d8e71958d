"""The install files must agree with each other.

pyproject.toml is what `make install` uses; environment.yml and binder/environment.yml
are what conda users and Binder use. If they drift, the lab works for one of them and
fails for another, which no other test would notice. The Makefile and .ci/run are
checked for the two facts CI relies on: CI runs `make test`, and `make test` runs pytest
after installing a CPU torch before the project.
"""

from __future__ import annotations

import re
import tomllib
from pathlib import Path

import pytest

yaml = pytest.importorskip("yaml")

ROOT = Path(__file__).resolve().parents[2]
ENV_FILES = ["environment.yml", "binder/environment.yml"]
# conda packages that stand for a pyproject dependency (conda-forge's CPU build of torch)
CONDA_FOR = {"pytorch-cpu": "torch"}

_NAME = re.compile(r"\s*([A-Za-z0-9][A-Za-z0-9._-]*)")


def normalise(requirement: str) -> str:
    """PEP 503 name of a requirement string, without extras, pins or markers."""
    match = _NAME.match(requirement)
    assert match, f"not a requirement: {requirement!r}"
    return re.sub(r"[-_.]+", "-", match.group(1)).lower()


def pin(requirement: str) -> tuple[str, str]:
    """(name, version specifier with spaces removed), to compare pins across files."""
    name = normalise(requirement)
    rest = _NAME.sub("", requirement, count=1).split(";")[0]
    return name, re.sub(r"\s+", "", rest)


def pyproject() -> dict:
    return tomllib.loads((ROOT / "pyproject.toml").read_text())


def pyproject_requirements() -> list[str]:
    """Runtime deps plus the `lab` extra: what a notebook user needs."""
    project = pyproject()["project"]
    return project["dependencies"] + project["optional-dependencies"]["lab"]


def env_requirements(path: str) -> list[str]:
    """What an environment file installs, as pyproject requirement strings (conda stand-ins renamed)."""
    conda, pip = conda_env(path)
    renamed = [CONDA_FOR[normalise(d)] + d[len(normalise(d)):] for d in conda if normalise(d) in CONDA_FOR]
    return renamed + pip


def conda_env(path: str) -> tuple[list[str], list[str]]:
    """(conda dependencies, pip dependencies) of an environment file."""
    spec = yaml.safe_load((ROOT / path).read_text())
    conda, pip = [], []
    for dep in spec["dependencies"]:
        if isinstance(dep, dict):
            pip.extend(dep["pip"])
        else:
            conda.append(dep)
    return conda, pip


def make_recipe(target: str) -> tuple[str, list[str]]:
    """(prerequisites, recipe lines) of a Makefile target."""
    lines = (ROOT / "Makefile").read_text().splitlines()
    for i, line in enumerate(lines):
        if re.match(rf"^{re.escape(target)}\s*:(?!=)", line):
            prerequisites = line.split(":", 1)[1].split("##")[0]
            recipe = []
            for body in lines[i + 1 :]:
                if not body.startswith("\t") and not re.match(r"^(ifeq|ifneq|else|endif)\b", body):
                    break
                recipe.append(body.strip())
            return prerequisites, recipe
    raise AssertionError(f"no Makefile target {target!r}")


@pytest.mark.parametrize("path", ENV_FILES)
def test_environment_lists_the_same_names_as_pyproject(path: str) -> None:
    expected = sorted(normalise(r) for r in pyproject_requirements())
    assert sorted(normalise(r) for r in env_requirements(path)) == expected
    assert "torch" in expected


@pytest.mark.parametrize("path", ENV_FILES)
def test_environment_pins_match_pyproject(path: str) -> None:
    assert sorted(pin(r) for r in env_requirements(path)) == sorted(pin(r) for r in pyproject_requirements())


@pytest.mark.parametrize("path", ENV_FILES)
def test_conda_part_is_python_pip_and_cpu_torch(path: str) -> None:
    conda, _ = conda_env(path)
    assert sorted(normalise(d) for d in conda) == ["pip", "python", "pytorch-cpu"]
    assert "python=3.11" in conda


def test_both_environment_files_list_the_same_packages() -> None:
    assert conda_env(ENV_FILES[0]) == conda_env(ENV_FILES[1])


def test_pyproject_pytest_settings() -> None:
    settings = pyproject()["tool"]["pytest"]["ini_options"]
    assert settings["testpaths"] == ["tests"]
    assert int(settings["timeout"]) > 0
    markers = {m.split(":")[0].strip() for m in settings["markers"]}
    assert {"slow", "ui", "gpu", "notebooks"} <= markers


def test_ci_runs_make_test() -> None:
    text = (ROOT / ".ci" / "run").read_text()
    commands = [ln.strip() for ln in text.splitlines() if ln.strip() and not ln.lstrip().startswith("#")]
    assert "set -euo pipefail" in commands
    assert commands[-1] == "make test"


def test_make_test_runs_pytest_after_install() -> None:
    prerequisites, recipe = make_recipe("test")
    assert "$(STAMP)" in prerequisites.split()
    assert any(re.search(r"-m pytest\b", line) for line in recipe)


def test_make_installs_torch_before_the_project() -> None:
    """Otherwise pip resolves `torch>=2.4` itself and may pull a multi-GB CUDA build."""
    _, recipe = make_recipe("$(STAMP)")
    branches = [[]]  # the recipe's installers (INSTALLER=pip, the default uv): each must put torch first
    for line in recipe:
        if re.match(r"^(ifeq|ifneq|else|endif)\b", line):
            branches.append([])
        else:
            branches[-1].append(line)
    installers = [b for b in branches if any("-e '.[lab,test]'" in line for line in b)]
    assert len(installers) == 2, recipe
    for branch in installers:
        torch_line = next(i for i, line in enumerate(branch) if "$(TORCH_SPEC)" in line)
        project_line = next(i for i, line in enumerate(branch) if "-e '.[lab,test]'" in line)
        assert torch_line < project_line, branch
    uv = next(b for b in installers if any("uv pip install" in line for line in b))
    # pip compiles bytecode when it installs, uv only when asked: without it, a machine where Python may not write
    # .pyc files (PYTHONDONTWRITEBYTECODE) compiles torch in every process it starts
    assert all("--compile-bytecode" in line for line in uv if "uv pip install" in line), uv
    wheel_line = next(i for i, line in enumerate(uv) if "uv pip install" in line and "$(TORCH_WHEEL_DIR)" in line)
    assert wheel_line < next(i for i, line in enumerate(uv) if "-e '.[lab,test]'" in line)
