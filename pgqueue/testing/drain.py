"""Running the jobs a test enqueued, inline: :func:`drain`, :func:`run_job` and their async
twins. Both drivers run the same steps (:mod:`pgqueue.testing.steps`): the sync one in the
caller's thread (async handlers on an event loop of its own, one per drain), the async one on
the caller's event loop (sync handlers in a thread, as a worker runs them, so that their
``with ctx.transaction()`` may block)."""

from __future__ import annotations

import asyncio
import time
from collections.abc import AsyncIterator, Iterator
from contextlib import (
    AbstractAsyncContextManager,
    AbstractContextManager,
    asynccontextmanager,
    contextmanager,
)
from typing import TYPE_CHECKING, Any, TypeVar

import psycopg

from pgqueue.db import plan as plans
from pgqueue.db.connections import Owned, async_driver, atomic, atomic_async, sync_driver
from pgqueue.errors import JobTimeout, JobTransactionError, Retry
from pgqueue.handler.job_context import reset_current, set_current
from pgqueue.handler.job_transaction import TransactionHost
from pgqueue.handler.parking import JobParked
from pgqueue.testing.runs import DrainError, DrainSummary, JobRun, JobsFailed
from pgqueue.testing.steps import (
    Called,
    DrainOptions,
    Invoke,
    Pause,
    Steps,
    drain_steps,
    new_worker_id,
    run_job_steps,
)

if TYPE_CHECKING:
    from pgqueue.client import PgQueue

T = TypeVar("T")


class DrainTransactions(TransactionHost):
    """``ctx.transaction()`` in a drained handler. On the queue's pool (a drain without
    ``conn``) the block begins and commits a transaction of its own, as under a worker. In a
    drain on the caller's connection (``conn=``: a test's transaction, never committed) the
    block is a savepoint in that transaction, on that connection: a transaction of another
    connection would wait for the row the drain's claim locked, and committing the caller's
    would commit the test's."""

    #: A handler's durable sleep or wait parks the job, as under a worker (the drain's
    #: collapse of time wakes it).
    parks_jobs = True

    def __init__(self, pgq: PgQueue, conn: object | None) -> None:
        # No DSN read here: a queue without one would start the embedded server for it (a
        # drain on the caller's connection needs none); check_connection reads it if ever.
        super().__init__("", application_name=None, max_result_bytes=pgq.max_payload_bytes)
        self.pgq = pgq
        self.conn = conn

    @contextmanager
    def check_connection(self) -> Iterator[psycopg.Connection[Any]]:
        self.dsn = self.pgq.dsn
        with super().check_connection() as conn:
            yield conn

    @asynccontextmanager
    async def check_connection_async(self) -> AsyncIterator[psycopg.AsyncConnection[Any]]:
        self.dsn = self.pgq.dsn
        async with super().check_connection_async() as conn:
            yield conn

    @contextmanager
    def connection(self) -> Iterator[psycopg.Connection[Any]]:
        with self.pgq.connection(self.conn) as conn:
            yield conn

    @asynccontextmanager
    async def connection_async(self) -> AsyncIterator[psycopg.AsyncConnection[Any]]:
        async with self.pgq.connection_async(self.conn) as conn:
            yield conn

    def own(self, conn: object) -> AbstractContextManager[Owned[psycopg.Connection[Any]]]:
        if self.conn is None:
            return super().own(conn)
        return self._savepoint(conn)

    def own_async(
        self, conn: object
    ) -> AbstractAsyncContextManager[Owned[psycopg.AsyncConnection[Any]]]:
        if self.conn is None:
            return super().own_async(conn)
        return self._savepoint_async(conn)

    def _refuse(self) -> JobTransactionError:
        return JobTransactionError(
            "ctx.transaction(conn=...) in a drain on the caller's connection runs on that "
            "connection (another would wait for the job's row the drain holds): pass the "
            "same connection as drain(conn=...), or none"
        )

    @contextmanager
    def _savepoint(self, conn: object) -> Iterator[Owned[psycopg.Connection[Any]]]:
        driver = sync_driver(conn)
        if driver is not sync_driver(self.conn):
            raise self._refuse()
        with atomic(driver):
            yield Owned(driver)

    @asynccontextmanager
    async def _savepoint_async(
        self, conn: object
    ) -> AsyncIterator[Owned[psycopg.AsyncConnection[Any]]]:
        driver = await async_driver(conn)
        if driver is not await async_driver(self.conn):
            raise self._refuse()
        async with atomic_async(driver):
            yield Owned(driver)


