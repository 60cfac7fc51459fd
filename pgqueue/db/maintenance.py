"""The statements of the maintenance service, on its own autocommit connection.

``VACUUM`` and ``REINDEX ... CONCURRENTLY`` cannot run inside a transaction block (nor inside a
function, so no ``SECURITY DEFINER`` wrapper can lend them to another role): each runs as a
statement of its own, by a role that owns pgqueue's tables. Table and index names come from the
catalog (view ``pgqueue.bloat``) and are quoted with :class:`psycopg.sql.Identifier`.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from typing import Any

import psycopg
from psycopg import sql

from pgqueue.db.horizon import Horizon, SnapshotHolder
from pgqueue.db.queries import query
from pgqueue.rules.maintenance import Relation

Connection = psycopg.AsyncConnection[Any]
#: A statement run on one relation (:func:`vacuum`, :func:`reindex`, :func:`drop_index`).
Step = Callable[[Connection, str], Awaitable[None]]


async def try_lock(conn: Connection) -> bool:
    """Take the maintainer's session lock (one pass per database at a time); False: another
    session holds it."""
    row = await (await conn.execute(query("maintenance_lock"))).fetchone()
    return bool(row and row[0])


async def unlock(conn: Connection) -> None:
    await conn.execute(query("maintenance_unlock"))


async def set_timeouts(conn: Connection, *, lock_timeout: float, statement_timeout: float) -> None:
    await conn.execute(
        query("maintenance_timeouts"),
        {
            "lock_timeout": f"{round(lock_timeout * 1000)}ms",
            "statement_timeout": f"{round(statement_timeout * 1000)}ms",
        },
    )


async def horizon(conn: Connection) -> Horizon:
    """What holds the horizon now (view ``pgqueue.horizon``)."""
    cur = conn.cursor(row_factory=psycopg.rows.class_row(SnapshotHolder))
    await cur.execute(query("horizon_holders"))
    return Horizon(await cur.fetchall(), [])


async def relations(conn: Connection) -> list[Relation]:
    """Every table and B-tree index of pgqueue with its size and estimate."""
    cur = await conn.execute(query("maintenance_bloat"))
    return [Relation(*row) for row in await cur.fetchall()]


async def leftovers(conn: Connection) -> list[str]:
    """Invalid indexes a failed ``REINDEX CONCURRENTLY`` left behind."""
    cur = await conn.execute(query("maintenance_leftovers"))
    return [row[0] for row in await cur.fetchall()]


async def size(conn: Connection, name: str) -> int:
    cur = await conn.execute(query("maintenance_sizes"), {"name": name})
    row = await cur.fetchone()
    return int(row[0]) if row else 0


async def vacuum(conn: Connection, table: str) -> None:
    await conn.execute(sql.SQL(query("maintenance_vacuum")).format(table=sql.Identifier(table)))


async def reindex(conn: Connection, index: str) -> None:
    await conn.execute(sql.SQL(query("maintenance_reindex")).format(index=sql.Identifier(index)))


async def drop_index(conn: Connection, index: str) -> None:
    statement = sql.SQL(query("maintenance_drop_index")).format(index=sql.Identifier(index))
    await conn.execute(statement)
