"""The worker's database access: a small autocommit pool and one call to run a named query.

Autocommit matters: every worker statement (claim, heartbeat, ack) is a transaction on its own,
so each costs exactly one round trip, with no BEGIN/COMMIT around it and no row locks held
between statements.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import os
import sys
from collections.abc import Callable, Coroutine, Mapping, Sequence
from operator import itemgetter
from typing import Any, Protocol, TypeVar, cast

import psycopg
from psycopg.conninfo import conninfo_to_dict
from psycopg.rows import BaseRowFactory, RowMaker, tuple_row
from psycopg_pool import AsyncConnectionPool

from pgqueue.db import plan as plans
from pgqueue.db.plan import Plan, Query
from pgqueue.db.queries import query
from pgqueue.db.refusals import ConnectFailures
from pgqueue.handler.job_context import CLAIMED_COLUMNS
from pgqueue.worker import loaders
from pgqueue.worker.array_params import with_array_literals

log = logging.getLogger("pgqueue.worker.store")

Row = tuple[Any, ...]
T = TypeVar("T")

#: A claim_flow row: the job's columns, then claim_flow's own two.
FLOW_CLAIM_COLUMNS = (*CLAIMED_COLUMNS, "throttled", "wake_on_exit")


def rows_named(names: Sequence[str]) -> BaseRowFactory[Row]:
    """A row factory that decodes rows by column name: each a tuple of the columns ``names``
    says, in that order, wherever the statement puts them. The positions are worked out once
    per result from the cursor's description; when the statement already returns those columns
    in that order (as pgqueue's own do) rows are psycopg's plain tuples, at no cost per row."""
    wanted = tuple(names)

    def factory(cursor: Any) -> RowMaker[Row]:  # a sync or an async cursor
        got = tuple(column.name for column in cursor.description or ())
        if got[: len(wanted)] == wanted:
            return tuple_row(cursor)
        missing = [name for name in wanted if name not in got]
        if missing:
            raise psycopg.ProgrammingError(f"the claim returned no column {', '.join(missing)}")
        pick = itemgetter(*map(got.index, wanted))
        return cast(RowMaker[Row], pick)

    return factory


#: The statements whose rows are decoded by name (the claims: ClaimedJob reads their columns).
ROWS_BY_NAME: dict[str, BaseRowFactory[Row]] = {
    "claim_jobs": rows_named(CLAIMED_COLUMNS),
    "claim_flow": rows_named(FLOW_CLAIM_COLUMNS),
}


#: The claim path's statements: their list parameters go as array literals (array_params.py;
#: each statement casts every list it takes).
ARRAYS_AS_LITERALS = frozenset({"claim_jobs", "claim_flow", "next_due"})


#: Errors that mean "the database is unreachable or went away": wait and try again.
TRANSIENT_ERRORS: tuple[type[BaseException], ...] = (
    psycopg.OperationalError,
    psycopg.InterfaceError,
    psycopg.errors.AdminShutdown,
    psycopg.errors.CannotConnectNow,
    psycopg.errors.QueryCanceled,
)


def application_name(dsn: str, role: str, worker_id: str) -> str | None:
    """``pgqueue <role> <worker id>``, so pg_stat_activity tells which worker owns a connection
    (and a fault-injection test which worker wrote a row); None when the DSN or PGAPPNAME
    already names the application."""
    if "application_name" in conninfo_to_dict(dsn) or os.environ.get("PGAPPNAME"):
        return None
    return f"pgqueue {role} {worker_id}"


async def _configure(conn: psycopg.AsyncConnection[Any]) -> None:
    loaders.register(conn)


_IN_TRANSACTION = (
    psycopg.pq.TransactionStatus.INTRANS,
    psycopg.pq.TransactionStatus.INERROR,
)

#: Given an idle claim's rows, the parameters of a ``confirm_claims`` to run in the claim's
#: transaction before it commits, or None (see :meth:`WorkerDB.before_commit`).
BeforeSync = Callable[[list[Row]], Mapping[str, Any] | None]

#: Statements that join a batch (unnest of the job ids) to the jobs table. They are never
#: prepared: after five runs PostgreSQL may switch a prepared statement to a generic plan that
#: ignores the batch's real size (unnest estimated at ten rows) and picks a join that walks every
#: running job per acked id. Planned each time, they always look jobs up by primary key.
PLANNED_EACH_TIME = frozenset(
    {
        "ack_jobs",
        "ack_jobs_waking",
        "confirm_claims",
        "fail_jobs",
        "heartbeat",
        "release_jobs",
        "settle_claims",
        "record_breaker_outcomes",
    }
)


#: Statements run on their generic plan (see the ``generic_plans`` query): PostgreSQL keeps
#: choosing a custom plan for the claim, planned again on every call (0.4-0.7 ms of a busy
#: worker's claim), where the generic one serves every size of batch as well.
GENERIC_PLANNED = frozenset({"claim_jobs"})


async def _send_sync(conn: psycopg.AsyncConnection[Any], pipeline: psycopg.AsyncPipeline) -> None:
    """Send the pipeline's Sync (which ends its implicit transaction) without waiting for the
    results before it, as an ``execute`` in a pipeline sends its statement. psycopg's
    ``AsyncPipeline.sync()`` also waits for every result up to the Sync: here, for the COMMIT's
    WAL flush. Queued through the pipeline, so that psycopg matches the Sync's reply to it.

    Those are the two methods ``sync()`` calls, not psycopg's public API: a psycopg without
    them gets ``sync()`` itself (correct, but the claimed jobs then start after the commit's
    flush, as they did when the claim sent its own ``COMMIT``)."""
    if not _SYNC_UNWAITED:
        await pipeline.sync()
        return
    async with conn.lock:
        pipeline._enqueue_sync()
        await conn.wait(pipeline._communicate_gen())


#: Whether this psycopg's pipeline has the two methods :func:`_send_sync` calls.
_SYNC_UNWAITED = all(
    hasattr(psycopg.AsyncPipeline, name) for name in ("_enqueue_sync", "_communicate_gen")
)


async def _after_commit(
    conn: psycopg.AsyncConnection[Any],
    connection: contextlib.AsyncExitStack,
    pipeline: contextlib.AsyncExitStack,
    then: str,
    params: Mapping[str, Any],
    later: asyncio.Future[list[Row]],
) -> None:
    """The end of :meth:`WorkerDB.before_commit`: ``then`` sent, the pipeline left (which
    reads the commit's reply, and raises what the commit raised, then ``then``'s rows), and
    the connection given back. Not before the claim's jobs started: what the event loop does
    between the hand-over and its next wait delays their handlers (a ``def`` one's thread
    waits for the GIL), so nothing is done until the commit's reply is here."""
    async with connection:
        async with pipeline:
            await _readable(conn)  # (inside: whatever it raises, the connection goes back)
            # Leaving the pipeline sends a Sync after ``then`` and reads every answer up to
            # it: the commit's, ``then``'s rows (its own implicit transaction), one round trip.
            cursor = conn.cursor()
            await cursor.execute(query(then), params)
        got = await cursor.fetchall()
        if not later.done():
            later.set_result(got)


if sys.version_info >= (3, 12):

    def _started(coro: Coroutine[Any, Any, None]) -> asyncio.Task[None]:
        """The commit's task, run at once up to its wait for the commit's reply (eagerly):
        created the usual way, its first step came after the jobs' hand-over, on the loop
        while a ``def`` handler's thread waited for the GIL."""
        loop = asyncio.get_running_loop()
        return asyncio.Task(coro, loop=loop, name="pgqueue-commit", eager_start=True)

else:

    def _started(coro: Coroutine[Any, Any, None]) -> asyncio.Task[None]:
        return asyncio.get_running_loop().create_task(coro, name="pgqueue-commit")


async def _readable(conn: psycopg.AsyncConnection[Any]) -> None:
    """Until the server's next answer is here: the event loop's reader alone, no statement
    driven (an answer psycopg read already, into libpq's buffer, is waited for no more)."""
    if not conn.pgconn.is_busy():
        return
    loop = asyncio.get_running_loop()
    ready: asyncio.Future[None] = loop.create_future()
    fileno = conn.pgconn.socket

    def readable() -> None:
        if not ready.done():
            ready.set_result(None)

    loop.add_reader(fileno, readable)
    try:
        await ready
    finally:
        loop.remove_reader(fileno)


def _settle(later: asyncio.Future[list[Row]], commit: asyncio.Task[None]) -> None:
    """The commit's task ended before ``then``'s rows came: whoever awaits them gets its
    error (or a cancellation)."""
    if later.done():
        return
    error = None if commit.cancelled() else commit.exception()
    if error is None:
        later.cancel()
    else:
        later.set_exception(error)


class WorkerStore(Protocol):
    """Everything the worker's services do with the database, by query name: the one seam
    between them and PostgreSQL. :class:`WorkerDB` is the real one; the unit tests drive the
    services against a fake that records the statements (tests/unit/worker/fake_store.py)."""

    def explain(self, exc: BaseException) -> str:
        """A database error in one line, naming the connection failure behind a pool timeout."""
        ...

    async def fetch(
        self, name: str, params: Mapping[str, Any] | None = None, timeout: float = 30.0
    ) -> list[Row]:
        """Run the named query as a transaction of its own; its rows (or [])."""
        ...

    async def before_commit(
        self,
        name: str,
        then: str,
        params: Mapping[str, Any],
        *,
        generic: bool = False,
        before_sync: BeforeSync | None = None,
        timeout: float = 30.0,
    ) -> tuple[list[Row], asyncio.Future[list[Row]], asyncio.Task[None]]:
        """``name``'s rows before the ``COMMIT`` of ``name`` + ``then`` is confirmed (see
        :meth:`WorkerDB.before_commit`)."""
        ...

    async def drive(self, plan: Plan[T], *, atomic: bool = False, timeout: float = 30.0) -> T:
        """Run a plan (:mod:`pgqueue.db.plan`): each statement a transaction of its own, or
        all of them in one (``atomic``)."""
        ...


def _one(step: Query) -> Plan[list[Any]]:
    rows: list[Any] = yield step
    return rows


class WorkerDB:
    """The worker's :class:`WorkerStore` on PostgreSQL: a small autocommit pool."""

    def __init__(
        self, dsn: str, *, size: int, prepare: bool = True, application_name: str | None = None
    ) -> None:
        kwargs: dict[str, Any] = {"autocommit": True}
        if application_name is not None:
            kwargs["application_name"] = application_name
        if not prepare:
            # Behind a transaction pooler without prepared-statement support.
            kwargs["prepare_threshold"] = None
        #: What the pool last failed to connect with: a pool timeout says only that it timed
        #: out, the services' log lines say why (all connection slots taken, ...).
        self.connect_failures = ConnectFailures("worker's connection pool")
        self.pool = AsyncConnectionPool(
            dsn,
            min_size=1,
            max_size=size,
            kwargs=kwargs,
            configure=_configure,
            open=False,
            # A broken connection is discarded when it is returned; the pool reconnects in the
            # background with exponential backoff while the services wait and retry.
            name="pgqueue-worker",
            connection_class=self.connect_failures.async_connection_class(),
        )

    async def open(self) -> None:
        await self.pool.open(wait=False)

    async def close(self) -> None:
        await self.pool.close(timeout=5)

    def explain(self, exc: BaseException) -> str:
        return self.connect_failures.explain(exc)

    async def fetch(
        self, name: str, params: Mapping[str, Any] | None = None, timeout: float = 30.0
    ) -> list[Row]:
        async with self.pool.connection(timeout=timeout) as conn, conn.cursor() as cur:
            prepare = False if name in PLANNED_EACH_TIME else None
            if name in ROWS_BY_NAME:
                cur.row_factory = ROWS_BY_NAME[name]
            if params is not None and name in ARRAYS_AS_LITERALS:
                params = with_array_literals(params)
            if name in GENERIC_PLANNED:
                await self._generic(conn, cur, name, params)
            else:
                await cur.execute(query(name), params, prepare=prepare)
            return await cur.fetchall() if cur.description is not None else []

    @staticmethod
    async def _generic(
        conn: psycopg.AsyncConnection[Any],
        cur: psycopg.AsyncCursor[Any],
        name: str,
        params: Mapping[str, Any] | None,
    ) -> None:
        """Run ``name`` on its generic plan: in a transaction of its own that says so
        (``generic_plans``), the four statements sent as one pipeline (one round trip)."""
        try:
            async with conn.pipeline():
                await conn.execute(query("begin"))
                await conn.execute(query("generic_plans"))
                await cur.execute(query(name), params)
                await conn.execute(query("commit"))
        except BaseException:
            if not conn.closed and conn.info.transaction_status in _IN_TRANSACTION:
                with contextlib.suppress(psycopg.Error):
                    await conn.execute(query("rollback"))
            raise

    async def drive(self, plan: Plan[T], *, atomic: bool = False, timeout: float = 30.0) -> T:
        if atomic:
            async with self.pool.connection(timeout=timeout) as conn, conn.transaction():
                return await plans.run_async(plan, conn)
        # One pooled connection per statement, given back in between: a long maintenance
        # plan (a pruning pass of many batches) never holds a connection the claims need.
        try:
            step = next(plan)
            while True:
                if not isinstance(step, Query):
                    raise TypeError(f"the worker runs queries one by one, not {step!r}")
                async with self.pool.connection(timeout=timeout) as conn:
                    rows = await plans.run_async(_one(step), conn)
                await asyncio.sleep(0)  # let the hot path in between statements
                step = plan.send(rows)
        except StopIteration as done:
            return done.value  # type: ignore[no-any-return]

    async def before_commit(
        self,
        name: str,
        then: str,
        params: Mapping[str, Any],
        *,
        generic: bool = False,
        before_sync: BeforeSync | None = None,
        timeout: float = 30.0,
    ) -> tuple[list[Row], asyncio.Future[list[Row]], asyncio.Task[None]]:
        """Run the query ``name`` (with ``params``) in a transaction of its own, and return
        its rows before that transaction's commit is confirmed: with a task that ends when the
        commit (and its WAL flush) did, raising what it raised, and a future of the rows of
        ``then`` (with the same ``params``, run just after the commit on the same connection).
        The commit is sent before the rows are returned, so the server commits whatever the
        caller does meanwhile (a handler blocking the event loop cannot hold the transaction
        open). The rows the statement locked stay locked until then, so a write of another
        connection about them waits and sees what the commit decided. ``generic``: the
        statement runs its generic plan (see the ``generic_plans`` query).

        On the wire: ``name`` (after ``generic_plans``) and a Flush, one round trip to its
        rows; then the pipeline's Sync, which commits (the statements of a pipeline up to its
        Sync are one implicit transaction), and ``then``. No ``BEGIN``, no ``COMMIT``, and
        ``then`` sent after the rows are returned: each was a statement more, sent on its own,
        on the way to the rows. ``before_sync``, given the rows, may ask for a
        ``confirm_claims`` in the same transaction before it commits (rows that came late: see
        pgqueue.worker.late_claims), a round trip more."""
        if name in ARRAYS_AS_LITERALS and then in ARRAYS_AS_LITERALS:
            params = with_array_literals(params)
        # Two stacks: the commit's task leaves the pipeline, then runs ``then`` outside it.
        async with contextlib.AsyncExitStack() as connection:
            conn = await connection.enter_async_context(self.pool.connection(timeout=timeout))
            async with contextlib.AsyncExitStack() as piping:
                committing = False
                try:
                    pipeline = await piping.enter_async_context(conn.pipeline())
                    if generic:
                        await conn.execute(query("generic_plans"))
                    first = conn.cursor(row_factory=ROWS_BY_NAME.get(name, tuple_row))
                    await first.execute(query(name), params)
                    rows = await first.fetchall()  # a Flush: the rows come before the Sync
                    confirm = before_sync(rows) if before_sync is not None else None
                    if confirm is not None:
                        extra = conn.cursor()
                        await extra.execute(query("confirm_claims"), confirm, prepare=False)
                        await extra.fetchall()
                    committing = True
                    await _send_sync(conn, pipeline)
                except BaseException:
                    if not committing and not conn.closed:
                        # Leaving the pipeline sends its Sync, which would commit what the
                        # statement did (a claim whose rows nobody reads): closed, it rolls
                        # back.
                        await conn.close()
                    raise
                # The connection and its pipeline are the commit's task's from here.
                pipelined = piping.pop_all()
            held = connection.pop_all()
        later: asyncio.Future[list[Row]] = asyncio.get_running_loop().create_future()
        commit = _started(_after_commit(conn, held, pipelined, then, params, later))
        commit.add_done_callback(lambda task: _settle(later, task))
        return rows, later, commit
