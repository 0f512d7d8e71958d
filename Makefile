# edit_lab: every target creates the virtual environment first if it is missing,
# so a fresh clone needs nothing but Python 3.11+ and GNU make.
#
#   make lab        JupyterLab on notebooks/
#   make test       the whole test suite
#   make help       every target
#
# GPU users: pick the torch build before the first install, e.g.
#   make install TORCH_SPEC='torch==2.6.0' TORCH_PIP_ARGS='--index-url <your CUDA wheel index>'
# (to change it later: rm $(VENV)/.installed && make install).

SHELL := bash
.SHELLFLAGS := -eu -o pipefail -c
.DEFAULT_GOAL := help

PYTHON ?= python3
VENV ?= .venv
PY = $(VENV)/bin/python
STAMP = $(VENV)/.installed

# torch is installed on its own, first: a CPU build is enough for the lab, and once
# it is there `pip install -e .` is satisfied and pulls no multi-GB CUDA wheels.
TORCH_SPEC ?= torch==2.13.0
TORCH_PIP_ARGS ?=

LAB_PORT ?= 8888
# Open a browser only where there is a display to show it on.
LAB_BROWSER = $(if $(DISPLAY),,--no-browser)

.PHONY: help install lock upgrade lab demo test test-fast test-ui solutions nbval-refs notebooks site bench tables clean

help: ## list the targets
	@echo "Targets (each creates $(VENV) if it is missing):"
	@grep -E '^[a-zA-Z_-]+:.*## ' $(MAKEFILE_LIST) | sed -E 's/^([a-zA-Z_-]+):.*## (.*)/  make \1\t\2/' | expand -t 20

# The lock (requirements.lock) holds the exact version of every package the lab installs, torch's own
# dependencies included, except torch itself, which TORCH_SPEC pins (a CPU or a CUDA build, the user's choice).
# `make install` installs from it and nothing else, so the lab a class opens next spring is the one the tests
# passed with; pyproject.toml keeps the ranges for people who `pip install` the library into their own
# environment. `make lock` refreshes the lock to the newest packages of the day, on purpose: see `make upgrade`.
LOCK = requirements.lock
LOCK_VENV = .venv-lock
LOCKED = $(PY) -c 'import sys; print(next(l.strip() for l in open("$(LOCK)") if l.startswith(sys.argv[1] + "==")))'

# uv installs what pip would in about a third of pip's time on 2 cores. pip still fetches torch's wheel: it
# knows where a machine keeps its wheels and reads TORCH_PIP_ARGS; uv installs that file, then the lock, then
# the project without resolving anything (--no-deps; setuptools comes from the lock: --no-build-isolation).
# --compile-bytecode as pip does: where Python may not write .pyc files (PYTHONDONTWRITEBYTECODE), every
# process would compile torch again at each import, and the test suite ran 933 s instead of about 650.
# INSTALLER=pip installs with pip alone, from the same lock.
INSTALLER ?= uv
TORCH_WHEEL_DIR = $(VENV)/torch-wheel
UV = $(PY) -m uv pip install --no-cache --compile-bytecode --python $(PY)

# JupyterLab's settings the lab pins (binder/jupyterlab-overrides.json; Binder's postBuild installs the same file):
# widget messages on the kernel's main shell, where the notebook's interrupt reaches a panel's run
# (tests/ui/test_subshells.py).
LAB_OVERRIDES = $(VENV)/share/jupyter/lab/settings/overrides.json

$(STAMP): pyproject.toml $(LOCK) binder/jupyterlab-overrides.json
	@test -x $(PY) || $(PYTHON) -m venv $(VENV)
ifeq ($(INSTALLER),pip)
	$(PY) -m pip install '$(TORCH_SPEC)' $(TORCH_PIP_ARGS)
	$(PY) -m pip install -r $(LOCK)
	$(PY) -m pip install --no-deps --no-build-isolation -e .
