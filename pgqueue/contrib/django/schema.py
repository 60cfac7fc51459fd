"""pgqueue's schema through a Django connection: pgqueue's own alembic migrations, rendered as
SQL and run in Django's transaction (alembic's engine would roll that transaction back when it
first connects, so it does not touch Django's connection)."""

from __future__ import annotations

from typing import Any

from pgqueue.db import migrate
from pgqueue.db.queries import query


def revision(connection: Any) -> str | None:
    """The revision pgqueue's schema is at on this Django connection, or None (not installed)."""
    with connection.cursor() as cur:
        cur.execute(query("schema_installed"))
        installed = cur.fetchone()
        if not installed or not installed[0]:
            return None
        cur.execute(query("schema_version"))
        row = cur.fetchone()
    return str(row[0]) if row else None


def upgrade(connection: Any, target: str = "head") -> str | None:
    """Upgrade to ``target`` in the connection's current transaction; returns the revision
    upgraded from (None: nothing to do, or not installed before)."""
    current = revision(connection)
    wanted = migrate.head_revision() if target == "head" else target
    if current == wanted:
        return current
    sql = migrate.upgrade_sql(wanted, current, transaction=False)
    with connection.cursor() as cur:
        cur.execute(sql)
    return current


def downgrade(connection: Any, target: str = "base") -> None:
    """Downgrade to ``target`` (``"base"``: remove pgqueue's tables) in the current transaction."""
    current = revision(connection)
    if current is None:
        return
    sql = migrate.downgrade_sql(target, current, transaction=False)
    with connection.cursor() as cur:
        cur.execute(sql)
