"""The worker's side of handlers' ``ctx.transaction()`` blocks
(:mod:`pgqueue.handler.job_transaction`).

The worker keeps a pool of connections for these blocks apart from its own (a handler's
transaction may stay open as long as the handler likes; the services' statements must never
wait for a connection behind one): a sync pool for handlers in threads and an async one for
``async def`` handlers, each opened on first use, up to ``size`` connections (the worker's
slots unless ``--transaction-connections`` says otherwise). An async block on an event loop
other than the worker's (Django runs an async task on asgiref's loop in a handler thread) gets
a connection of its own instead: a pool serves only its own loop. They name the worker in
``application_name``, as its own connections do. A child process of ``--pool process`` keeps a
connection of its own (:class:`~pgqueue.worker.child_transactions.ChildTransactions`).
"""

from __future__ import annotations

import asyncio
import threading
from collections.abc import AsyncIterator, Callable, Iterator
from contextlib import asynccontextmanager, contextmanager
from typing import Any

import psycopg
from psycopg_pool import AsyncConnectionPool, ConnectionPool

from pgqueue.db import pool_check
from pgqueue.db.refusals import ConnectFailures
from pgqueue.handler.job_context import ClaimedJob
from pgqueue.handler.job_transaction import TransactionHost

#: How long a block waits for a connection of the pool (all taken by other handlers' blocks).
POOL_TIMEOUT = 30.0


def connection_kwargs(application_name: str | None, prepare: bool) -> dict[str, Any]:
    kwargs: dict[str, Any] = {"autocommit": True}
    if application_name is not None:
        kwargs["application_name"] = application_name
    if not prepare:
        kwargs["prepare_threshold"] = None
    return kwargs


class WorkerTransactions(TransactionHost):
    #: The worker catches a handler's JobParked and its completer parks the job.
    parks_jobs = True

    def __init__(
        self,
        dsn: str,
        *,
        size: int,
        prepare: bool,
        application_name: str | None,
        max_result_bytes: int,
        wake: Callable[[ClaimedJob], list[str] | None] | None = None,
        unsettled: Callable[[ClaimedJob], bool] | None = None,
    ) -> None:
        super().__init__(
            dsn,
            application_name=application_name,
            max_result_bytes=max_result_bytes,
            prepare=prepare,
        )
        self.size = size
        self.kwargs = connection_kwargs(application_name, prepare)
        self._wake = wake
        self._unsettled = unsettled
        self._lock = threading.Lock()
        self._pool: ConnectionPool | None = None
        self._async_pool: AsyncConnectionPool | None = None
        self._async_opening: asyncio.Lock | None = None
        # The worker's event loop (made in Worker.run): the async pool lives on it.
        self._loop = _running_loop()
        # Reconnecting quickly after an outage, as the worker's own pool does (psycopg_pool's
        # own backoff would leave handlers waiting long after the database is back).
        self._failures = ConnectFailures("handlers' transaction pool")

    def wake(self, job: ClaimedJob) -> list[str] | None:
        return None if self._wake is None else self._wake(job)

    def claim_unsettled(self, job: ClaimedJob) -> bool:
        return self._unsettled is not None and self._unsettled(job)

    def _options(self) -> dict[str, Any]:
        return {
            "min_size": 0,
            "max_size": self.size,
            "kwargs": self.kwargs,
            "open": False,
            "timeout": POOL_TIMEOUT,
            "name": "pgqueue-transactions",
        }

    @contextmanager
    def connection(self) -> Iterator[psycopg.Connection[Any]]:
        pool = self._pool
        if pool is None:
            with self._lock:
                if self._pool is None:
                    pool = ConnectionPool(
                        self.dsn,
                        check=pool_check.check,
                        connection_class=self._failures.sync_connection_class(),
                        **self._options(),
                    )
                    pool.open()
                    self._pool = pool
                pool = self._pool
        with pool.connection() as conn:
            yield conn

    @asynccontextmanager
    async def connection_async(self) -> AsyncIterator[psycopg.AsyncConnection[Any]]:
        if self._loop is not None and asyncio.get_running_loop() is not self._loop:
            # An async handler run on an event loop of its own in a handler thread (Django runs
            # an async task inside asgiref's async_to_sync): a pool serves the loop it was
            # opened on only, and the worker's lives on the worker's loop. A connection of the
            # block's own, closed with it.
            async with await psycopg.AsyncConnection.connect(
                self.dsn, connect_timeout=10, **self.kwargs
            ) as conn:
                yield conn
            return
        pool = self._async_pool
        if pool is None:
            if self._async_opening is None:
                self._async_opening = asyncio.Lock()
            async with self._async_opening:
                if self._async_pool is None:
                    pool = AsyncConnectionPool(
                        self.dsn,
                        check=pool_check.check_async,
                        connection_class=self._failures.async_connection_class(),
                        **self._options(),
                    )
                    await pool.open()
                    self._async_pool = pool
                pool = self._async_pool
        async with pool.connection() as conn:
            yield conn

    async def close(self) -> None:
        """At the worker's end, once no handler runs (an abandoned thread still in a block
        gets an error from the closed pool: its attempt already failed)."""
        async_pool, self._async_pool = self._async_pool, None
        if async_pool is not None:
            await async_pool.close(timeout=5)
        pool, self._pool = self._pool, None
        if pool is not None:
            await asyncio.to_thread(pool.close, 5)


def _running_loop() -> asyncio.AbstractEventLoop | None:
    try:
        return asyncio.get_running_loop()
    except RuntimeError:
        return None
