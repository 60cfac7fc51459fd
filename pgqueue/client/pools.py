"""The client's connections: its pools (or the application's), the DSN, plans driven on them.

A sync pool, one async pool per event loop (an async pool belongs to the loop that opened it;
the connection each of the client's own pools last gave back kept for its next call,
:mod:`pgqueue.client.kept`), and one results listener per loop
(:mod:`pgqueue.db.results_listener`). With ``conn=`` a plan runs on the caller's connection, in
the caller's transaction, and never commits; without it, on a pooled autocommit connection.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import threading
import weakref
from collections.abc import AsyncIterator, Callable, Iterator
from contextlib import asynccontextmanager, contextmanager
from types import TracebackType
from typing import Any, TypeAlias, TypeVar

import psycopg
from psycopg_pool import AsyncConnectionPool, ConnectionPool, PoolTimeout

from pgqueue.client import forks, kept
from pgqueue.db import connections, pool_check, refusals, schema_check, startup
from pgqueue.db import plan as plans
from pgqueue.db.async_wait import LeanWaits
from pgqueue.db.embedded import resolve_dsn
from pgqueue.db.liveness import dead_peer_checked
from pgqueue.db.results_listener import ResultListener
from pgqueue.errors import ConfigurationError, PgQueueError, QueueFullError
from pgqueue.rules import config
from pgqueue.rules.log_actions import Action, fields

Connection: TypeAlias = psycopg.Connection[Any]
AsyncConnection: TypeAlias = psycopg.AsyncConnection[Any]
T = TypeVar("T")
log = logging.getLogger("pgqueue.client")


#: How long an enqueue waits for a connection (psycopg_pool's default), also while PostgreSQL
#: refuses new ones (max_connections or the role's CONNECT LIMIT reached, starting up).
CONNECT_TIMEOUT = 30.0


class Pools:
    """Where a :class:`~pgqueue.PgQueue` gets its connections (see the module docstring)."""

    def __init__(
        self,
        dsn: str | Callable[[], str] | None,
        *,
        pool_size: int,
        prepare: bool,
        pool: ConnectionPool | AsyncConnectionPool | None,
    ) -> None:
        if pool is not None and not isinstance(pool, ConnectionPool | AsyncConnectionPool):
            raise ConfigurationError(
                "pool must be a psycopg_pool ConnectionPool or AsyncConnectionPool, got "
                f"{type(pool).__name__}"
            )
        # A shared pool's database is the queue's, unless a DSN says otherwise (workers, the
        # results listener and the other kind of pool connect with the DSN).
        shared_dsn = pool.conninfo if pool is not None else None
        # A callable DSN is read when the queue first connects (a framework's settings may
        # change after the queue was made at import time: a test runner's test database).
        self._dsn_source = dsn if callable(dsn) else None
        self._dsn = (
            None
            if callable(dsn)
            else config.configured_dsn(dsn or (shared_dsn if isinstance(shared_dsn, str) else None))
        )
        self.size = pool_size
        # What the pools' connections last failed with (a pool timeout hides it).
        self._connect_failures = refusals.ConnectFailures("client's connection pool")
        self._translated = _Translated(self._connect_failures)
        # Server-side prepared statements break behind a transaction-pooling PgBouncer older
        # than 1.21 (statements prepared on one server connection, run on another).
        self.conn_kwargs: dict[str, Any] = {"autocommit": True}
        if not prepare:
            self.conn_kwargs["prepare_threshold"] = None
        self._lock = threading.RLock()
        # The schema's revision was found right (checked once: by the probe that opens a pool
        # of ours, or on the first connection of the application's own pool).
        self._checked = False
        # The application's own pools (PgQueue(pool=...)) are used, never closed, by pgqueue.
        self._shared_pool = pool if isinstance(pool, ConnectionPool) else None
        self._shared_async_pool = pool if isinstance(pool, AsyncConnectionPool) else None
        self._pool: ConnectionPool | None = self._shared_pool
        self._async_pools: weakref.WeakKeyDictionary[
            asyncio.AbstractEventLoop, AsyncConnectionPool
        ] = weakref.WeakKeyDictionary()
        self._opening: weakref.WeakKeyDictionary[
            asyncio.AbstractEventLoop, asyncio.Task[AsyncConnectionPool]
        ] = weakref.WeakKeyDictionary()
        # Per loop, the task that closes its pool and listener when the loop ends.
        self._closers: weakref.WeakKeyDictionary[asyncio.AbstractEventLoop, asyncio.Task[None]] = (
            weakref.WeakKeyDictionary()
        )
        self._listeners: weakref.WeakKeyDictionary[
            asyncio.AbstractEventLoop, asyncio.Task[ResultListener]
        ] = weakref.WeakKeyDictionary()
        forks.track(self)

    def forget_after_fork(self) -> None:
        """In a child just forked: the pools, listeners and the lock are the parent's
        (:mod:`pgqueue.client.forks`); the next call opens the child's own. An application's
        pool (``PgQueue(pool=...)``) stays: forking it is the application's to handle."""
        if self._pool is not self._shared_pool:
            forks.inherited(self._pool)
        forks.inherited(dict(self._async_pools), dict(self._listeners), dict(self._opening))
        forks.inherited(dict(self._closers))
        self._lock = threading.RLock()
        self._pool = self._shared_pool
        self._async_pools = weakref.WeakKeyDictionary()
        self._opening = weakref.WeakKeyDictionary()
        self._closers = weakref.WeakKeyDictionary()
        self._listeners = weakref.WeakKeyDictionary()

    @property
    def dsn(self) -> str:
        """The DSN in use (starts the embedded server when none is configured)."""
        if self._dsn is None:
            with self._lock:
                if self._dsn is None:
                    source = self._dsn_source
                    self._dsn = source() if source is not None else resolve_dsn(None)
        return self._dsn

    def _open_pool(self) -> ConnectionPool:
        if self._pool is None:
            with self._lock:
                if self._pool is None:
                    # Fail fast with the server's own message (a pool would retry silently
                    # until its timeout and then say only that it timed out); but wait out a
                    # server refusing connections for now (all slots taken, starting up).
                    # The same connection checks the schema's revision, once.
                    startup.check_database(self.dsn, wait=CONNECT_TIMEOUT)
                    self._checked = True
                    # Autocommit: a single-statement enqueue is one round trip (no BEGIN and
                    # COMMIT around it); multi-statement plans open a transaction themselves.
                    pool = ConnectionPool(
                        dead_peer_checked(self.dsn),  # (pgqueue.db.liveness)
                        min_size=1,
                        max_size=self.size,
                        kwargs=self.conn_kwargs,
                        open=False,
                        name="pgqueue-client",
                        connection_class=self._connect_failures.sync_connection_class(),
                        timeout=CONNECT_TIMEOUT,
                        # A connection the server dropped (a restart, a failover) is found
                        # and replaced when handed out, not by the enqueue that uses it
                        # (a round trip only when something arrived on its socket).
                        check=pool_check.check,
                    )
                    pool.open(wait=True)
                    kept.attach(pool)
                    self._pool = pool
        return self._pool

    def _loop_pool(self) -> AsyncConnectionPool | None:
        """The running loop's async pool if it is open (or the application's), else None."""
        if self._shared_async_pool is not None:
            return self._shared_async_pool
        return self._async_pools.get(asyncio.get_running_loop())

    async def _open_pool_async(self) -> AsyncConnectionPool:
        pool = self._loop_pool()
        if pool is not None:
            return pool
        loop = asyncio.get_running_loop()
        # Calls made while the first one opens the pool wait for the same one (each made a
        # pool of its own before, all but one left open and unused).
        opening = self._opening.get(loop)
        if opening is None:
            opening = loop.create_task(self._make_pool_async(loop), name="pgqueue-pool-open")
            self._opening[loop] = opening
        try:
            return await asyncio.shield(opening)
        finally:
            if opening.done() and self._opening.get(loop) is opening:
                del self._opening[loop]  # made, or failed: the next call tries again

    async def _make_pool_async(self, loop: asyncio.AbstractEventLoop) -> AsyncConnectionPool:
        dsn = await asyncio.to_thread(lambda: self.dsn)
        await startup.check_database_async(dsn, wait=CONNECT_TIMEOUT)  # as for the sync pool
        self._checked = True
        pool = AsyncConnectionPool(
            dead_peer_checked(dsn),  # (pgqueue.db.liveness)
            min_size=1,
            max_size=self.size,
            kwargs=self.conn_kwargs,
            open=False,
            name="pgqueue-client-async",
            # Its waits for an answer arm no timer and keep the socket watched by the loop
            # between statements (pgqueue.db.async_wait).
            connection_class=self._connect_failures.async_connection_class(LeanWaits),
            timeout=CONNECT_TIMEOUT,
            check=pool_check.check_async,  # as for the sync pool
        )
        await pool.open(wait=True)
        kept.attach(pool)
        self._async_pools[loop] = pool
        self._close_with(loop)
        return pool

    def _close_with(self, loop: asyncio.AbstractEventLoop) -> None:
        """Have what the client opens on ``loop`` closed when the loop ends (one task a loop)."""
        closer = self._closers.get(loop)
        if closer is None or closer.done():
            self._closers[loop] = loop.create_task(
                self._close_when_loop_ends(loop), name="pgqueue-loop-closer"
            )

    async def _close_when_loop_ends(self, loop: asyncio.AbstractEventLoop) -> None:
        """Wait until cancelled, then close what this loop opened. ``asyncio.run`` cancels
        the tasks left when its coroutine returns and runs the loop until they end: without
        this, a client used from one ``asyncio.run`` after another kept every ended loop's
        pool and listener (their connections, and the loop) for the life of the process."""
        try:
            await loop.create_future()  # never done
        except asyncio.CancelledError:
            await self._close_loop(loop, ending=True)
            raise
        finally:
            # (The task holds its loop: kept in the map, it would keep the loop alive. No new
            # one is made for the loop while this one runs. Also reached, with no loop
            # running, when a loop closed without cancelling its tasks drops this one.)
            self._closers.pop(loop, None)

    # psycopg_pool's connection() is getconn() and putconn() around two more context
    # managers, one of them the connection's own (a commit, empty on an autocommit
    # connection, waited for all the same): about a tenth of an async single enqueue's client
    # CPU. The client takes and gives back its connections itself, doing what that context
    # manager does only for an application's pool whose connections are not autocommit.

    # sync-twin: async source
    @asynccontextmanager
    async def connection_async(self, conn: object | None = None) -> AsyncIterator[AsyncConnection]:
        """The psycopg connection behind ``conn``, or a pooled autocommit connection."""
        if conn is not None:
            yield await connections.async_driver(conn)
            return
        with self._translated:
            pool = await self._open_pool_async()
            pooled = await self._checkout_async(pool)
            failed = True
            try:
                yield pooled
                failed = False
            finally:
                await self._checkin_async(pool, pooled, failed=failed)

    async def run_async(
        self, plan: plans.Plan[T], conn: object | None = None, *, atomic: bool = False
    ) -> T:
        """Drive a plan on ``conn`` or a pooled connection (see :meth:`PgQueue.run`).

        A pooled connection is taken and given back here, not through :meth:`connection_async`
        (a generator made and driven per call: a few microseconds of every single enqueue)."""
        try:  # (what ``with self._translated`` does, without its two calls per statement)
            if conn is not None:
                c = await connections.async_driver(conn)
                if atomic:
                    async with connections.atomic_async(c):
                        return await plans.run_async(plan, c, foreign=True, guard=False)
                return await plans.run_async(plan, c, foreign=True)
            # The common call (pool open, kept connection quiet) makes no coroutine here, and
            # goes through none of psycopg_pool's code.
            if True:  # ASYNC
                pool = self._loop_pool()
                if pool is None:
                    pool = await self._open_pool_async()
            else:
                pool = self._pool
                if pool is None:
                    pool = self._open_pool()
            pooled = kept.quiet(pool)
            if pooled is None:
                pooled = await self._checkout_async(pool)
            failed = True
            try:
                if atomic and pooled.autocommit:
                    async with connections.atomic_async(pooled):
                        result = await plans.run_async(plan, pooled, guard=False, held=True)
                else:
                    result = await plans.run_async(plan, pooled, held=True)
                failed = False
            finally:
                if failed or not kept.keep(pool, pooled):
                    await self._checkin_async(pool, pooled, failed=failed)
            return result
        except psycopg.Error as exc:
            self._translated.raise_for(exc)
            raise

    async def _checkout_async(self, pool: AsyncConnectionPool) -> AsyncConnection:
        """A pooled connection; the schema's revision checked on the first one."""
        pooled = await kept.kept_or_pooled_async(pool)
        if not self._checked:
            try:
                await plans.run_async(schema_check.check(), pooled)
            except BaseException:
                await pool.putconn(pooled)
                raise
            self._checked = True
        return pooled

    async def _checkin_async(
        self, pool: AsyncConnectionPool, pooled: AsyncConnection, *, failed: bool
    ) -> None:
        """Give a connection back: one not in autocommit (an application's pool) commits
        its transaction, or rolls it back after an error, as psycopg's ``with conn`` does."""
        try:
            if not pooled.autocommit and not pooled.closed:
                if not failed:
                    await pooled.commit()
                else:
                    try:
                        await pooled.rollback()
                    except Exception as exc:  # the error on its way out is the one to see
                        log.warning(
                            "rollback of a pooled connection failed",
                            extra=fields(Action.POOL_ROLLBACK_FAILED, error=str(exc)),
                        )
        finally:
            await kept.give_back_async(pool, pooled)

    # sync-twin: generated from the async source above by `make sync-twins`; do not edit

    @contextmanager
    def connection(self, conn: object | None = None) -> Iterator[Connection]:
        """The psycopg connection behind ``conn``, or a pooled autocommit connection."""
        if conn is not None:
            yield connections.sync_driver(conn)
            return
        with self._translated:
            pool = self._open_pool()
            pooled = self._checkout(pool)
            failed = True
            try:
                yield pooled
                failed = False
            finally:
                self._checkin(pool, pooled, failed=failed)

    def run(self, plan: plans.Plan[T], conn: object | None = None, *, atomic: bool = False) -> T:
        """Drive a plan on ``conn`` or a pooled connection (see :meth:`PgQueue.run`).

        A pooled connection is taken and given back here, not through :meth:`connection`
        (a generator made and driven per call: a few microseconds of every single enqueue)."""
        try:  # (what ``with self._translated`` does, without its two calls per statement)
            if conn is not None:
                c = connections.sync_driver(conn)
                if atomic:
                    with connections.atomic(c):
                        return plans.run(plan, c, foreign=True, guard=False)
                return plans.run(plan, c, foreign=True)
            # The common call (pool open, kept connection quiet) makes no coroutine here, and
            # goes through none of psycopg_pool's code.
            pool = self._pool
            if pool is None:
                pool = self._open_pool()
            pooled = kept.quiet(pool)
            if pooled is None:
                pooled = self._checkout(pool)
            failed = True
            try:
                if atomic and pooled.autocommit:
                    with connections.atomic(pooled):
                        result = plans.run(plan, pooled, guard=False, held=True)
                else:
                    result = plans.run(plan, pooled, held=True)
                failed = False
            finally:
                if failed or not kept.keep(pool, pooled):
                    self._checkin(pool, pooled, failed=failed)
            return result
        except psycopg.Error as exc:
            self._translated.raise_for(exc)
            raise

    def _checkout(self, pool: ConnectionPool) -> Connection:
        """A pooled connection; the schema's revision checked on the first one."""
        pooled = kept.kept_or_pooled(pool)
        if not self._checked:
            try:
                plans.run(schema_check.check(), pooled)
            except BaseException:
                pool.putconn(pooled)
                raise
            self._checked = True
        return pooled

    def _checkin(self, pool: ConnectionPool, pooled: Connection, *, failed: bool) -> None:
        """Give a connection back: one not in autocommit (an application's pool) commits
        its transaction, or rolls it back after an error, as psycopg's ``with conn`` does."""
        try:
            if not pooled.autocommit and not pooled.closed:
                if not failed:
                    pooled.commit()
                else:
                    try:
                        pooled.rollback()
                    except Exception as exc:  # the error on its way out is the one to see
                        log.warning(
                            "rollback of a pooled connection failed",
                            extra=fields(Action.POOL_ROLLBACK_FAILED, error=str(exc)),
                        )
        finally:
            kept.give_back(pool, pooled)

    # sync-twin: end

    async def results_listener(self) -> ResultListener:
        """The LISTEN connection shared by this loop's ``result_async`` calls (the first call
        starts it; calls made meanwhile wait for the same one)."""
        loop = asyncio.get_running_loop()
        starting = self._listeners.get(loop)
        if starting is None:
            starting = loop.create_task(self._start_listener(), name="pgqueue-results-start")
            self._listeners[loop] = starting
        try:
            return await asyncio.shield(starting)
        except psycopg.Error:
            if self._listeners.get(loop) is starting:
                del self._listeners[loop]  # the next call tries again
            raise

    async def _start_listener(self) -> ResultListener:
        dsn = await asyncio.to_thread(lambda: self.dsn)
        listener = ResultListener(dsn, self.conn_kwargs)
        await listener.start()
        self._close_with(asyncio.get_running_loop())
        return listener

    def close(self) -> None:
        """Close the sync pool, unless it is the application's."""
        pool, self._pool = self._pool, self._shared_pool
        if pool is not None and pool is not self._shared_pool:
            pool.close()
            last = kept.release(pool)  # (after the pool closed: nothing is kept for it again)
            if last is not None:
                pool.putconn(last)  # a closed pool closes what it gets back

    async def aclose(self) -> None:
        """Close the pools and this loop's results listener."""
        self.close()
        loop = asyncio.get_running_loop()
        await self._close_loop(loop)
        # Nothing is left for the loop's end to close: its closer ends now (a loop closed
        # without cancelling its tasks would drop it pending, and say so).
        closer = self._closers.pop(loop, None)
        if closer is not None and closer is not asyncio.current_task():
            closer.cancel()
            await asyncio.gather(closer, return_exceptions=True)

    async def _close_loop(self, loop: asyncio.AbstractEventLoop, *, ending: bool = False) -> None:
        """Close ``loop``'s async pool (unless it is the application's) and listener.
        ``ending``: the loop is ending, its tasks cancelled (the pool's own among them)."""
        starting = self._listeners.pop(loop, None)
        if starting is not None:
            listener = await asyncio.gather(starting, return_exceptions=True)
            if isinstance(listener[0], ResultListener):
                await listener[0].close()
        pool = self._async_pools.pop(loop, None)
        if pool is None:
            return
        last = kept.release(pool)
        if not ending:
            if last is not None:
                await pool.putconn(last)
            await pool.close()
            return
        # psycopg_pool's close() waits for its worker tasks, which the ending loop cancelled
        # too: it raises their cancellation before closing its idle connections. So they are
        # taken first (its deque of idle connections: if a later psycopg_pool keeps them
        # elsewhere, they are left to the process's end, as before) and closed here.
        idle = [last] if last is not None else []
        idle.extend(getattr(pool, "_pool", ()))
        with contextlib.suppress(asyncio.CancelledError):
            await pool.close(timeout=0)
        for conn in idle:
            if not conn.closed:
                await conn.close()


