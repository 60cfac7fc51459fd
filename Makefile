# Two entry points (see README): `make demo` runs the demo on an embedded PostgreSQL,
# `make test` runs lint, type checks and the whole test suite. Both create .venv themselves.
PYTHON ?= python3
VENV ?= .venv
BIN := $(VENV)/bin

.PHONY: demo test lint typecheck pytest bench compare clean

$(BIN)/.installed: pyproject.toml
	$(PYTHON) -m venv $(VENV)
	$(BIN)/pip install --quiet --upgrade pip
	$(BIN)/pip install --quiet -e '.[dev]'
	touch $@

demo: $(BIN)/.installed
	$(BIN)/pgq demo

test: lint typecheck pytest

lint: $(BIN)/.installed
	$(BIN)/ruff check .
	$(BIN)/ruff format --check .

typecheck: $(BIN)/.installed
	$(BIN)/mypy

pytest: $(BIN)/.installed
	PATH="$(CURDIR)/$(BIN):$$PATH" $(BIN)/pytest $(PYTEST_ARGS)

bench: $(BIN)/.installed
	$(BIN)/python -m benchmarks.enqueue

# Side by side with the peers (installs them into benchmarks/.peers-venv on first use).
compare: $(BIN)/.installed
	$(BIN)/python -m benchmarks.compare $(COMPARE_ARGS)

clean:
	rm -rf $(VENV) .mypy_cache .ruff_cache .pytest_cache
