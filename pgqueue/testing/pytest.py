"""pytest fixtures for an application that uses pgqueue. Load the plugin explicitly, on the
command line (``pytest -p pgqueue.testing.pytest``), in the ini file (``addopts = -p
pgqueue.testing.pytest``) or in the root ``conftest.py`` (``pytest_plugins =
["pgqueue.testing.pytest"]``). It is not loaded by itself: a project that does not ask for it
pays nothing and sees no fixture of its.

Settings (ini file, or the environment):

* ``pgqueue_dsn`` (else ``$PGQUEUE_TEST_DSN``, ``$PGQUEUE_DSN``, ``$DATABASE_URL``, else the
  embedded server when installed): a server where the tests may create databases, given as a
  DSN of a database there that they connect to for that.
* ``pgqueue_app``: the application's queue, ``module:attribute`` as for ``pgq work``
  (``myapp.tasks:pgq``); the ``pgq`` fixture points it at the test's database.

Fixtures:

* ``pgqueue_db``: the DSN of a database of its own for each test, with pgqueue's schema at
  head. The schema is migrated once per session into a template database; each test's database
  is a copy of it (``CREATE DATABASE ... TEMPLATE``), dropped after the test. A copy rather than
  one database rolled back after each test: the code under test commits (its own transactions,
  a drain's acks, a handler's ``ctx.transaction()``), exactly as in production.
* ``pgq``: the application's queue (``pgqueue_app``) bound to ``pgqueue_db`` for the test
  (:func:`pgqueue.testing.bind`), or a new :class:`~pgqueue.PgQueue` on it when no app is set.
"""

from __future__ import annotations

import importlib
import itertools
import os
from collections.abc import Iterator

import psycopg
import pytest
from psycopg import sql
from psycopg.conninfo import make_conninfo

from pgqueue.client import PgQueue
from pgqueue.db import migrate
from pgqueue.db.embedded import resolve_dsn
from pgqueue.errors import ConfigurationError
from pgqueue.testing.bind import bind

_ENVIRONMENT = ("PGQUEUE_TEST_DSN", "PGQUEUE_DSN", "DATABASE_URL")
_counter = itertools.count()


def pytest_addoption(parser: pytest.Parser) -> None:
    parser.addini(
        "pgqueue_dsn",
        "PostgreSQL server (a DSN) where pgqueue's fixtures create each test's database "
        f"(default: ${', $'.join(_ENVIRONMENT)}, else the embedded server)",
    )
    parser.addini(
        "pgqueue_app", "the application's PgQueue, module:attribute (the pgq fixture binds it)"
    )


class Databases:
    """The server the tests' databases are made on, and the session's migrated template."""

    def __init__(self, dsn: str) -> None:
        self.dsn = dsn
        with psycopg.connect(dsn, autocommit=True) as conn:
            self.version = conn.info.server_version
        self.template = f"pgqueue_template_{os.getpid()}"
        self.create(self.template)
        migrate.upgrade(self.dsn_for(self.template))

    def dsn_for(self, name: str) -> str:
        return make_conninfo(self.dsn, dbname=name)

    def create(self, name: str, template: str | None = None) -> str:
        with psycopg.connect(self.dsn, autocommit=True) as conn:
            self._drop(conn, name)
            statement = sql.SQL("CREATE DATABASE {}").format(sql.Identifier(name))
            if template is not None:
                # FILE_COPY (PostgreSQL 15+): much faster than the WAL-logged copy for a
                # small database.
                statement += sql.SQL(" TEMPLATE {}").format(sql.Identifier(template))
                if self.version >= 150000:
                    statement += sql.SQL(" STRATEGY FILE_COPY")
            conn.execute(statement)
        return self.dsn_for(name)

    def drop(self, name: str) -> None:
        with psycopg.connect(self.dsn, autocommit=True) as conn:
            self._drop(conn, name)

    def _drop(self, conn: psycopg.Connection[object], name: str) -> None:
        force = sql.SQL(" WITH (FORCE)" if self.version >= 130000 else "")
        conn.execute(sql.SQL("DROP DATABASE IF EXISTS {}{}").format(sql.Identifier(name), force))


def _server_dsn(config: pytest.Config) -> str:
    configured = str(config.getini("pgqueue_dsn") or "")
    for name in _ENVIRONMENT:
        configured = configured or os.environ.get(name, "")
    return resolve_dsn(configured or None)


@pytest.fixture(scope="session")
def pgqueue_databases(pytestconfig: pytest.Config) -> Iterator[Databases]:
    """The server and the session's migrated template (see the module docstring)."""
    databases = Databases(_server_dsn(pytestconfig))
    yield databases
    databases.drop(databases.template)


@pytest.fixture
def pgqueue_db(pgqueue_databases: Databases) -> Iterator[str]:
    """The DSN of a database of the test's own, pgqueue's schema at head."""
    name = f"pgqueue_test_{os.getpid()}_{next(_counter)}"
    yield pgqueue_databases.create(name, template=pgqueue_databases.template)
    pgqueue_databases.drop(name)


def load_app(spec: str) -> PgQueue:
    """The PgQueue named ``module:attribute``, with one line naming what is wrong."""
    module_name, _, attribute = spec.partition(":")
    if not module_name or not attribute:
        raise ConfigurationError(
            f"pgqueue_app must be module:attribute (myapp.tasks:pgq), got {spec!r}"
        )
    module = importlib.import_module(module_name)
    app = getattr(module, attribute, None)
    if app is None:
        raise ConfigurationError(f"pgqueue_app: {module_name} has no attribute {attribute!r}")
    if not isinstance(app, PgQueue):
        raise ConfigurationError(
            f"pgqueue_app: {spec} is not a PgQueue (it is a {type(app).__name__})"
        )
    return app


@pytest.fixture
def pgq(pytestconfig: pytest.Config, pgqueue_db: str) -> Iterator[PgQueue]:
    """The application's queue (``pgqueue_app``) on the test's database, or a new one."""
    spec = str(pytestconfig.getini("pgqueue_app") or "")
    if not spec:
        queue = PgQueue(pgqueue_db)
        try:
            yield queue
        finally:
            queue.close()
        return
    with bind(load_app(spec), pgqueue_db) as app:
        yield app