else
	$(PY) -m pip install -q "$$($(LOCKED) uv)"
	rm -rf $(TORCH_WHEEL_DIR)
	$(PY) -m pip download -q --no-deps --only-binary :all: -d $(TORCH_WHEEL_DIR) '$(TORCH_SPEC)' $(TORCH_PIP_ARGS)
	$(UV) $(TORCH_WHEEL_DIR)/*.whl
	$(UV) -r $(LOCK)
	$(UV) --no-deps --no-build-isolation -e .
	rm -rf $(TORCH_WHEEL_DIR)
endif
	mkdir -p $(dir $(LAB_OVERRIDES))
	cp binder/jupyterlab-overrides.json $(LAB_OVERRIDES)
	@touch $(STAMP)

install: $(STAMP) ## create the venv and install edit_lab with the lab and test extras

# Refreshing the lock is a step someone takes on purpose and reviews (never something an install does): a fresh
# venv takes the newest packages pyproject.toml allows today, and its `pip freeze` (less torch and the lab) is the
# new lock; the environment files follow it (scripts/lock.py). `make upgrade` then installs it, refreshes the
# nbval references, runs the whole suite and shows what moved.
lock: ## refresh requirements.lock (and the environment files) to today's newest packages; review its diff
	rm -rf $(LOCK_VENV)
	$(PYTHON) -m venv $(LOCK_VENV)
	$(LOCK_VENV)/bin/python -m pip install -q uv
	$(LOCK_VENV)/bin/python -m pip download -q --no-deps --only-binary :all: -d $(LOCK_VENV)/torch-wheel '$(TORCH_SPEC)' $(TORCH_PIP_ARGS)
	$(LOCK_VENV)/bin/python -m uv pip install --no-cache --python $(LOCK_VENV)/bin/python $(LOCK_VENV)/torch-wheel/*.whl
	$(LOCK_VENV)/bin/python -m uv pip install --no-cache --python $(LOCK_VENV)/bin/python -e '.[lab,test]' setuptools
	$(LOCK_VENV)/bin/python -m uv pip freeze --python $(LOCK_VENV)/bin/python --exclude-editable > $(LOCK_VENV)/freeze.txt
	$(PYTHON) scripts/lock.py $(LOCK_VENV)/freeze.txt --torch '$(TORCH_SPEC)'
	rm -rf $(LOCK_VENV)
	git diff --stat -- $(LOCK) environment.yml binder/environment.yml

upgrade: lock ## make lock, then install it, refresh the nbval references, run the suite and show what moved
	rm -f $(STAMP)
	$(MAKE) install nbval-refs
	$(MAKE) test
	git diff --stat

lab: $(STAMP) ## start JupyterLab on notebooks/ (on 127.0.0.1, port LAB_PORT=8888)
	@echo "JupyterLab: http://127.0.0.1:$(LAB_PORT)/lab  (the link with its token is printed below; Ctrl-C stops it)"
	$(VENV)/bin/jupyter lab --ip 127.0.0.1 --port $(LAB_PORT) --ServerApp.root_dir=notebooks $(LAB_BROWSER)

demo: $(STAMP) ## a short real comparison of the methods from the command line, printed as a table
	$(PY) -m edit_lab demo

# Three pytest workers (pytest-xdist) on 2 cores, each running whole test files, the longest first
# (tests/conftest.py): the browser and notebook tests wait on kernels, servers and browsers part of the time.
# On 2026-12-03 a fresh clone's suite took 554 s of pytest on three; four, tried on that day's earlier, longer
# suite, took 709 s where three had taken 658 s on a slightly smaller one (the cores are the limit).
# TEST_WORKERS=0 runs serially.
TEST_WORKERS ?= 3
XDIST = $(if $(filter 0,$(TEST_WORKERS)),,-n $(TEST_WORKERS) --dist loadfile --no-loadscope-reorder)

test: $(STAMP) ## the whole test suite
	$(PY) -m pytest $(XDIST)

test-fast: $(STAMP) ## the unit tests only: the library's (tests/unit) and the course's (tests/course/unit)
	$(PY) -m pytest $(XDIST) tests/unit tests/course/unit

test-ui: $(STAMP) ## the browser tests alone: every notebook (00-09) through JupyterLab, the panels, readability (need chromium)
	$(PY) -m pytest $(XDIST) tests/ui

solutions: $(STAMP) ## every notebook with its answers filled in, run small: every check must pass
	$(PY) -m edit_course.tools.solutions runs/solutions --execute --test-parameters

nbval-refs: $(STAMP) ## refresh the executed references nbval checks the lessons against (tests/nbval/; read their diff)
	$(PY) -m tests.nbval.refresh

notebooks: $(STAMP) ## execute every notebook with its default parameters
	$(PY) -m edit_course.tools.run_notebooks

# The course as a static web site (edit_course/tools/site.py): every notebook executed at its defaults (the runner of
# `make notebooks`, into build/site-notebooks/), then nbconvert's HTML pages, an index and plotly.js, in site/.
# SITE_ARGS='--executed runs/notebooks' builds from `make notebooks`' outputs instead of running them again;
# SITE_REPO_URL (e.g. https://github.com/OWNER/REPO/blob/main) is where links to the repository's files point.
SITE_ARGS ?=
SITE_REPO_URL ?=

site: $(STAMP) ## the executed course as a static web site in site/, to read with no install (README: publishing it)
	$(PY) -m edit_course.tools.site $(if $(SITE_REPO_URL),--repo-url '$(SITE_REPO_URL)') $(SITE_ARGS)

bench: $(STAMP) ## run every CPU benchmark (results in benchmarks/results/)
	$(PY) benchmarks/run_all.py

tables: $(STAMP) ## render docs/benchmarks.md's tables from benchmarks/results/ and check the page against them
	$(PY) benchmarks/render.py
	$(PY) benchmarks/render.py --update docs/benchmarks.md
	$(PY) benchmarks/render.py --check docs/benchmarks.md

clean: ## remove runs/, build/, site/ and caches (keeps the venv)
	rm -rf runs/ .pytest_cache/ build/ dist/ site/
	find . \( -path ./.git -o -path './$(VENV)' \) -prune -o -type d \( -name __pycache__ -o -name .ipynb_checkpoints \) -print0 | xargs -0 rm -rf
