"""Alembic environment for pgqueue's own schema.

pgqueue keeps its own version table (``pgqueue.pgqueue_alembic_version``) so it coexists with an
application's alembic history in the same database. Every way of running it takes pgqueue's
advisory migration lock first, so several migrations may start at once (a deploy's migrate job,
starting workers, an application's alembic revision calling ``pgqueue.alembic.upgrade(op)``) and
each sees what the one before committed.

``config.attributes`` (set by :mod:`pgqueue.db.migrate`) says how to run:

- ``connection``: a SQLAlchemy connection in the caller's transaction (an application's alembic
  revision). Migrate there under a transaction-level lock and commit nothing: the caller's
  transaction decides, so a later failure in it rolls pgqueue's schema back too.
- ``dsn``: connect, lock for the session, migrate in one transaction and commit.
  ``lock_timeout`` bounds lock waits (set when called from inside another alembic migration).
- offline (``--sql``): ``transaction`` (default True) wraps the SQL in BEGIN/COMMIT.
"""

from __future__ import annotations

from typing import Any

import psycopg
from alembic import context
from sqlalchemy import Connection, create_engine, text
from sqlalchemy.pool import NullPool

from pgqueue.db.migrate import MIGRATION_LOCK_KEY, SCHEMA, VERSION_TABLE

config = context.config


def _configure(transactional_ddl: bool = True, **kwargs: Any) -> None:
    context.configure(
        version_table=VERSION_TABLE,
        version_table_schema=SCHEMA,
        transactional_ddl=transactional_ddl,
        **kwargs,
    )


def run_offline() -> None:
    # Without a transaction of its own the SQL is pasted into someone else's (an application's
    # revision), where a COMMIT would commit theirs half-way.
    own_transaction = bool(config.attributes.get("transaction", True))
    _configure(
        transactional_ddl=own_transaction,
        url="postgresql://",
        literal_binds=True,
        dialect_opts={"paramstyle": "named"},
    )
    with context.begin_transaction():
        # Held until the enclosing transaction ends: an online `pgq migrate` started meanwhile
        # waits, then finds the schema current.
        context.execute(f"SELECT pg_advisory_xact_lock({MIGRATION_LOCK_KEY})")
        # The version table lives in our schema, so the schema must exist before alembic
        # creates that table.
        context.execute(f"CREATE SCHEMA IF NOT EXISTS {SCHEMA}")
        context.run_migrations()


def run_on_callers_connection(connection: Connection) -> None:
    # A transaction-level lock: released when the caller's transaction commits or rolls back, so
    # a concurrent `pgq migrate` never sees half of it.
    connection.execute(text("SELECT pg_advisory_xact_lock(:key)"), {"key": MIGRATION_LOCK_KEY})
    connection.execute(text(f"CREATE SCHEMA IF NOT EXISTS {SCHEMA}"))
    # The connection is in a transaction now (autobegin), which alembic takes as the caller's:
    # it runs the migrations in it and neither begins nor commits one.
    _configure(connection=connection)
    with context.begin_transaction():
        context.run_migrations()


def run_online(dsn: str) -> None:
    engine = create_engine(
        "postgresql+psycopg://", creator=lambda: psycopg.connect(dsn), poolclass=NullPool
    )
    with engine.connect() as connection:
        lock_timeout = config.attributes.get("lock_timeout")
        if lock_timeout:
            connection.execute(
                text("SELECT set_config('lock_timeout', :timeout, false)"),
                {"timeout": lock_timeout},
            )
        connection.execute(text("SELECT pg_advisory_lock(:key)"), {"key": MIGRATION_LOCK_KEY})
        try:
            connection.execute(text(f"CREATE SCHEMA IF NOT EXISTS {SCHEMA}"))
            connection.commit()
            _configure(connection=connection)
            with context.begin_transaction():
                context.run_migrations()
            connection.commit()
        finally:
            # After a failed migration the transaction is aborted; the unlock needs a new one.
            connection.rollback()
            connection.execute(text("SELECT pg_advisory_unlock(:key)"), {"key": MIGRATION_LOCK_KEY})
            connection.commit()


if context.is_offline_mode():
    run_offline()
elif config.attributes.get("connection") is not None:
    run_on_callers_connection(config.attributes["connection"])
else:
    run_online(config.attributes["dsn"])
