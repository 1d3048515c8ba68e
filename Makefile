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

# The embedded treebank: a bag-of-words baseline, then a Tree-LSTM; compare them on negation.
DEMO_TREE := --model tree_lstm --embed_dim 50 --hidden_dim 50
demo: $(STAMP)
	rm -rf runs/demo-bow runs/demo-tree-lstm  # the demo's own runs; a run directory is never trained over
	$(PY) -m treeqa train sentiment --model bow --epochs 10 --out runs/demo-bow
	$(PY) -m treeqa train sentiment $(DEMO_TREE) --epochs 4 --out runs/demo-tree-lstm
	@echo "== bag of words on the demo test set"
	$(PY) -m treeqa evaluate --checkpoint runs/demo-bow --split test
	@echo "== Tree-LSTM on the demo test set"
	$(PY) -m treeqa evaluate --checkpoint runs/demo-tree-lstm --split test
	@echo "== Tree-LSTM predictions (label of the sentence, then of each phrase)"
	$(PY) -m treeqa predict --checkpoint runs/demo-tree-lstm --demo-examples

lint: $(STAMP)
	$(VENV)/bin/ruff check src tests benchmarks
	$(VENV)/bin/ruff format --check src tests benchmarks
	$(VENV)/bin/mypy

test: $(STAMP) lint
	$(PY) -m pytest

clean:
	rm -rf runs build dist .pytest_cache .mypy_cache .ruff_cache
