# The two commands of the README: `make demo` (main job on Fashion-MNIST) and `make test`.
PY ?= python3
STAMP := .installed

.PHONY: demo test install

$(STAMP): pyproject.toml
	$(PY) -m pip install -e ".[test]"
	@[ -d /usr/share/datasets/fashion-mnist ] || \
	  { command -v apt-get >/dev/null && [ "$$(id -u)" = 0 ] && \
	    { apt-get install -y dataset-fashion-mnist || { apt-get update && apt-get install -y dataset-fashion-mnist; }; }; } || \
	  echo "note: Fashion-MNIST not found; install it with: sudo apt-get install dataset-fashion-mnist"
	touch $(STAMP)

install: $(STAMP)

demo: $(STAMP)
	$(PY) -m learngene demo

test: $(STAMP)
	$(PY) -m pytest
