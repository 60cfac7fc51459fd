# Two entry points (see README): `make demo` runs the demo on an embedded PostgreSQL,
# `make test` runs lint, type checks, the whole test suite and the package check (the built wheel
# installed into a fresh venv, `make package-check`), and prints how long each step took. Both
# create .venv themselves; `make test` also installs the Debian packages its tests need
# (scripts/install-system-deps).
#
# .venv's Python: 3.12 (pyenv's, found by scripts/find-python), the oldest that every test's
# dependencies run on (Django 6 needs 3.12). Without a 3.12, python3, and make says so.
# `make test PYTHON=python3.13` picks another; a .venv made by another Python than this one is
# made anew (see venv-python below).
ifneq ($(origin PYTHON),command line)
PYTHON := $(shell bash scripts/find-python 3.12 2>/dev/null || { \
	echo "make: no Python 3.12 (scripts/find-python 3.12): .venv uses python3, and the tests" \
		"that need 3.12 will fail" >&2; echo python3; })
endif
VENV ?= .venv
BIN := $(VENV)/bin
# The other supported Pythons, each in its own .venv-X.Y with pyenv's interpreter
# (scripts/find-python); `make test-versions` runs VERSION_TESTS on each of them, where
# `make test` runs everything on $(PYTHON).
EXTRA_PYTHONS ?= 3.11 3.13
VERSION_TESTS ?= tests/unit tests/integration/test_enqueue.py tests/integration/test_worker_basic.py
# Unit tests that check the repository's text, not how pgqueue runs (the query names the code
# passes, found by reading it; the sync twins against their async sources, as `make lint` does):
# they run on $(PYTHON) only (a tenth of test-versions' CPU time on each extra Python).
VERSION_SAME := tests/unit/test_query_names.py tests/unit/test_sync_twins.py
# The suite runs in parallel (pytest-xdist): PYTEST_WORKERS processes, each with an embedded
# PostgreSQL of its own (tests/conftest.py). More processes than cores pays: most tests wait on
# real worker processes, sleeps and the server. Against one server of yours
# (PGQUEUE_TEST_DSN) it runs serially: the tests make roles and fixed-name databases that
# parallel sessions on one server would share. PYTEST_WORKERS=0 runs serially anyway.
PYTEST_WORKERS ?= $(if $(PGQUEUE_TEST_DSN),0,4)
# --dist loadfile: each test module on one xdist worker, so a module-scoped fixture (a worker
# process started for the module, module_dsn) is made once, and the chaos scenarios (one module,
# each scenario a fleet near the machine's capacity) run one after another. tests/scheduling.py
# hands the modules out costliest first (xdist's own order is by number of tests) and each doc
# page on its own. --max-worker-restart 0: a worker that crashes (a segfault) ends the run,
# failed; replaced, it left this xdist's loadfile scheduler waiting for ever, every worker idle.
XDIST_ARGS = -n $(PYTEST_WORKERS) $(if $(filter 0,$(PYTEST_WORKERS)),,--dist loadfile --max-worker-restart 0)
TEST_STEPS := lint typecheck pytest last-checks
# What `make test`'s last step also runs beside the docs and the package check (.ci/run adds
# test-versions: the other Pythons' tests, which otherwise ran after everything else).
TEST_ALSO ?=

.PHONY: demo test lint typecheck pytest last-checks system-deps test-versions package-check cli-docs api-docs schema \
	docs bench compare chaos clean venv-python venvs

# The venvs are made by uv (from PyPI, installed once into .uv/): a dev install takes it seconds
# where pip took one to three minutes, which was the largest fixed cost of a CI run. --seed puts
# pip in each venv too (the benchmarks install their peers with it). --compile-bytecode: uv
# (unlike pip) writes no .pyc by default, and where PYTHONDONTWRITEBYTECODE is set (CI) no
# Python process writes them either: every `pgq`, worker and manage.py the tests start would
# compile psycopg, typer, rich, Django... from source again (a third of a second of CPU or more
# each, over a thousand processes a run).
UV := .uv/bin/uv
UV_INSTALL := $(UV) pip install --quiet --compile-bytecode
$(UV):
	$(PYTHON) -m venv .uv
	.uv/bin/pip install --quiet uv
	touch $@

$(BIN)/.installed: pyproject.toml $(UV) | venv-python
	test -x $(BIN)/python || $(UV) venv --quiet --seed --python $(PYTHON) $(VENV)
	$(UV_INSTALL) --python $(BIN)/python -e '.[dev]'
	touch $@

# Every venv `make test` and `make test-versions` use, made side by side (`make -j3 venvs`, as
# .ci/run does: mostly waiting on pip, so in parallel they take little longer than one).
venvs: $(BIN)/.installed $(patsubst %,.venv-%/.installed,$(EXTRA_PYTHONS))

