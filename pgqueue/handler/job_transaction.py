"""A handler's database work and its job's completion in one transaction: ``ctx.transaction()``.

::

    with current_job().transaction() as conn:          # async: async with
        conn.execute("INSERT INTO invoices ...")

On leaving the block the job's fenced completion (``complete_job``: the ack's statement, ``...
WHERE id = $id AND lease_token = $token AND state = 'running'``) runs in that transaction as its
last statement, and the transaction commits. So the job completes if and only if the block's
writes commit: a worker that lost its lease finds no row to complete and rolls the whole
transaction back (:class:`~pgqueue.LeaseLost`), and a job whose transaction committed is never
written again by anyone (its row is gone). Effects written this way happen exactly once.

The connection: the worker's own (a pool it keeps for these blocks; a child process of ``--pool
process`` opens its own), or the application's (``conn=``: psycopg, a SQLAlchemy session or
connection, Django's connection), whose transaction the block begins and ends with the
framework's own calls (:func:`pgqueue.db.connections.own_transaction`).

Locks: the completion's row lock is the transaction's last, taken just before the COMMIT, so
the heartbeat (one statement locking the worker's held rows in id order) waits at most for that
statement and the COMMIT, never for the handler's work. From the moment the completion is sent
the job is no longer heartbeated: its row is locked by the handler's transaction (no reaper
takes a locked row) until that transaction ends.

A COMMIT without a reply (the connection dropped) is settled by asking the server on a fresh
connection what became of the transaction (``pg_xact_status`` of its id, which the completion
returned): committed, the block ends normally; aborted, the connection's error is raised (a
failed attempt, retried by the task's policy: the job runs again); still in progress (the COMMIT
has not reached the server, which has not noticed the client is gone), its backend is ended
(``pg_terminate_backend``, checked against the transaction id) and the status read again. If the
server stays unreachable for :data:`SETTLE_WITHIN` seconds, :class:`~pgqueue.CommitOutcomeUnknown`:
nothing is written, and the row decides (gone: committed; still running: its lease runs out and
it runs again). Never twice.

The state of the block is kept on the :class:`~pgqueue.JobContext` (``transaction_state``), where
the worker reads it: a job whose transaction committed is reported as written, never acked
again, and not taken for a lost lease when a heartbeat finds its row gone.

The sync block (``__enter__`` / ``__exit__``), its settling and its fresh connection are
generated from their async twins (``make sync-twins``: the ``# sync-twin:`` marks); edit those.
"""

from __future__ import annotations

import asyncio
import contextlib
import contextvars
import logging
import time
from collections.abc import AsyncIterator, Iterator
from contextlib import AbstractAsyncContextManager, AbstractContextManager
from types import TracebackType
from typing import TYPE_CHECKING, Any, Final, Generic, NamedTuple, TypeVar

import psycopg
from psycopg.rows import class_row

from pgqueue.db import plan as plans
from pgqueue.db.connections import Owned, own_transaction, own_transaction_async
from pgqueue.errors import CommitOutcomeUnknown, JobTransactionError, LeaseLost
from pgqueue.rules.log_actions import Action, fields
from pgqueue.rules.vocabulary import TransactionState

if TYPE_CHECKING:
    from pgqueue.handler.job_context import ClaimedJob, JobContext

log = logging.getLogger("pgqueue.transaction")

# What the block's ``with`` and ``async with`` give (for a type checker): ``conn`` itself when
# given, else the worker's psycopg Connection / AsyncConnection.
SyncConnT = TypeVar("SyncConnT")
AsyncConnT = TypeVar("AsyncConnT")

#: The block is open: the handler writes in its transaction (the lease is still heartbeated).
OPEN: Final[TransactionState] = "open"
#: The completion was sent: the row is locked by the handler's transaction, no heartbeat.
COMPLETING: Final[TransactionState] = "completing"
#: The transaction committed: the job is complete (``JobContext.completed_as`` says how).
COMMITTED: Final[TransactionState] = "committed"
#: The completion found no row (the lease was lost): rolled back, nothing written.
LOST: Final[TransactionState] = "lost"
#: The COMMIT's reply was lost and its fate could not be learned: nothing written.
UNKNOWN: Final[TransactionState] = "unknown"
#: States in which the worker still holds the job and extends its lease.
HOLDING = frozenset((None, OPEN))
#: States that end the attempt whatever the handler does next.
FINAL = frozenset((COMMITTED, LOST, UNKNOWN))

