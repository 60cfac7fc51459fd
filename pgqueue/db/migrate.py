"""Schema migrations, run through alembic with pgqueue's own version table.

The migration scripts live in the repository's top-level ``migrations/`` directory, which the wheel
ships as ``pgqueue/_migrations``.
"""

from __future__ import annotations

import io
import threading
from pathlib import Path
from typing import TextIO

import psycopg
from alembic import command
from alembic.config import Config
from alembic.script import ScriptDirectory

from pgqueue.db.queries import query
from pgqueue.errors import ConfigurationError

SCHEMA = "pgqueue"
# alembic keeps its migration context in module globals: one command at a time per process.
# Across processes, env.py's advisory lock serialises upgrades.
_ALEMBIC_LOCK = threading.RLock()
VERSION_TABLE = "pgqueue_alembic_version"


def migrations_dir() -> Path:
    package_dir = Path(__file__).resolve().parent.parent
    for candidate in (package_dir / "_migrations", package_dir.parent / "migrations"):
        if (candidate / "env.py").exists():
            return candidate
    raise ConfigurationError(f"pgqueue's migrations directory was not found next to {package_dir}")


def alembic_config(dsn: str | None = None, stdout: TextIO | None = None) -> Config:
    config = Config(output_buffer=stdout) if stdout is not None else Config()
    config.set_main_option("script_location", str(migrations_dir()))
    config.attributes["dsn"] = dsn
    return config


def upgrade(dsn: str, revision: str = "head") -> None:
    with _ALEMBIC_LOCK:
        command.upgrade(alembic_config(dsn), revision)


def downgrade(dsn: str, revision: str) -> None:
    with _ALEMBIC_LOCK:
        command.downgrade(alembic_config(dsn), revision)


def upgrade_sql(revision: str = "head", from_revision: str | None = None) -> str:
    """The SQL an upgrade would run, for teams that apply migrations with their own tooling."""
    out = io.StringIO()
    target = f"{from_revision}:{revision}" if from_revision else revision
    with _ALEMBIC_LOCK:
        command.upgrade(alembic_config(None, stdout=out), target, sql=True)
    return out.getvalue()


def head_revision() -> str:
    head = ScriptDirectory.from_config(alembic_config()).get_current_head()
    if head is None:  # pragma: no cover - the project always ships migrations
        raise ConfigurationError("no migrations found")
    return head


def current_revision(dsn: str) -> str | None:
    """The revision the database is at, or None when pgqueue was never installed there."""
    with psycopg.connect(dsn, autocommit=True) as conn:
        exists = conn.execute(query("schema_installed")).fetchone()
        if not exists or not exists[0]:
            return None
        row = conn.execute(query("schema_version")).fetchone()
    return str(row[0]) if row else None