def _one(step: plans.Step) -> plans.Plan[list[Any]]:
    rows: list[Any] = yield step
    return rows


def _call(step: Invoke) -> Called:
    """A sync handler, in the calling thread, with its job as the current one."""
    token = set_current(step.ctx)
    try:
        return Called(step.func(*step.args, **step.kwargs), None)
    except (Exception, JobParked) as exc:
        return Called(None, exc)
    finally:
        reset_current(token)


async def _call_async(step: Invoke) -> Called:
    """An async handler, with its job as the current one and the task's timeout (a sync
    handler's cannot be enforced: a thread cannot be stopped)."""
    token = set_current(step.ctx)
    task = step.task
    try:
        async with asyncio.timeout(task.timeout):
            return Called(await step.func(*step.args, **step.kwargs), None)
    except TimeoutError as exc:
        if task.timeout is None or not _timed_out(exc):
            return Called(None, exc)
        return Called(None, JobTimeout(f"{task.name} timed out after {task.timeout:g}s"))
    except (Exception, JobParked) as exc:
        return Called(None, exc)
    finally:
        reset_current(token)


def _timed_out(exc: TimeoutError) -> bool:
    """The timeout's own TimeoutError (asyncio.timeout raises it from the cancellation), not
    one the handler raised."""
    return isinstance(exc.__context__, asyncio.CancelledError)


def _not_in_a_loop(what: str) -> None:
    try:
        asyncio.get_running_loop()
    except RuntimeError:
        return
    raise DrainError(f"{what}() called on a running event loop: use `await {what}_async(...)`")


def _drive(pgq: PgQueue, steps: Steps[T], conn: object | None) -> T:
    runner: asyncio.Runner | None = None
    try:
        step = next(steps)
        while True:
            if not isinstance(step, Invoke | Pause):  # a statement
                reply: Any = pgq.run(_one(step), conn)
            elif isinstance(step, Pause):
                time.sleep(step.seconds)
                reply = None
            elif step.task.is_async:
                if runner is None:
                    runner = asyncio.Runner()
                reply = runner.run(_call_async(step))
            else:
                reply = _call(step)
            step = steps.send(reply)
    except StopIteration as done:
        return done.value  # type: ignore[no-any-return]
    finally:
        if runner is not None:
            # What the handlers opened on this loop (the queue's async pool, its results
            # listener) closes with it; the sync pool reopens when next used.
            runner.run(pgq.aclose())
            runner.close()


async def _drive_async(pgq: PgQueue, steps: Steps[T], conn: object | None) -> T:
    try:
        step = next(steps)
        while True:
            if not isinstance(step, Invoke | Pause):  # a statement
                reply: Any = await pgq.run_async(_one(step), conn)
            elif isinstance(step, Pause):
                await asyncio.sleep(step.seconds)
                reply = None
            elif step.task.is_async:
                reply = await _call_async(step)
            else:
                reply = await asyncio.to_thread(_call, step)
            step = steps.send(reply)
    except StopIteration as done:
        return done.value  # type: ignore[no-any-return]


def _options(queue: str | None, max_jobs: int, cron: bool, scheduled: bool) -> DrainOptions:
    if max_jobs < 1:
        raise DrainError(f"max_jobs must be at least 1, got {max_jobs}")
    return DrainOptions(queue=queue, max_jobs=max_jobs, cron=cron, scheduled=scheduled)


def _checked(summary: DrainSummary, raise_on_failure: bool) -> DrainSummary:
    if raise_on_failure and summary.dead:
        raise JobsFailed(summary.dead, summary)
    return summary


