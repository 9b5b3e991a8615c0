# The README's two commands: `make demo` (the main job on Fashion-MNIST) and `make test` (lint, types, then the suite's
# default tier: unit and contract tests); `make test-integration` runs the integration tier (pytest marker
# `integration`: end to end, CI runs it after `make test`), `make test-busy` the default tier with both cores of a
# 2-core machine already busy; `make docs` builds the docs, `make test-gpu` runs the GPU tests alone.
# Both create the virtual environment .venv on first use and install the package into it with the
# pinned versions of constraints.txt. Other targets: `make dist` builds the sdist and wheel of learngene-vit and checks
# them with `twine check`; `make check-wheel` installs the wheel in a clean venv and runs `learngene --version` and
# `learngene --help` there; `make check-latest` does that with the
# newest versions pyproject.toml's bounds allow (no pins) and runs the suite's default tier in that venv where any
# differs from constraints.txt; `make lock` rewrites
# constraints.txt with those newest versions.
PYTHON ?= python3
VENV ?= .venv
VENV_WHEEL ?= .venv-wheel
CONSTRAINTS ?= constraints.txt
PY := $(VENV)/bin/python
STAMP := $(VENV)/.installed
DOCS_STAMP := $(VENV)/.installed-docs
PIP_INSTALL = $(PY) -m pip install -q --disable-pip-version-check
# the suite in TEST_WORKERS processes (pytest-xdist), each test module's tests in one of them (their module fixtures
# are built once); 2 suits a 2-core machine. Which tier runs is pyproject.toml's: its addopts select the default tier
# (-m 'not integration'); -m integration selects the other
TEST_WORKERS ?= 2
PYTEST := -m pytest -n $(TEST_WORKERS) --dist loadscope
# the optional extras, installed by `make test` so that their tests run (without them they skip)
EXTRAS := datasets,tensorboard,wandb,slurm,onnx

.PHONY: demo test test-integration test-busy lint test-gpu test-slurm install lock dist check-wheel check-latest fashion-mnist docs docs-install

$(STAMP): pyproject.toml $(CONSTRAINTS)
	$(PYTHON) -m venv $(VENV)
	@# a .venv from before the rename holds this project as "learngene" 0.1.0, whose learngene command would stay behind
	$(PY) -m pip uninstall -y -q --disable-pip-version-check learngene 2>/dev/null || true
	$(PIP_INSTALL) -e ".[test,dev,$(EXTRAS)]" $(if $(CONSTRAINTS),-c $(CONSTRAINTS))
	@$(MAKE) --no-print-directory fashion-mnist
	touch $(STAMP)

install: $(STAMP)

demo: $(STAMP)
	$(PY) -m learngene demo

test: lint
	$(PY) $(PYTEST)

# the integration tier: the CLI end to end in subprocesses, families x methods, compare, torchrun, the demo, the docs'
# runnable blocks; CI runs it after `make test`
test-integration: $(STAMP)
	$(PY) $(PYTEST) -m integration

# the default tier on a machine whose cores are taken: two processes spin (on the 2-core machine, one per core)
# while it runs; they are stopped however the suite ends, and the target exits with the suite's status
test-busy: $(STAMP)
	@$(PY) -c "while True: pass" & one=$$!; $(PY) -c "while True: pass" & two=$$!; \
	  trap 'kill $$one $$two 2>/dev/null' EXIT INT TERM; start=$$(date +%s); \
	  $(PY) $(PYTEST); status=$$?; \
	  echo "test-busy: the default tier beside two spinning processes: exit $$status after $$(( $$(date +%s) - start )) s"; \
	  exit $$status

# ruff (lint, with flake8-bugbear's B rules and McCabe complexity C901 at most 10, and format) and mypy, configured in
# pyproject.toml; `make test` runs it first
lint: $(STAMP)
	$(PY) -m ruff check .
	$(PY) -m ruff format --check .
	$(PY) -m mypy

# only the tests of CUDA-only code paths (tests/test_gpu.py; marker `gpu`): on a machine without CUDA they all skip
test-gpu: $(STAMP)
	$(PY) -m pytest -m gpu

