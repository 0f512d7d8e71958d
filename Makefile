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

.PHONY: help install lab demo test test-fast test-ui solutions nbval-refs notebooks bench tables clean

help: ## list the targets
	@echo "Targets (each creates $(VENV) if it is missing):"
	@grep -E '^[a-zA-Z_-]+:.*## ' $(MAKEFILE_LIST) | sed -E 's/^([a-zA-Z_-]+):.*## (.*)/  make \1\t\2/' | expand -t 20

# uv installs what pip would (the same versions, compared once with `pip freeze`) in about 63 s instead of
# about 117 s on 2 cores. pip still fetches torch's wheel: it knows where a machine keeps its wheels and reads
# TORCH_PIP_ARGS; uv installs that file, then the project. --compile-bytecode as pip does: where Python may not
# write .pyc files (PYTHONDONTWRITEBYTECODE), every process would compile torch again at each import, and the
# test suite ran 933 s instead of about 650. INSTALLER=pip installs with pip alone.
INSTALLER ?= uv
TORCH_WHEEL_DIR = $(VENV)/torch-wheel

$(STAMP): pyproject.toml
	@test -x $(PY) || $(PYTHON) -m venv $(VENV)
ifeq ($(INSTALLER),pip)
	$(PY) -m pip install --upgrade pip
	$(PY) -m pip install '$(TORCH_SPEC)' $(TORCH_PIP_ARGS)
	$(PY) -m pip install -e '.[lab,test]'
else
	$(PY) -m pip install -q uv
	rm -rf $(TORCH_WHEEL_DIR)
	$(PY) -m pip download -q --no-deps --only-binary :all: -d $(TORCH_WHEEL_DIR) '$(TORCH_SPEC)' $(TORCH_PIP_ARGS)
	$(PY) -m uv pip install --no-cache --compile-bytecode --python $(PY) $(TORCH_WHEEL_DIR)/*.whl
	$(PY) -m uv pip install --no-cache --compile-bytecode --python $(PY) -e '.[lab,test]'
	rm -rf $(TORCH_WHEEL_DIR)
endif
	@touch $(STAMP)

install: $(STAMP) ## create the venv and install edit_lab with the lab and test extras

lab: $(STAMP) ## start JupyterLab on notebooks/ (on 127.0.0.1, port LAB_PORT=8888)
	@echo "JupyterLab: http://127.0.0.1:$(LAB_PORT)/lab  (the link with its token is printed below; Ctrl-C stops it)"
	$(VENV)/bin/jupyter lab --ip 127.0.0.1 --port $(LAB_PORT) --ServerApp.root_dir=notebooks $(LAB_BROWSER)

demo: $(STAMP) ## a short EDiT run from the command line
	$(PY) -m edit_lab demo

# Two pytest workers (pytest-xdist), each running whole test files, the longest first (tests/conftest.py):
# the browser and notebook tests wait on kernels and servers much of the time. TEST_WORKERS=0 runs serially.
TEST_WORKERS ?= 2
XDIST = $(if $(filter 0,$(TEST_WORKERS)),,-n $(TEST_WORKERS) --dist loadfile --no-loadscope-reorder)

test: $(STAMP) ## the whole test suite
	$(PY) -m pytest $(XDIST)

test-fast: $(STAMP) ## unit tests only
	$(PY) -m pytest $(XDIST) tests/unit

test-ui: $(STAMP) ## the browser tests alone: every notebook (00-08) through JupyterLab, the panels, readability (need chromium)
	$(PY) -m pytest $(XDIST) tests/ui

solutions: $(STAMP) ## every notebook with its answers filled in, run small: every check must pass
	$(PY) -m edit_lab.tools.solutions runs/solutions --execute --test-parameters

nbval-refs: $(STAMP) ## refresh the executed references nbval checks the lessons against (tests/nbval/; read their diff)
	$(PY) -m tests.nbval.refresh

notebooks: $(STAMP) ## execute every notebook with its default parameters
	$(PY) -m edit_lab.tools.run_notebooks

bench: $(STAMP) ## run every CPU benchmark (results in benchmarks/results/)
	$(PY) benchmarks/run_all.py

tables: $(STAMP) ## render docs/benchmarks.md's tables from benchmarks/results/ and check the page against them
	$(PY) benchmarks/render.py
	$(PY) benchmarks/render.py --update docs/benchmarks.md
	$(PY) benchmarks/render.py --check docs/benchmarks.md

clean: ## remove runs/ and caches (keeps the venv)
	rm -rf runs/ .pytest_cache/ build/ dist/
	find . \( -path ./.git -o -path './$(VENV)' \) -prune -o -type d \( -name __pycache__ -o -name .ipynb_checkpoints \) -print0 | xargs -0 rm -rf