#: How long a lost COMMIT reply is looked into (reconnecting through an outage) before the
#: block gives up with CommitOutcomeUnknown.
SETTLE_WITHIN = 30.0


class TransactionHost:
    """What the worker gives its jobs' ``ctx.transaction()`` blocks: connections, and what the
    completion must know (set on each :class:`~pgqueue.JobContext` as ``transactions``).
    Subclassed by the worker (:mod:`pgqueue.worker.transactions`) and its child processes."""

    def __init__(
        self,
        dsn: str,
        *,
        application_name: str | None,
        max_result_bytes: int,
        prepare: bool = True,
    ) -> None:
        self.dsn = dsn
        self.application_name = application_name
        #: Server-side prepared statements allowed (not behind an old transaction pooler).
        self.prepare = prepare
        #: The largest result a job may keep (PgQueue.max_payload_bytes).
        self.max_result_bytes = max_result_bytes

    def connection(self) -> AbstractContextManager[psycopg.Connection[Any]]:
        """An autocommit connection of the worker's for a sync handler's block."""
        raise JobTransactionError("this worker has no connections for sync handlers' blocks")

    def connection_async(self) -> AbstractAsyncContextManager[psycopg.AsyncConnection[Any]]:
        """An autocommit connection of the worker's for an async handler's block."""
        raise JobTransactionError("this worker has no connections for async handlers' blocks")

    def own(self, conn: object) -> AbstractContextManager[Owned[psycopg.Connection[Any]]]:
        """The block's transaction on ``conn``: :func:`~pgqueue.db.connections.own_transaction`
        (the framework's own begin and commit). A test's drain on the caller's connection
        (``pgqueue.testing``) makes it a savepoint in the test's transaction instead."""
        return own_transaction(conn)

    def own_async(
        self, conn: object
    ) -> AbstractAsyncContextManager[Owned[psycopg.AsyncConnection[Any]]]:
        """The async twin of :meth:`own`."""
        return own_transaction_async(conn)

    def wake(self, job: ClaimedJob) -> list[str] | None:
        """The queues the completion notifies: the job took a limit's last free place (see the
        ``ack_jobs_waking`` query), else None."""
        return None

    def claim_unsettled(self, job: ClaimedJob) -> bool:
        """Whether the claim that gave this worker the job may not have committed (the
        completion then waits for it and checks the row is still this worker's)."""
        return False

    def state_changed(self, ctx: JobContext) -> None:
        """``ctx.transaction_state`` changed (a child process tells its worker)."""

    def _check_kwargs(self) -> dict[str, Any]:
        kwargs: dict[str, Any] = {"autocommit": True, "connect_timeout": 5}
        if self.application_name is not None:
            kwargs["application_name"] = self.application_name
        return kwargs

    # sync-twin: async source
    @contextlib.asynccontextmanager
    async def check_connection_async(self) -> AsyncIterator[psycopg.AsyncConnection[Any]]:
        """A fresh connection to look into a COMMIT whose reply was lost (never the pool's:
        they may all be as broken as the one that lost it)."""
        async with await psycopg.AsyncConnection.connect(self.dsn, **self._check_kwargs()) as conn:
            yield conn

    # sync-twin: generated from the async source above by `make sync-twins`; do not edit

    @contextlib.contextmanager
    def check_connection(self) -> Iterator[psycopg.Connection[Any]]:
        """A fresh connection to look into a COMMIT whose reply was lost (never the pool's:
        they may all be as broken as the one that lost it)."""
        with psycopg.Connection.connect(self.dsn, **self._check_kwargs()) as conn:
            yield conn

    # sync-twin: end


_host: contextvars.ContextVar[TransactionHost] = contextvars.ContextVar("pgqueue_transactions")


def bind_host(host: TransactionHost) -> None:
    """The worker's side of the blocks its handlers open (set in the context the worker's
    tasks and handler threads inherit, and in a child process)."""
    _host.set(host)


def current_host() -> TransactionHost | None:
    return _host.get(None)


class Completed(NamedTuple):
    """What ``complete_job`` returns for a job it completed."""

    id: int
    cancel_requested: bool
    xid: str  # the transaction's id (xid8 as text), for pg_xact_status
    pid: int  # its backend (pg_backend_pid: the server's, even behind PgBouncer)


class Claimed(NamedTuple):
    """The job's row as ``lock_claimed_job`` found it, once the claim's transaction ended."""

    lease_token: int
    state: str
    worker_id: str | None