def drain(
    pgq: PgQueue,
    *,
    queue: str | None = None,
    conn: object | None = None,
    max_jobs: int = 1000,
    cron: bool = True,
    scheduled: bool = True,
    raise_on_failure: bool = True,
) -> DrainSummary:
    """Run the jobs of ``pgq``'s tasks that are ready, one at a time in the calling thread,
    until none is: their retries, their workflows' next steps, the jobs they enqueue, cron
    ticks due (``cron``) and scheduled jobs, made due now (``scheduled``: a retry's backoff or
    a ``run_at`` later does not wait). It first writes what the code declares (task limits,
    breakers, ``@pgq.periodic`` schedules), as a worker does at start-up. Jobs are claimed,
    acked and failed with the worker's own statements, fenced by lease token, so a job fares
    here as under ``pgq work``.

    ``queue``: only that queue (default: every queue). ``conn``: run on the caller's connection
    and in its transaction (jobs enqueued in a test's uncommitted transaction; Django's
    ``TestCase``), else on the queue's pool, each statement committing as a worker's does.
    ``max_jobs``: the most attempts to run (:class:`DrainError` past it: a job that enqueues
    itself, or raises ``Retry`` for ever). Returns a :class:`DrainSummary`; raises
    :class:`JobsFailed` if any job was dead-lettered, unless ``raise_on_failure=False``.
    Task timeouts are enforced for async handlers only (a thread cannot be stopped)."""
    _not_in_a_loop("drain")
    options = _options(queue, max_jobs, cron, scheduled)
    pgq.sync_declarations(conn)  # what a worker writes at start-up: limits, @periodic
    steps = drain_steps(pgq.tasks, options, DrainTransactions(pgq, conn), new_worker_id())
    return _checked(_drive(pgq, steps, conn), raise_on_failure)


async def drain_async(
    pgq: PgQueue,
    *,
    queue: str | None = None,
    conn: object | None = None,
    max_jobs: int = 1000,
    cron: bool = True,
    scheduled: bool = True,
    raise_on_failure: bool = True,
) -> DrainSummary:
    """The async twin of :func:`drain`: on the caller's event loop (async handlers awaited
    there, sync ones in a thread); ``conn`` an async connection or session."""
    options = _options(queue, max_jobs, cron, scheduled)
    await pgq.sync_declarations_async(conn)
    steps = drain_steps(pgq.tasks, options, DrainTransactions(pgq, conn), new_worker_id())
    return _checked(await _drive_async(pgq, steps, conn), raise_on_failure)


def _checked_run(run: JobRun, raise_on_failure: bool) -> JobRun:
    raised = run.exception is not None and not isinstance(run.exception, Retry | JobParked)
    if raise_on_failure and run.outcome in ("retried", "dead") and raised:
        raise JobsFailed([run], DrainSummary([run]))
    return run


def run_job(
    pgq: PgQueue, job_id: int, *, conn: object | None = None, raise_on_failure: bool = True
) -> JobRun:
    """Run one job now (a scheduled one too), whatever else is ready, and return its attempt.
    Jobs it enqueues and its workflow's next steps are left for :func:`drain`. Raises
    :class:`JobsFailed` if the attempt failed (not for ``Retry``; unless
    ``raise_on_failure=False``), and :class:`DrainError` if the job cannot run (finished,
    running, waiting for its parents)."""
    _not_in_a_loop("run_job")
    steps = run_job_steps(pgq.tasks, job_id, DrainTransactions(pgq, conn), new_worker_id())
    return _checked_run(_drive(pgq, steps, conn), raise_on_failure)


async def run_job_async(
    pgq: PgQueue, job_id: int, *, conn: object | None = None, raise_on_failure: bool = True
) -> JobRun:
    """The async twin of :func:`run_job`."""
    steps = run_job_steps(pgq.tasks, job_id, DrainTransactions(pgq, conn), new_worker_id())
    return _checked_run(await _drive_async(pgq, steps, conn), raise_on_failure)