class _Translated:
    """What a pooled connection's errors (and ``conn=``'s) become, one context manager made
    once per client (no generator per call):

    - "relation pgqueue.jobs does not exist" (or a column, function or type an older schema
      lacks): an error that says what to do. On ``conn=`` this is all there is: the start-up
      check of the schema's revision runs on the client's own connections only;
    - a full queue (SQLSTATE PGQ01): :class:`QueueFullError`;
    - a pool timeout: why no connection came, the last failure to connect.
    """

    __slots__ = ("_failures",)

    def __init__(self, failures: refusals.ConnectFailures) -> None:
        self._failures = failures

    def __enter__(self) -> None:
        return None

    def __exit__(
        self, kind: type[BaseException] | None, exc: BaseException | None, _: TracebackType | None
    ) -> None:
        if exc is not None and isinstance(exc, psycopg.Error):  # (PoolTimeout is one)
            self.raise_for(exc)

    def raise_for(self, exc: psycopg.Error) -> None:
        """Raise what ``exc`` becomes, if it becomes something else."""
        if isinstance(exc, PoolTimeout):
            explained = self._failures.explain(exc)
            if explained != str(exc):
                raise PoolTimeout(explained) from exc
        elif isinstance(exc, _MISSING_SCHEMA):
            if "pgqueue" in str(exc) or isinstance(exc, psycopg.errors.UndefinedColumn):
                raise PgQueueError(
                    f"pgqueue's schema is not installed in this database, or is older than "
                    f"this pgqueue needs (revision {schema_check.package_revision()}): "
                    f"{exc.diag.message_primary}; run `pgq migrate`"
                ) from exc
        elif isinstance(exc, psycopg.DatabaseError):
            full = QueueFullError.from_database(exc)
            if full is not None:
                raise full from exc


_MISSING_SCHEMA = (
    psycopg.errors.UndefinedTable,
    psycopg.errors.UndefinedFunction,
    psycopg.errors.InvalidSchemaName,
    psycopg.errors.UndefinedColumn,
    psycopg.errors.UndefinedObject,  # a type an older schema lacks (pgqueue.job_input)
)
