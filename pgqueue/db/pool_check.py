"""Checking a pooled connection when it is handed out, without a round trip when nothing changed.

psycopg_pool's ``check_connection`` sends an empty query on every checkout: one more round trip
per enqueue, a third of a single enqueue's time. A connection the server dropped while it sat
in the pool (a restart, a failover, ``pg_terminate_backend``) has something waiting on its
socket: the server's FATAL message and the end of the stream. An idle connection nobody wrote
to has nothing. So the check looks at the socket first (one ``poll`` with no timeout) and only
sends the empty query when something is there, which also reads whatever it was (a notice, a
parameter change) before the caller's statement.
"""

from __future__ import annotations

import select
from typing import Any

import psycopg
from psycopg_pool import AsyncConnectionPool, ConnectionPool


def quiet(conn: psycopg.Connection[Any] | psycopg.AsyncConnection[Any]) -> bool:
    """Nothing has arrived on the connection's socket since its last statement."""
    if conn.closed or conn.broken:
        return False
    try:
        fd = conn.pgconn.socket
    except psycopg.OperationalError:
        return False
    if hasattr(select, "poll"):
        poller = select.poll()
        poller.register(fd, select.POLLIN | select.POLLPRI)
        return not poller.poll(0)
    readable, _, _ = select.select([fd], [], [], 0)  # platforms without poll()
    return not readable


def check(conn: psycopg.Connection[Any]) -> None:
    """The sync pools' ``check``: raises when the connection no longer works."""
    if not quiet(conn):
        ConnectionPool.check_connection(conn)


async def check_async(conn: psycopg.AsyncConnection[Any]) -> None:
    """The async pools' ``check``."""
    if not quiet(conn):
        await AsyncConnectionPool.check_connection(conn)
