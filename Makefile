# The README's two commands: `make demo` (the main job on Fashion-MNIST) and `make test`.
# Both create the virtual environment .venv on first use and install the package into it with the
# pinned versions of constraints.txt. Other targets: `make lock` refreshes constraints.txt with the newest
# versions pyproject.toml's bounds allow; `make check-latest` runs the suite with those newest versions in a
# fresh venv without the pins; `make dist` builds the sdist and wheel and checks the wheel in a clean venv.
PYTHON ?= python3
VENV ?= .venv
CONSTRAINTS ?= constraints.txt
PY := $(VENV)/bin/python
STAMP := $(VENV)/.installed
PIP_INSTALL = $(PY) -m pip install -q --disable-pip-version-check

.PHONY: demo test install lock check-latest dist fashion-mnist

$(STAMP): pyproject.toml $(CONSTRAINTS)
	$(PYTHON) -m venv $(VENV)
	$(PIP_INSTALL) -e ".[test,dev]" $(if $(CONSTRAINTS),-c $(CONSTRAINTS))
	@$(MAKE) --no-print-directory fashion-mnist
	touch $(STAMP)

install: $(STAMP)

demo: $(STAMP)
	$(PY) -m learngene demo

test: $(STAMP)
	$(PY) -m pytest

fashion-mnist:
	@[ -d /usr/share/datasets/fashion-mnist ] || \
	  { command -v apt-get >/dev/null && [ "$$(id -u)" = 0 ] && \
	    { apt-get install -y -q dataset-fashion-mnist || { apt-get update -q && apt-get install -y -q dataset-fashion-mnist; }; }; } || \
	  echo "note: Fashion-MNIST not found; install it with: sudo apt-get install dataset-fashion-mnist"

lock:
	rm -rf .venv-lock
	$(MAKE) --no-print-directory install VENV=.venv-lock CONSTRAINTS=
	{ echo "# Exact versions behind 'make test' and CI, resolved within pyproject.toml's bounds by 'make lock'"; \
	  echo "# on $$(date -u +%Y-%m-%d) with $$(.venv-lock/bin/python --version) on $$(uname -sm)."; \
	  .venv-lock/bin/python -m pip freeze --exclude-editable --disable-pip-version-check | LC_ALL=C sort -f; } > constraints.txt.tmp
	mv constraints.txt.tmp constraints.txt
	rm -rf .venv-lock

check-latest:
	rm -rf .venv-latest
	$(MAKE) --no-print-directory test VENV=.venv-latest CONSTRAINTS=

dist: $(STAMP)
	rm -rf dist .venv-wheel
	$(PY) -m build --outdir dist .
	$(PYTHON) -m venv .venv-wheel
	.venv-wheel/bin/python -m pip install -q --disable-pip-version-check dist/*.whl -c $(CONSTRAINTS)
	cd /tmp && $(CURDIR)/.venv-wheel/bin/learngene --help >/dev/null && $(CURDIR)/.venv-wheel/bin/learngene methods >/dev/null
	@echo "dist: $$(ls dist) built; the wheel installs in a clean venv and 'learngene --help' runs"
	rm -rf .venv-wheel