def complete(
    ctx: JobContext, wake: list[str] | None, unsettled: bool = False
) -> plans.Plan[Completed | None]:
    """The job's fenced completion, in the transaction the plan runs in; None: not held.
    ``unsettled``: the claim may not have committed yet: wait for it first (a completion
    sent meanwhile would see the row as it was before the claim, and find nothing)."""
    job = ctx.job
    if unsettled:
        row = yield from plans.fetch_first(
            "lock_claimed_job", {"id": job.id}, row=class_row(Claimed)
        )
        if row is None or row != (job.lease_token, "running", ctx.worker_id):
            return None
    rows = yield from plans.fetch_all(
        "complete_job",
        {
            "ids": [job.id],
            "tokens": [job.lease_token],
            "results": [ctx.result_json] if ctx.result_json is not None else None,
            "wake": wake,
        },
        row=class_row(Completed),
        prepare=False,  # planned like ack_jobs (an unnest joined to jobs)
    )
    return rows[0] if rows else None


def _status(xid: str, pid: int, terminate: bool) -> plans.Plan[str]:
    """What became of the transaction: committed, aborted, or in progress (after ending its
    backend, when ``terminate``)."""
    status = yield from plans.fetch_value("transaction_status", {"xid": xid})
    if status == "in progress" and terminate:
        yield from plans.fetch_values("end_transaction", {"xid": xid, "pid": pid})
        status = yield from plans.fetch_value("transaction_status", {"xid": xid})
    return str(status)


class _Settling:
    """Asking, again and again until :data:`SETTLE_WITHIN` runs out, what became of a COMMIT
    whose reply was lost: the decisions of the sync and the async drivers."""

    def __init__(self, completed: Completed) -> None:
        self.completed = completed
        self.deadline = time.monotonic() + SETTLE_WITHIN
        self.terminate = True
        self.delay = 0.1

    def plan(self) -> plans.Plan[str]:
        return _status(self.completed.xid, self.completed.pid, self.terminate)

    def next(self, status: str | None, error: psycopg.Error | None) -> str | float:
        """committed / aborted / unknown, or the seconds to wait before asking again."""
        if status in ("committed", "aborted"):
            return status
        if isinstance(error, psycopg.errors.InsufficientPrivilege):
            self.terminate = False  # may not end its backend: wait for the server to
        elif error is not None and not isinstance(
            error, psycopg.OperationalError | psycopg.InterfaceError
        ):
            # Not an outage: the server cannot say (a failover to a standby that never saw
            # the transaction: "transaction ID is in the future").
            log.warning(
                "cannot look into a lost COMMIT reply",
                extra=fields(Action.TRANSACTION_UNKNOWN, error=str(error)),
            )
            return UNKNOWN
        if time.monotonic() > self.deadline:
            return UNKNOWN
        delay, self.delay = self.delay, min(self.delay * 2, 1.0)
        return delay


# sync-twin: async source
async def _settle_async(host: TransactionHost, completed: Completed) -> str:
    settling = _Settling(completed)
    while True:
        status: str | None = None
        error: psycopg.Error | None = None
        try:
            async with host.check_connection_async() as conn:
                status = await plans.run_async(settling.plan(), conn)
        except psycopg.Error as exc:
            error = exc
        verdict = settling.next(status, error)
        if isinstance(verdict, str):
            return verdict
        await asyncio.sleep(verdict)


# sync-twin: generated from the async source above by `make sync-twins`; do not edit


def _settle(host: TransactionHost, completed: Completed) -> str:
    settling = _Settling(completed)
    while True:
        status: str | None = None
        error: psycopg.Error | None = None
        try:
            with host.check_connection() as conn:
                status = plans.run(settling.plan(), conn)
        except psycopg.Error as exc:
            error = exc
        verdict = settling.next(status, error)
        if isinstance(verdict, str):
            return verdict
        time.sleep(verdict)


# sync-twin: end


