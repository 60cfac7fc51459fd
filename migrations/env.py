"""Alembic environment for pgqueue's own schema.

pgqueue keeps its own version table (``pgqueue.pgqueue_alembic_version``) so it coexists with an
application's alembic history in the same database. Online upgrades hold an advisory lock, so
several processes (a deploy's migrate job and starting workers) may run ``pgq migrate`` at once.
"""

from __future__ import annotations

from typing import Any

import psycopg
from alembic import context
from sqlalchemy import create_engine, text
from sqlalchemy.pool import NullPool

SCHEMA = "pgqueue"
VERSION_TABLE = "pgqueue_alembic_version"
# Any constant works; it only has to differ from the application's own advisory locks.
MIGRATION_LOCK_KEY = 0x70677175  # "pgqu"

config = context.config


def _configure(**kwargs: Any) -> None:
    context.configure(
        version_table=VERSION_TABLE,
        version_table_schema=SCHEMA,
        transactional_ddl=True,
        **kwargs,
    )


def run_offline() -> None:
    _configure(url="postgresql://", literal_binds=True, dialect_opts={"paramstyle": "named"})
    with context.begin_transaction():
        # The version table lives in our schema, so the schema must exist before alembic
        # creates that table.
        context.execute(f"CREATE SCHEMA IF NOT EXISTS {SCHEMA}")
        context.run_migrations()


def run_online() -> None:
    dsn = config.attributes["dsn"]
    engine = create_engine(
        "postgresql+psycopg://", creator=lambda: psycopg.connect(dsn), poolclass=NullPool
    )
    with engine.connect() as connection:
        connection.execute(text("SELECT pg_advisory_lock(:key)"), {"key": MIGRATION_LOCK_KEY})
        try:
            connection.execute(text(f"CREATE SCHEMA IF NOT EXISTS {SCHEMA}"))
            connection.commit()
            _configure(connection=connection)
            with context.begin_transaction():
                context.run_migrations()
            connection.commit()
        finally:
            connection.execute(text("SELECT pg_advisory_unlock(:key)"), {"key": MIGRATION_LOCK_KEY})
            connection.commit()


if context.is_offline_mode():
    run_offline()
else:
    run_online()
