# Two entry points on a fresh machine with only Python: `make demo` and `make test`.
PYTHON ?= python3
VENV := .venv
PY := $(VENV)/bin/python
STAMP := $(VENV)/.treeqa-installed

.PHONY: setup demo test lint bench clean

$(STAMP): pyproject.toml
	test -x $(PY) || $(PYTHON) -m venv $(VENV)
	$(PY) -m pip install -q --upgrade pip
	# A plain `torch` requirement would pull a multi-GB CUDA build; take the CPU 2.13.0 first.
	$(PY) -c "import torch" 2>/dev/null || $(PY) -m pip install -q torch==2.13.0
	$(PY) -m pip install -q -e ".[dev]"
	touch $(STAMP)

setup: $(STAMP)

demo: $(STAMP)
	$(PY) -m treeqa train sentiment --out runs/demo --epochs 12
	$(PY) -m treeqa evaluate --checkpoint runs/demo --split test
	$(PY) -m treeqa predict --checkpoint runs/demo --demo-examples

lint: $(STAMP)
	$(VENV)/bin/ruff check src tests benchmarks
	$(VENV)/bin/ruff format --check src tests benchmarks
	$(VENV)/bin/mypy

test: $(STAMP) lint
	$(PY) -m pytest

clean:
	rm -rf runs build dist .pytest_cache .mypy_cache .ruff_cache