class JobTransaction(Generic[SyncConnT, AsyncConnT]):
    """``ctx.transaction(conn=None)``: ``with`` in a sync handler, ``async with`` in an async
    one; the block's value is the connection to write with (``conn`` itself when given, else a
    psycopg connection of the worker's). See :mod:`pgqueue.handler.job_transaction`.

    Typed by what ``with`` (``SyncConnT``) and ``async with`` (``AsyncConnT``) give."""

    def __init__(self, ctx: JobContext, conn: object = None) -> None:
        self._ctx = ctx
        self._conn = conn
        self._source: Any = None  # the worker's pool connection, when conn is None
        self._owning: Any = None  # own_transaction(...)
        self._owned: Owned[Any] | None = None

    # -- shared steps --------------------------------------------------------------------

    def _begin(self, asynchronous: bool) -> TransactionHost:
        ctx = self._ctx
        host = ctx.transactions or current_host()
        if host is None:
            raise JobTransactionError(
                "ctx.transaction() works in a handler run by a pgqueue worker (this job "
                "context has no worker behind it)"
            )
        state = ctx.transaction_state
        if state == OPEN:
            raise JobTransactionError(
                "ctx.transaction() inside another ctx.transaction() block: a job has one "
                "transaction"
            )
        if state is not None:
            raise JobTransactionError(
                f"ctx.transaction() after the job's transaction ended ({state}): the job was "
                "completed (or given up) by its first block; a job has one transaction"
            )
        if not asynchronous:
            try:
                asyncio.get_running_loop()
            except RuntimeError:
                pass
            else:
                raise JobTransactionError(
                    "`with ctx.transaction()` on the event loop: use `async with "
                    "ctx.transaction()` in an async handler"
                )
        ctx.result_json = None
        ctx.transactions = host
        ctx.set_transaction_state(OPEN)
        return host

    def _target(self, owned: Owned[Any]) -> Any:
        return owned.driver if self._conn is None else self._conn

    def _lost(self, ctx: JobContext) -> LeaseLost:
        ctx.set_transaction_state(LOST)
        return LeaseLost(
            f"job {ctx.id} (attempt {ctx.attempt}) is no longer held by this worker: its "
            "transaction was rolled back, nothing it wrote is kept"
        )

    def _committed(self, ctx: JobContext, completed: Completed) -> None:
        ctx.completed_as = "cancelled" if completed.cancel_requested else "succeeded"
        ctx.set_transaction_state(COMMITTED)

    def _settled(self, ctx: JobContext, verdict: str, error: BaseException) -> None:
        """A COMMIT whose reply was lost, looked into: ``verdict``. Raises unless committed."""
        if verdict == "aborted":
            ctx.set_transaction_state(None)  # still held: the attempt fails like any other
            log.warning(
                "the transaction's COMMIT got no reply and did not commit; the attempt failed",
                extra=fields(Action.TRANSACTION_NOT_COMMITTED, job_id=ctx.id, attempt=ctx.attempt),
            )
            raise error
        if verdict == UNKNOWN:
            ctx.set_transaction_state(UNKNOWN)
            raise CommitOutcomeUnknown(
                f"the COMMIT of job {ctx.id}'s transaction got no reply ({error}) and the server "
                f"could not be asked within {SETTLE_WITHIN:g}s whether it committed; the job's "
                "row decides (complete if it committed, else it runs again after its lease)"
            ) from error
        log.info(
            "the transaction's COMMIT reply was lost; it committed",
            extra=fields(Action.TRANSACTION_COMMITTED, job_id=ctx.id, attempt=ctx.attempt),
        )

    # -- sync and async ------------------------------------------------------------------

    # sync-twin: async source
    async def __aenter__(self) -> AsyncConnT:
        if True:  # ASYNC  # noqa: SIM108
            host = self._begin(asynchronous=True)
        else:
            host = self._begin(asynchronous=False)
        try:
            conn = self._conn
            if conn is None:
                self._source = host.connection_async()
                conn = await self._source.__aenter__()
            self._owning = host.own_async(conn)
            self._owned = owned = await self._owning.__aenter__()
        except BaseException:
            self._ctx.set_transaction_state(None)
            await self._release_async()
            raise
        target: AsyncConnT = self._target(owned)
        return target

    async def __aexit__(
        self,
        kind: type[BaseException] | None,
        error: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        try:
            if kind is None:
                if True:  # ASYNC
                    await self._finish_shielded()
                else:
                    self._finish()
            else:
                await self._roll_back_async(kind, error, tb)
        finally:
            await self._release_async()

    async def _roll_back_async(
        self, kind: type[BaseException] | None, error: BaseException | None, tb: Any
    ) -> None:
        """The block raised (or was given up): roll back; the block's error goes on."""
        if self._ctx.transaction_state in (OPEN, COMPLETING):
            self._ctx.set_transaction_state(None)
        try:
            await self._owning.__aexit__(kind, error, tb)
        except Exception:
            # The connection is broken: the server rolls the transaction back.
            log.debug(
                "rolling back a job's transaction failed",
                exc_info=True,
                extra=fields(Action.TRANSACTION_ROLLBACK_FAILED),
            )

    async def _release_async(self) -> None:
        source, self._source = self._source, None
        if source is not None:
            await source.__aexit__(None, None, None)

    async def _finish_async(self) -> None:
        ctx, owned = self._ctx, self._owned
        assert owned is not None and ctx.transactions is not None
        try:
            if owned.flush is not None:
                await owned.flush()  # the ORM's pending writes first: the job's row lock is last
            ctx.set_transaction_state(COMPLETING)
            host = ctx.transactions
            completed = await plans.run_async(
                complete(ctx, host.wake(ctx.job), host.claim_unsettled(ctx.job)),
                owned.driver,
                foreign=self._conn is not None,
            )
            if completed is None:
                raise self._lost(ctx)
        except BaseException as exc:
            await self._roll_back_async(type(exc), exc, exc.__traceback__)
            raise
        try:
            await self._owning.__aexit__(None, None, None)  # COMMIT
        except Exception as exc:
            self._settled(ctx, await _settle_async(ctx.transactions, completed), exc)
        self._committed(ctx, completed)

    # sync-twin: generated from the async source above by `make sync-twins`; do not edit

    def __enter__(self) -> SyncConnT:
        host = self._begin(asynchronous=False)
        try:
            conn = self._conn
            if conn is None:
                self._source = host.connection()
                conn = self._source.__enter__()
            self._owning = host.own(conn)
            self._owned = owned = self._owning.__enter__()
        except BaseException:
            self._ctx.set_transaction_state(None)
            self._release()
            raise
        target: SyncConnT = self._target(owned)
        return target

    def __exit__(
        self,
        kind: type[BaseException] | None,
        error: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        try:
            if kind is None:
                self._finish()
            else:
                self._roll_back(kind, error, tb)
        finally:
            self._release()

    def _roll_back(
        self, kind: type[BaseException] | None, error: BaseException | None, tb: Any
    ) -> None:
        """The block raised (or was given up): roll back; the block's error goes on."""
        if self._ctx.transaction_state in (OPEN, COMPLETING):
            self._ctx.set_transaction_state(None)
        try:
            self._owning.__exit__(kind, error, tb)
        except Exception:
            # The connection is broken: the server rolls the transaction back.
            log.debug(
                "rolling back a job's transaction failed",
                exc_info=True,
                extra=fields(Action.TRANSACTION_ROLLBACK_FAILED),
            )

    def _release(self) -> None:
        source, self._source = self._source, None
        if source is not None:
            source.__exit__(None, None, None)

    def _finish(self) -> None:
        ctx, owned = self._ctx, self._owned
        assert owned is not None and ctx.transactions is not None
        try:
            if owned.flush is not None:
                owned.flush()  # the ORM's pending writes first: the job's row lock is last
            ctx.set_transaction_state(COMPLETING)
            host = ctx.transactions
            completed = plans.run(
                complete(ctx, host.wake(ctx.job), host.claim_unsettled(ctx.job)),
                owned.driver,
                foreign=self._conn is not None,
            )
            if completed is None:
                raise self._lost(ctx)
        except BaseException as exc:
            self._roll_back(type(exc), exc, exc.__traceback__)
            raise
        try:
            self._owning.__exit__(None, None, None)  # COMMIT
        except Exception as exc:
            self._settled(ctx, _settle(ctx.transactions, completed), exc)
        self._committed(ctx, completed)

    # sync-twin: end

    # -- async only ------------------------------------------------------------------------

    async def _finish_shielded(self) -> None:
        """The completion and the COMMIT run to their end even if the handler is cancelled
        meanwhile (a timeout, a cancel, shutdown): a COMMIT cut off halfway would leave the
        job's fate unknown. The cancellation is raised once they are done."""
        finishing = asyncio.ensure_future(self._finish_async())
        try:
            await asyncio.shield(finishing)
        except asyncio.CancelledError:
            if finishing.done():
                raise
            while not finishing.done():
                with contextlib.suppress(asyncio.CancelledError):
                    await asyncio.shield(finishing)
            if not finishing.cancelled():
                finishing.exception()  # retrieved: its state is on the context
            raise
