# Developer entry points. `make demo` and `make test` install everything first (CPU torch pinned).
PYTHON ?= python
PIP ?= $(PYTHON) -m pip
export HF_HUB_OFFLINE ?= 1
export TOKENIZERS_PARALLELISM ?= false

.PHONY: install demo test test-slow lint format speed

install:
	$(PIP) install torch==2.13.0
	$(PIP) install -e ".[dev]"

demo: install
	dtdr-agents demo

test: install
	$(PYTHON) -m pytest -m "not slow and not benchmark"

test-slow:
	$(PYTHON) -m pytest -m "slow or benchmark"

lint:
	ruff format --check .
	ruff check .
	mypy
	lint-imports

format:
	ruff format .
	ruff check --fix .

speed:
	dtdr-agents speed --n-demos 10000
