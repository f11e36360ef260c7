# Developer entry points. `make demo` and `make test` install everything first (CPU torch pinned).
PYTHON ?= python
PIP ?= $(PYTHON) -m pip
export HF_HUB_OFFLINE ?= 1
export TOKENIZERS_PARALLELISM ?= false

.PHONY: install demo test test-slow lint format speed postgres

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

# The PostgreSQL server binaries the run store's tests start on loopback (Debian; as root).
postgres:
	@ls /usr/lib/postgresql/*/bin/initdb >/dev/null 2>&1 || command -v initdb >/dev/null || \
		(apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq postgresql) || \
		echo "postgresql could not be installed: the PostgreSQL tests will skip with the reason"
