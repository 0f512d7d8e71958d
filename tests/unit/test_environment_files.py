"""The install files must agree with each other, and the lab must be installed from its lock.

requirements.lock is what `make install` (and so `.ci/run`), Binder (through binder/environment.yml) and
conda users (environment.yml) install: one exact version per package, torch aside (TORCH_SPEC pins it).
pyproject.toml keeps the ranges for people who install the library into their own environment. If the files
drift, the lab works for one of them and fails for another, which no other test would notice; if the lock
does not satisfy pyproject, or is not closed under what its packages require, an install from it breaks.
The Makefile and .ci/run are checked for the facts CI relies on: CI runs `make test`, and `make test` runs
pytest after installing a CPU torch, then the lock, then the project.
"""

from __future__ import annotations

import re
import tomllib
from pathlib import Path

import pytest

yaml = pytest.importorskip("yaml")

ROOT = Path(__file__).resolve().parents[2]
ENV_FILES = ["environment.yml", "binder/environment.yml"]

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


LOCK = ROOT / "requirements.lock"


def lock() -> dict[str, str]:
    """{normalised name: version} of requirements.lock."""
    pins = {}
    for line in LOCK.read_text().splitlines():
        line = line.split("#", 1)[0].strip()
        if line:
            name, eq, version = line.partition("==")
            assert eq and version and not re.search(r"[\s;<>~!,]", version), f"not an exact pin: {line!r}"
            pins[normalise(name)] = version
    return pins


def torch_spec() -> str:
    """The Makefile's default TORCH_SPEC (torch==X.Y.Z)."""
    m = re.search(r"^TORCH_SPEC \?= (\S+)$", (ROOT / "Makefile").read_text(), re.M)
    assert m, "no TORCH_SPEC ?= in the Makefile"
    return m.group(1)


def all_pyproject_requirements() -> list[str]:
    project = pyproject()["project"]
    return project["dependencies"] + [r for extra in project["optional-dependencies"].values() for r in extra]


def test_the_lock_pins_every_dependency_of_pyproject_within_its_range() -> None:
    from packaging.requirements import Requirement
    from packaging.version import Version

    pins = lock()
    for text in all_pyproject_requirements():
        req = Requirement(text)
        name = normalise(req.name)
        version = torch_spec().split("==")[1] if name == "torch" else pins.get(name)
        assert version is not None, f"pyproject.toml needs {text!r} and requirements.lock does not pin it: make lock"
        assert req.specifier.contains(Version(version), prereleases=True), \
            f"requirements.lock pins {name}=={version}, outside pyproject.toml's {text!r}: make lock"
    assert "torch" not in pins, "torch is pinned by TORCH_SPEC (a CPU or a CUDA build), not by the lock"
    assert {"uv", "setuptools"} <= set(pins), "make install uses the lock's uv and setuptools"


def test_this_environment_is_the_lock_and_the_lock_is_closed() -> None:
    """Every locked version is the installed one (make install installs from the lock), and every requirement of
    every locked package (and of torch) is met by the lock: an install from it needs no resolver."""
    import importlib.metadata as md

    from packaging.requirements import Requirement
    from packaging.version import Version

    pins = lock()
    installed = {normalise(d.metadata["Name"]): d for d in md.distributions()}
    for name, version in pins.items():
        assert name in installed and installed[name].version == version, \
            f"requirements.lock pins {name}=={version}, this environment has " \
            f"{installed[name].version if name in installed else 'nothing'}: make install"
    available = dict(pins, torch=torch_spec().split("==")[1])
    for name in sorted(available):
        for dep in installed[name].requires or []:
            req = Requirement(dep)
            if req.marker is not None and not req.marker.evaluate({"extra": ""}):
                continue
            dep_name = normalise(req.name)
            assert dep_name in available, f"{name} requires {dep!r}, which requirements.lock does not pin: make lock"
            assert req.specifier.contains(Version(available[dep_name]), prereleases=True), \
                f"{name} requires {dep!r}, requirements.lock pins {dep_name}=={available[dep_name]}"


@pytest.mark.parametrize("path", ENV_FILES)
def test_environment_files_pin_the_lock(path: str) -> None:
    conda, pip = conda_env(path)
    assert sorted(pin(r) for r in pip) == sorted((name, f"=={v}") for name, v in lock().items()), \
        f"{path} is not requirements.lock: make lock writes both"
    assert sorted(normalise(d) for d in conda) == ["pip", "python", "pytorch-cpu"]
    assert "python=3.11" in conda
    assert f"pytorch-cpu={torch_spec().split('==')[1]}" in conda, "conda's CPU torch is TORCH_SPEC's version"


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


def test_make_installs_torch_then_the_lock_then_the_project() -> None:
    """torch first: otherwise a resolver meets `torch>=2.4` and may pull a multi-GB CUDA build. Then the lock,
    then the project with --no-deps: nothing is resolved at install time, every version is the lock's."""
    prerequisites, recipe = make_recipe("$(STAMP)")
    assert "$(LOCK)" in prerequisites.split(), "a changed lock must reinstall"
    branches = [[]]  # the recipe's installers (INSTALLER=pip, the default uv)
    for line in recipe:
        if re.match(r"^(ifeq|ifneq|else|endif)\b", line):
            branches.append([])
        else:
            branches[-1].append(line)
    installers = [b for b in branches if any("-e ." in line for line in b)]
    assert len(installers) == 2, recipe
    for branch in installers:
        order = [next(i for i, line in enumerate(branch) if key in line)
                 for key in ("$(TORCH_SPEC)", "-r $(LOCK)", "-e .")]
        assert order == sorted(order), branch
        project = next(line for line in branch if "-e ." in line)
        assert "--no-deps" in project and "--no-build-isolation" in project, project
    uv = next(b for b in installers if any("$(UV)" in line for line in b))
    assert any("$(LOCKED) uv" in line for line in uv), "uv itself comes from the lock"
    # pip compiles bytecode when it installs, uv only when asked: without it, a machine where Python may not write
    # .pyc files (PYTHONDONTWRITEBYTECODE) compiles torch in every process it starts
    assert "--compile-bytecode" in re.search(r"^UV = (.*)$", (ROOT / "Makefile").read_text(), re.M).group(1)


def test_the_lab_pins_widget_comms_to_the_main_shell() -> None:
    """JupyterLab >= 4.4 may send widget messages to kernel subshells, off the thread the notebook's interrupt
    reaches (tests/ui/test_subshells.py): `make install` and Binder's postBuild install the pinned setting."""
    import json

    pinned = json.loads((ROOT / "binder" / "jupyterlab-overrides.json").read_text())
    assert pinned["@jupyterlab/apputils-extension:kernels-settings"]["commsOverSubshells"] == "disabled"
    _, recipe = make_recipe("$(STAMP)")
    assert any("cp binder/jupyterlab-overrides.json $(LAB_OVERRIDES)" in line for line in recipe), recipe
    assert "share/jupyter/lab/settings/overrides.json" in (ROOT / "Makefile").read_text()
    assert "cp binder/jupyterlab-overrides.json" in (ROOT / "binder" / "postBuild").read_text()
