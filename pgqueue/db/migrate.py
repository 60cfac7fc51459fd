"""Schema migrations, run through alembic with pgqueue's own version table.

The migration scripts live in the repository's top-level ``migrations/`` directory, which the wheel
ships as ``pgqueue/_migrations``. They run three ways, all under pgqueue's advisory migration lock
and all keeping pgqueue's version table current:

- on a connection of their own, committed when done (:func:`upgrade`: ``pgq migrate``,
  ``PgQueue.migrate()``);
- on the caller's connection, inside the caller's transaction, committing nothing
  (:func:`upgrade_on`: ``pgqueue.alembic.upgrade(op)`` in an application's alembic revision);
- as SQL (:func:`upgrade_sql`), with BEGIN/COMMIT or without (to paste into a migration that has
  a transaction of its own).

Function and view definitions are not written in the revisions: each version of each lives in a
file of its own under ``migrations/sql/`` (``functions/claim/0010.sql``), which the revisions that
create or restore it include with a ``\\i`` line (:func:`sql_script`). So a body is written once,
however many revisions (and downgrades) load it, and the newest file of a function is its current
body.

alembic and SQLAlchemy are imported inside the functions that use them: only migrating needs them,
so importing pgqueue does not have to.
"""

from __future__ import annotations

import io
import re
import threading
from collections.abc import Iterator
from contextlib import contextmanager
from typing import TYPE_CHECKING, Any, Literal

import psycopg
from psycopg.rows import scalar_row

from pgqueue.db.queries import query
from pgqueue.db.schema_check import migrations_dir
from pgqueue.errors import ConfigurationError, PgQueueError

if TYPE_CHECKING:
    from typing import TextIO

    from alembic.config import Config
    from alembic.script import ScriptDirectory
    from sqlalchemy.engine import Connection

SCHEMA = "pgqueue"
VERSION_TABLE = "pgqueue_alembic_version"
# Any constant works; it only has to differ from the application's own advisory locks.
MIGRATION_LOCK_KEY = 0x70677175  # "pgqu"
# How long a migration started from inside another alembic migration (PgQueue.migrate() in an
# application's revision) waits for a lock before giving up: see _run_own.
NESTED_LOCK_TIMEOUT = "30s"

# alembic keeps its migration context in module globals: one command at a time per process.
# Across processes, env.py's advisory lock serialises upgrades.
_ALEMBIC_LOCK = threading.RLock()

Direction = Literal["upgrade", "downgrade"]

#: A line of a revision's SQL that stands for a file under ``migrations/sql/``, written as psql's
#: include command: ``\\i functions/claim/0010.sql``.
_INCLUDE = re.compile(r"^\\i (?P<path>[a-z0-9_]+(?:/[a-z0-9_]+)*\.sql)$", re.MULTILINE)


def sql_script(text: str) -> str:
    """A revision's SQL with each ``\\i <path>`` line replaced by that file of ``migrations/sql/``
    (a function's or a view's definition as of one revision), so online and offline (``--sql``)
    migrations run the same statements."""
    root = migrations_dir() / "sql"

    def include(match: re.Match[str]) -> str:
        path = root / match.group("path")
        try:
            return path.read_text(encoding="utf-8").rstrip("\n")
        except FileNotFoundError:
            raise ConfigurationError(f"a migration includes {path}, which does not exist") from None

    return _INCLUDE.sub(include, text)


def alembic_config(dsn: str | None = None, stdout: TextIO | None = None) -> Config:
    from alembic.config import Config

    config = Config(output_buffer=stdout) if stdout is not None else Config()
    config.set_main_option("script_location", str(migrations_dir()))
    config.attributes["dsn"] = dsn
    return config


def alembic_script() -> ScriptDirectory:
    """pgqueue's revisions."""
    from alembic.script import ScriptDirectory

    return ScriptDirectory.from_config(alembic_config())


def upgrade(dsn: str, revision: str = "head") -> None:
    """Upgrade on a connection of its own, in one transaction committed at the end."""
    _run_own(dsn, "upgrade", revision)


def downgrade(dsn: str, revision: str) -> None:
    _run_own(dsn, "downgrade", revision)


def upgrade_on(connection: Connection, revision: str = "head") -> None:
    """Upgrade on ``connection`` in its current transaction and commit nothing: the caller's
    transaction decides (an application's alembic revision: ``pgqueue.alembic.upgrade(op)``)."""
    _run_on(connection, "upgrade", revision)


def downgrade_on(connection: Connection, revision: str) -> None:
    _run_on(connection, "downgrade", revision)


def upgrade_sql(
    revision: str = "head", from_revision: str | None = None, *, transaction: bool = True
) -> str:
    """The SQL an upgrade would run, for teams that apply migrations with their own tooling.

    ``from_revision`` is where the database is (None: pgqueue is not installed there).
    ``transaction=False`` leaves out BEGIN/COMMIT, for pasting into a migration that runs in a
    transaction of its own (an application's alembic revision), where a COMMIT would commit that
    transaction half-way.
    """
    target = f"{from_revision}:{revision}" if from_revision else revision
    return _sql("upgrade", target, transaction)


