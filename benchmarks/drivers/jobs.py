"""The bodies of the benchmark's job kinds, shared by every Python driver (``protocol.TASKS``).

Imports psycopg and psycopg_pool only (every driver's environment has both), never pgqueue.

* ``sleep_sync`` / ``sleep_async``: 10 ms of ``time.sleep`` / ``asyncio.sleep`` (I/O-bound);
* ``row``: one row into the application table ``bench_rows`` through the worker process's own
  connection pool (``POOL_SIZE`` connections, opened on first use, one pool per process: a
  forked child opens its own). The DSN comes from ``$BENCH_APP_DSN``.
"""

from __future__ import annotations

import asyncio
import os
import threading
import time
from typing import Any

from benchmarks.drivers.protocol import SLEEP

#: Created by the harness in every system's database (and emptied between workloads).
DDL = """
CREATE TABLE IF NOT EXISTS bench_rows (
    id bigint GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
    written_at timestamptz NOT NULL DEFAULT now(),
    note text NOT NULL
)
"""
INSERT = "INSERT INTO bench_rows (note) VALUES (%s)"
#: Connections per worker process, the same for every system (a process that runs one job at a
#: time, a prefork child, sets ``$BENCH_APP_POOL`` to 1).
POOL_SIZE = 16


def pool_size() -> int:
    return int(os.environ.get("BENCH_APP_POOL", POOL_SIZE))


def sleep_sync() -> None:
    time.sleep(SLEEP)


async def sleep_async() -> None:
    await asyncio.sleep(SLEEP)


class _Pools:
    """One sync and one async pool per process, opened lazily (after any fork)."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._sync: Any = None
        self._async: Any = None
        self._pid = 0
        self._async_lock: asyncio.Lock | None = None

    def sync(self) -> Any:
        if self._sync is None or self._pid != os.getpid():
            with self._lock:
                if self._sync is None or self._pid != os.getpid():
                    from psycopg_pool import ConnectionPool

                    size = pool_size()
                    self._sync = ConnectionPool(
                        os.environ["BENCH_APP_DSN"], min_size=size, max_size=size, open=True
                    )
                    self._pid = os.getpid()
        return self._sync

    async def async_(self) -> Any:
        if self._async is None:
            if self._async_lock is None:
                self._async_lock = asyncio.Lock()
            async with self._async_lock:
                if self._async is None:
                    from psycopg_pool import AsyncConnectionPool

                    size = pool_size()
                    pool = AsyncConnectionPool(
                        os.environ["BENCH_APP_DSN"], min_size=size, max_size=size, open=False
                    )
                    await pool.open()
                    self._async = pool
        return self._async


POOLS = _Pools()


def write_row(note: str = "job") -> None:
    with POOLS.sync().connection() as conn:
        conn.execute(INSERT, (note,))


async def write_row_async(note: str = "job") -> None:
    pool = await POOLS.async_()
    async with pool.connection() as conn:
        await conn.execute(INSERT, (note,))