# the Slurm tests alone (tests/test_slurm.py, slow: --runslow), against the cluster `sinfo` finds: start one on this
# machine first with `sudo tools/slurm_cluster.sh start` (.ci/run does); with CI=true a missing cluster fails them
test-slurm: $(STAMP)
	$(PY) -m pytest --runslow tests/test_slurm.py

# the docs site into site/ (mkdocs.yml); --strict: a broken link, a missing reference or a bad docstring fails.
# Offline once the docs extra is installed; tools/gen_docs.py writes the method, CLI and API pages at build time.
$(DOCS_STAMP): $(STAMP)
	$(PIP_INSTALL) -e ".[test,dev,docs,$(EXTRAS)]" $(if $(CONSTRAINTS),-c $(CONSTRAINTS))
	touch $(DOCS_STAMP)

docs-install: $(DOCS_STAMP)

docs: $(DOCS_STAMP)
	NO_MKDOCS_2_WARNING=1 DISABLE_MKDOCS_2_WARNING=true OMP_NUM_THREADS=1 $(PY) -m mkdocs build --strict --site-dir site

fashion-mnist:
	@[ -d /usr/share/datasets/fashion-mnist ] || \
	  { command -v apt-get >/dev/null && [ "$$(id -u)" = 0 ] && \
	    { apt-get install -y -q dataset-fashion-mnist || { apt-get update -q && apt-get install -y -q dataset-fashion-mnist; }; }; } || \
	  echo "note: Fashion-MNIST not found; install it with: sudo apt-get install dataset-fashion-mnist"

lock:
	rm -rf .venv-lock
	$(MAKE) --no-print-directory docs-install VENV=.venv-lock CONSTRAINTS=
	{ echo "# Exact versions behind 'make test' and CI, resolved within pyproject.toml's bounds by 'make lock'"; \
	  echo "# on $$(date -u +%Y-%m-%d) with $$(.venv-lock/bin/python --version) on $$(uname -sm)."; \
	  .venv-lock/bin/python -m pip freeze --exclude-editable --disable-pip-version-check | LC_ALL=C sort -f; } > constraints.txt.tmp
	mv constraints.txt.tmp constraints.txt
	rm -rf .venv-lock

dist: $(STAMP)
	rm -rf dist
	$(PY) -m build --outdir dist .
	$(PY) -m twine check --strict dist/*

# the wheel in a clean venv (its [test] and [onnx] extras too, so the suite and the docs' ONNX lines run there):
# `learngene --version` must print the wheel's name and version, alone (no other "learngene" distribution beside
# it), and `learngene --help` must work
check-wheel: dist
	rm -rf $(VENV_WHEEL)
	$(PYTHON) -m venv $(VENV_WHEEL)
	$(VENV_WHEEL)/bin/python -m pip install -q --disable-pip-version-check "$$(ls dist/*.whl)[test,onnx]" $(if $(CONSTRAINTS),-c $(CONSTRAINTS))
	cd /tmp && version="$$($(CURDIR)/$(VENV_WHEEL)/bin/learngene --version)" && echo "$$version" && \
	  [ "$$version" = "learngene-vit $$(cd $(CURDIR)/dist && ls *.whl | cut -d- -f2)" ]
	cd /tmp && $(CURDIR)/$(VENV_WHEEL)/bin/learngene --help >/dev/null && $(CURDIR)/$(VENV_WHEEL)/bin/learngene methods >/dev/null
	@echo "check-wheel: $$(cd dist && echo *) built; the wheel installs in a clean venv and 'learngene --version' and 'learngene --help' run"

# the suite with the newest versions pyproject.toml's bounds allow, in a fresh venv holding the built wheel; where
# those are every one constraints.txt's pin (tools/pinned_versions.py), `make test` ran the suite on them already,
# and it says so instead of running it again
check-latest:
	$(MAKE) --no-print-directory check-wheel VENV_WHEEL=.venv-latest CONSTRAINTS=
	@if .venv-latest/bin/python tools/pinned_versions.py $(CONSTRAINTS); then \
	  echo "check-latest: the newest versions are $(CONSTRAINTS)'s pins, on which make test runs the default tier: not run again"; \
	else echo "check-latest: the default tier on the newest versions (the lines above: what differs from the pins)"; \
	  .venv-latest/bin/python $(PYTEST); fi