def downgrade_sql(revision: str, from_revision: str, *, transaction: bool = True) -> str:
    """The SQL a downgrade from ``from_revision`` to ``revision`` would run (see upgrade_sql)."""
    return _sql("downgrade", f"{from_revision}:{revision}", transaction)


def head_revision() -> str:
    head = alembic_script().get_current_head()
    if head is None:  # pragma: no cover - the project always ships migrations
        raise ConfigurationError("no migrations found")
    return head


def current_revision(dsn: str) -> str | None:
    """The revision the database is at, or None when pgqueue was never installed there."""
    with (
        psycopg.connect(dsn, autocommit=True) as conn,
        conn.cursor(row_factory=scalar_row) as cur,
    ):
        if not cur.execute(query("schema_installed")).fetchone():
            return None
        version = cur.execute(query("schema_version")).fetchone()
    return None if version is None else str(version)


def describe_error(exc: BaseException) -> str | None:
    """One line saying why a migration failed (server unreachable, bad DSN, missing privilege, a
    failed statement, an unknown revision, any :class:`~pgqueue.PgQueueError`), or None when
    ``exc`` is not such an error.

    For command lines: alembic reports database errors as SQLAlchemy's, whose text carries the
    whole failed statement (a migration's is hundreds of lines) and whose traceback runs through
    alembic and SQLAlchemy; the person running ``pgq migrate`` needs the server's message.
    """
    from alembic.util import CommandError
    from sqlalchemy.exc import DBAPIError

    if isinstance(exc, DBAPIError) and isinstance(exc.orig, psycopg.Error):
        exc = exc.orig
    if not isinstance(exc, psycopg.Error | CommandError | PgQueueError):
        return None
    # psycopg's messages span lines (the server's hint, the statement's position).
    return " ".join(str(exc).split())


def _run_own(dsn: str, direction: Direction, revision: str) -> None:
    config = alembic_config(dsn)
    nested = any(proxy is not None for proxy in _alembic_proxies())
    if nested:
        # This runs beside the enclosing migration's open transaction, on a connection of its
        # own. When that transaction holds a lock this one needs (pgqueue.alembic.upgrade(op)
        # earlier in the same revision holds the migration lock; writing to pgqueue's tables
        # holds theirs), waiting would never end: give up after a while instead.
        config.attributes["lock_timeout"] = NESTED_LOCK_TIMEOUT
    try:
        _run(config, direction, revision)
    except Exception as exc:
        if nested and _is_lock_timeout(exc):
            raise ConfigurationError(
                "pgqueue's migration waited in vain for a lock held by the alembic migration it "
                "was called from; inside an alembic revision call pgqueue.alembic.upgrade(op), "
                "which runs pgqueue's migrations in that revision's transaction"
            ) from exc
        raise


def _run_on(connection: Connection, direction: Direction, revision: str) -> None:
    config = alembic_config()
    config.attributes["connection"] = connection
    _run(config, direction, revision)


def _run(config: Config, direction: Direction, revision: str) -> None:
    from alembic import command

    with _ALEMBIC_LOCK, _keep_enclosing_alembic_context():
        if direction == "upgrade":
            command.upgrade(config, revision)
        else:
            command.downgrade(config, revision)


def _sql(direction: Direction, target: str, transaction: bool) -> str:
    from alembic import command

    out = io.StringIO()
    config = alembic_config(stdout=out)
    config.attributes["transaction"] = transaction
    with _ALEMBIC_LOCK, _keep_enclosing_alembic_context():
        if direction == "upgrade":
            command.upgrade(config, target, sql=True)
        else:
            command.downgrade(config, target, sql=True)
    return out.getvalue()


def _alembic_proxies() -> list[Any]:
    """What alembic's ``context`` and ``op`` point at now (None: no command is running)."""
    import alembic.context
    import alembic.op

    return [getattr(module, "_proxy", None) for module in (alembic.context, alembic.op)]


@contextmanager
def _keep_enclosing_alembic_context() -> Iterator[None]:
    """Run an alembic command inside another one (an application's revision) without breaking
    the outer one.

    ``from alembic import context, op`` are module-level proxies: a command installs its own
    objects there and on the way out removes them, deleting ``context.config`` and the rest, so
    the enclosing revision's next ``op`` call met None and its env.py a ``KeyError: 'config'``.
    Put back whatever was installed before.
    """
    enclosing = [proxy for proxy in _alembic_proxies() if proxy is not None]
    try:
        yield
    finally:
        for proxy in enclosing:
            proxy._install_proxy()


def _is_lock_timeout(exc: BaseException) -> bool:
    from sqlalchemy.exc import DBAPIError

    return isinstance(exc, DBAPIError) and isinstance(exc.orig, psycopg.errors.LockNotAvailable)