demo: $(BIN)/.installed
	$(BIN)/pgq demo

# A .venv made by another Python than $(PYTHON) (say, one left from when 3.11 was the default)
# is removed, so that the rule above makes it anew rather than go on using the old one.
venv-python:
	@want="$$($(PYTHON) -c 'import sys; print(sys.version)')" || exit 1; \
	have="$$($(BIN)/python -c 'import sys; print(sys.version)' 2>/dev/null)"; \
	if [ -e $(VENV) ] && [ "$$want" != "$$have" ]; then \
		echo "$(VENV) is Python $${have%% *}, not $${want%% *} ($(PYTHON)): making it anew"; \
		rm -rf $(VENV); \
	fi

# Each step in turn, stopping at the first that fails, then how long each took.
test:
	@start=$$(date +%s); times=""; \
	for step in $(TEST_STEPS); do \
		began=$$(date +%s); \
		$(MAKE) --no-print-directory PYTHON="$(PYTHON)" $$step || { \
			echo "make test: $$step failed after $$(( $$(date +%s) - start )) s"; exit 1; }; \
		times="$$times $$step $$(( $$(date +%s) - began )) s,"; \
	done; \
	echo "make test: passed in $$(( $$(date +%s) - start )) s ($${times# })" | sed 's/,)$$/)/'

# The docs build, the package check and TEST_ALSO side by side, after the suite: none needs
# another, and each mostly waits (on pip, on the built wheel's install, on its own servers),
# so together they take little longer than the longest.
last-checks:
	$(MAKE) --no-print-directory -j3 --output-sync PYTHON="$(PYTHON)" docs package-check $(TEST_ALSO)

# The sync twins generated from their async sources (scripts/async_to_sync.py) are up to date,
# then ruff.
lint: $(BIN)/.installed
	$(BIN)/python -m scripts.async_to_sync --check
	$(BIN)/ruff check .
	$(BIN)/ruff format --check .

# The sync twins written anew from their async sources (the `# sync-twin:` marks in pgqueue/;
# docs/development.md): run after editing an async source; `make lint` fails while one is stale.
.PHONY: sync-twins
sync-twins: $(BIN)/.installed
	$(BIN)/python -m scripts.async_to_sync

typecheck: $(BIN)/.installed
	$(BIN)/mypy

# --durations: the slowest tests listed at the end, to keep an eye on CI's time.
pytest: $(BIN)/.installed system-deps
	$(BIN)/python -m compileall -q -j0 $(OWN_CODE)
	PATH="$(CURDIR)/$(BIN):$$PATH" $(BIN)/pytest $(XDIST_ARGS) --durations=15 $(PYTEST_ARGS)

# The project's own modules, compiled before a test run for the same reason as the venvs'
# (--compile-bytecode above): the processes the tests start import them from the tree.
OWN_CODE := pgqueue tests benchmarks scripts migrations

# PostgreSQL 15 with pg_cron, PgBouncer, Chromium: a no-op once they are installed.
system-deps:
	bash scripts/install-system-deps

test-versions: $(addprefix test-python-,$(EXTRA_PYTHONS))

test-python-%: .venv-%/.installed
	.venv-$*/bin/python -m compileall -q -j0 $(OWN_CODE)
	PATH="$(CURDIR)/.venv-$*/bin:$$PATH" .venv-$*/bin/pytest -q -p no:cacheprovider \
		-x $(XDIST_ARGS) $(VERSION_TESTS) $(addprefix --ignore=,$(VERSION_SAME))

# Kept between runs (make would delete a stamp only a pattern rule names).
.PRECIOUS: .venv-%/.installed
.venv-%/.installed: pyproject.toml $(UV)
	test -x .venv-$*/bin/python || { python="$$(bash scripts/find-python $*)" && \
		$(UV) venv --quiet --seed --python "$$python" .venv-$*; }
	$(UV_INSTALL) --python .venv-$*/bin/python -e '.[dev]'
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

# docs/reference/{api,django,alembic}.md from the docstrings (tests/unit/test_api_reference.py
# fails while one is stale).
api-docs: $(BIN)/.installed
	$(BIN)/python -m scripts.api_reference

bench: $(BIN)/.installed
	$(BIN)/python -m benchmarks.enqueue

# The fault-injection scenarios at full size (tens of minutes; the suite runs them small), each
# on a private server: CHAOS_ARGS="--only sigkill,burst" for some of them.
chaos: $(BIN)/.installed
	$(BIN)/python -m benchmarks.chaos $(CHAOS_ARGS)

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
	rm -rf $(VENV) .venv-*/ .uv .mypy_cache .ruff_cache .pytest_cache site
