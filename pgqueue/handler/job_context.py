"""What a running handler knows about its job, and how it learns it should stop."""

from __future__ import annotations

import contextvars
import threading
from collections.abc import Callable
from dataclasses import dataclass, field
from datetime import datetime, timedelta
from typing import Any, NamedTuple, TypeVar, overload

import psycopg

from pgqueue.errors import JobCancelled, JobTransactionError
from pgqueue.handler import parking, steps
from pgqueue.handler.job_transaction import OPEN, JobTransaction, TransactionHost
from pgqueue.handler.steps import StepRetry, StepRun
from pgqueue.rules import progress as progress_values
from pgqueue.rules.payload import dumps
from pgqueue.rules.vocabulary import CancelReason, HistoryState, TransactionState

# The application's connection a transaction block was given (``conn=``), any kind pgqueue takes.
ConnT = TypeVar("ConnT")
# What a step's function returns.
R = TypeVar("R")


class ClaimedJob(NamedTuple):
    """A job this worker holds, as the claim returned it. (A named tuple, not a frozen
    dataclass: one is made per claimed job, and a frozen dataclass's ``__init__`` costs a
    ``object.__setattr__`` per field, about 1 us a job.)"""

    id: int
    queue: str
    task: str
    args: dict[str, Any]
    attempt: int
    max_attempts: int
    lease_token: int
    priority: int
    created_at: datetime
    run_at: datetime
    #: The job keeps its return value (result_ttl set), so the worker stores it with the ack.
    wants_result: bool = False
    #: The job's metadata and tags (None: it has none).
    meta: dict[str, Any] | None = None
    tags: list[str] | None = None
    #: The trace context (W3C traceparent) of its latest failed attempt, when that attempt
    #: was traced (see pgqueue.rules.tracing): the new attempt's span links to it.
    last_trace: str | None = None
    #: When this worker sent the claim (``time.monotonic()``): the database set the lease to
    #: expire ``lease`` seconds after it ran the claim, so the lease holds at least until
    #: ``leased_at + lease`` (what tells a retried write of a lost reply from a lost lease).
    leased_at: float = 0.0

    @classmethod
    def from_row(cls, row: tuple[Any, ...], leased_at: float = 0.0) -> ClaimedJob:
        """The job of a claim's row, its columns in :data:`CLAIMED_COLUMNS`' order (the worker's
        store puts them in that order by name, see ``pgqueue.worker.store.rows_named``)."""
        return tuple.__new__(cls, (*row[:_CLAIMED], leased_at))


#: The columns of a claim's row that make the job, by name: every field but ``leased_at`` (the
#: worker's own clock). ``claim_jobs`` and ``claim_flow`` name their columns so.
CLAIMED_COLUMNS: tuple[str, ...] = ClaimedJob._fields[:-1]
_CLAIMED = len(CLAIMED_COLUMNS)


class _TransactionFields:
    """What :meth:`JobContext.transaction` keeps on the context: class attributes, not
    dataclass fields, so a job that never opens a block costs nothing for them (one context is
    made per claimed job)."""

    #: The worker's side of the block (found when the block opens; see
    #: :func:`pgqueue.handler.job_transaction.current_host`).
    transactions: TransactionHost | None = None
    #: Where the job's :meth:`JobContext.transaction` stands (None: no block yet, or it rolled
    #: back; "open", "completing", "committed", "lost", "unknown": see
    #: pgqueue.handler.job_transaction). The worker reads it: a committed job is complete, whatever
    #: the handler does next.
    transaction_state: TransactionState | None = None
    #: Once the transaction committed: "succeeded", or "cancelled" (cancel requested while it
    #: ran: recorded as cancelled, as an ack would).
    completed_as: HistoryState | None = None
    #: The value :meth:`JobContext.set_result` gave, as the JSON the completion records.
    result_json: str | None = None
    #: This run's durable steps (:meth:`JobContext.step`): None until the run's first step, so
    #: a job that uses none costs nothing for them.
    step_run: StepRun | None = None


@dataclass(eq=False)
class JobContext(_TransactionFields):
    """Passed to handlers declared with ``pass_context=True``; also ``pgqueue.current_job()``.

    Long-running handlers should check :attr:`cancelled` (or call :meth:`raise_if_cancelled`)
    between steps: it turns true when the job is cancelled, its lease is lost, it times out, or
    the worker shuts down. Async handlers are also cancelled outright.
    """

    job: ClaimedJob
    worker_id: str
    cancel_reason: CancelReason | None = None
    _cancelled: bool = field(default=False, repr=False)
    # Created only when a sync handler waits on it: most jobs never need one, and a
    # threading.Event (a Condition and a lock) per job is measurable on the hot path.
    _event: threading.Event | None = field(default=None, repr=False)
    # The latest progress reported and not yet handed to a heartbeat (JSON text).
    _progress: str | None = field(default=None, repr=False)
    #: Where progress goes instead (a child process forwards it to its worker).
    progress_hook: Callable[[str], None] | None = field(default=None, repr=False)

    @property
    def id(self) -> int:
        """The job's id."""
        return self.job.id

    @property
    def task(self) -> str:
        """The task's name."""
        return self.job.task

    @property
    def queue(self) -> str:
        """The queue the job was claimed from."""
        return self.job.queue

    @property
    def attempt(self) -> int:
        """1 for the first attempt."""
        return self.job.attempt

    @property
    def max_attempts(self) -> int:
        """Attempts the job may have before it is dead-lettered."""
        return self.job.max_attempts

    @property
    def args(self) -> dict[str, Any]:
        """The job's arguments, by parameter name."""
        return self.job.args

    @property
    def meta(self) -> dict[str, Any]:
        """The job's metadata (``enqueue(..., meta={...})``; empty when it has none). When
        the job was enqueued inside a trace, it holds the trace context (``traceparent``)."""
        meta = self.job.meta
        return meta if isinstance(meta, dict) else {}

    @property
    def tags(self) -> list[str]:
        """The job's tags (``enqueue(..., tags=[...])``; empty when it has none)."""
        return self.job.tags or []

    @property
    def run_at(self) -> datetime:
        """When the job was due (for a cron job: its tick)."""
        return self.job.run_at

    @property
    def cancelled(self) -> bool:
        """True once the job was cancelled, its lease lost or its timeout reached: the handler
        should stop."""
        return self._cancelled

    def raise_if_cancelled(self) -> None:
        """Raise :class:`~pgqueue.JobCancelled` if :attr:`cancelled`: a cooperative stop point for
        sync handlers."""
        if self._cancelled:
            raise JobCancelled(self.cancel_reason or "cancelled")

    def wait_cancelled(self, timeout: float | None = None) -> bool:
        """Block (a sync handler's thread) until cancelled or ``timeout``; True if cancelled."""
        with _EVENT_LOCK:
            if self._event is None:
                self._event = threading.Event()
                if self._cancelled:
                    self._event.set()
            event = self._event
        return event.wait(timeout)

    def progress(self, value: progress_values.Progress) -> None:
        """Report how far the job is: the fraction done (``0.4``) or a JSON object
        (``{"done": 40, "of": 100}``, at most 4 KB). Call it as often as you like, from a sync
        or an async handler: the latest value is written with the worker's next heartbeat (no
        statement per call) and shown by ``pgqueue.running_jobs``, the dashboard,
        ``pgq jobs show`` and :meth:`PgQueue.progress <pgqueue.PgQueue.progress>`. Raises
        ValueError for anything else."""
        self.report_progress(progress_values.encode(value))

    def report_progress(self, text: str) -> None:
        """Progress already encoded as JSON (:func:`pgqueue.rules.progress.encode`): to the hook,
        else kept for the next heartbeat."""
        hook = self.progress_hook
        if hook is not None:
            hook(text)
            return
        with _EVENT_LOCK:
            self._progress = text

    def take_progress(self) -> str | None:
        """The progress reported since the last call (the heartbeat writes it), or None."""
        if self._progress is None:  # the common case, without the lock
            return None
        with _EVENT_LOCK:
            text, self._progress = self._progress, None
        return text

    def keep_progress(self, text: str) -> None:
        """Give back progress a heartbeat could not write, unless a newer value came."""
        with _EVENT_LOCK:
            if self._progress is None:
                self._progress = text

    @overload
    def transaction(
        self, conn: None = None
    ) -> JobTransaction[psycopg.Connection[Any], psycopg.AsyncConnection[Any]]: ...

    @overload
    def transaction(self, conn: ConnT) -> JobTransaction[ConnT, ConnT]: ...

    def transaction(self, conn: object = None) -> JobTransaction[Any, Any]:
        """The job's database work and its completion in one transaction: ``with
        ctx.transaction() as conn:`` in a sync handler, ``async with`` in an async one.

        The block's writes and the job's completion commit together when it ends, as the
        transaction's last statement: the job is complete if and only if they commit, so
        they happen exactly once. If this worker no longer holds the job (its lease was lost)
        the transaction is rolled back and :class:`~pgqueue.LeaseLost` raised; if the block
        raises, it is rolled back and the error fails the attempt as usual. Once it committed
        the job is done: what the handler returns or raises afterwards is ignored (keep a
        result with :meth:`set_result` inside the block). One block per attempt.

        ``conn``: write on the application's connection instead of the worker's (any
        ``conn=`` pgqueue accepts: psycopg, a SQLAlchemy ``Session``/``Connection`` or their
        async forms, Django's connection), so ORM models are saved in the same transaction;
        it must not be in a transaction already. The block's value is ``conn`` itself, or
        else a psycopg connection of the worker's; a type checker knows it as the type of
        ``conn``, or psycopg's ``Connection`` (``with``) / ``AsyncConnection`` (``async
        with``)."""
        return JobTransaction(self, conn)

    def step(
        self,
        name: str,
        fn: Callable[..., R],
        /,
        *args: Any,
        retry: int | StepRetry | None = None,
        transaction: object = False,
        repeat: bool = False,
        **kwargs: Any,
    ) -> R:
        """Run ``fn(*args, **kwargs)`` once for this job and checkpoint its return value (typed
        JSON, decoded by ``fn``'s return annotation): when the job runs again (a retry, a crash,
        a lost lease) a step that completed returns its checkpoint without calling ``fn``.

        ``name``: unique within a run (:class:`~pgqueue.DuplicateStepError`); ``repeat=True``
        numbers a step that runs in a loop (``name#1``, ``name#2``, ...). The names and order of
        steps must be the same on every run (:class:`~pgqueue.NondeterministicStepError`).
        ``retry``: try a failing step again in place (a count or a
        :class:`~pgqueue.StepRetry`) before the attempt fails and the job's policy decides.
        ``transaction=True``: ``fn(conn, *args, **kwargs)`` writes on ``conn`` in a transaction
        that also commits the checkpoint: its effects happen exactly once;
        ``transaction=conn`` (the application's connection, any ``conn=`` pgqueue takes) runs
        that transaction on ``conn`` and passes ``conn`` to ``fn``. Raises
        :class:`~pgqueue.LeaseLost` when this worker no longer holds the job (nothing is
        checkpointed). For sync handlers; ``await`` :meth:`step_async` in async ones. The
        keyword names above are the step's: pass a function taking them with
        ``functools.partial``. See docs/guide/durable.md."""
        result: R = steps.run_step(
            self, name, fn, args, kwargs, retry=retry, transaction=transaction, repeat=repeat
        )
        return result

    async def step_async(
        self,
        name: str,
        fn: Callable[..., Any],
        /,
        *args: Any,
        retry: int | StepRetry | None = None,
        transaction: object = False,
        repeat: bool = False,
        **kwargs: Any,
    ) -> Any:
        """The async form of :meth:`step`: ``fn`` may be an async function (awaited) or a sync
        one (called on the event loop); with ``transaction=True`` it gets an async connection."""
        return await steps.run_step_async(
            self, name, fn, args, kwargs, retry=retry, transaction=transaction, repeat=repeat
        )

    def sleep(self, seconds: float | timedelta, *, name: str | None = None) -> None:
        """Sleep durably: the job leaves the worker and resumes ``seconds`` later by the
        database's clock, its earlier steps replayed from their checkpoints. A negative or
        non-finite duration raises :class:`~pgqueue.InvalidJobError` before anything is read
        or recorded."""
        parking.check_parking(self, "ctx.sleep()")
        call = parking.sleep_call(seconds, None, name)
        parking.sleep_step(self, steps.load_run(self), call)

    def sleep_until(self, when: datetime, *, name: str | None = None) -> None:
        """:meth:`sleep` until ``when`` (timezone-aware)."""
        parking.check_parking(self, "ctx.sleep_until()")
        call = parking.sleep_call(None, when, name)
        parking.sleep_step(self, steps.load_run(self), call)

    def wait_for_event(self, name: str, *, timeout: float | timedelta | None = None) -> Any:
        """Wait until the event ``name`` is emitted (``pgq.emit_event``; one emitted
        before is delivered too) and return its payload; :class:`~pgqueue.EventTimeout` after
        ``timeout``. The job leaves the worker while it waits."""
        parking.check_parking(self, "ctx.wait_for_event()")
        call = parking.wait_call(name, timeout)
        return parking.wait_step(self, steps.load_run(self), call)

    async def sleep_async(self, seconds: float | timedelta, *, name: str | None = None) -> None:
        """The async form of :meth:`sleep`."""
        parking.check_parking(self, "ctx.sleep_async()")
        call = parking.sleep_call(seconds, None, name)
        parking.sleep_step(self, await steps.load_run_async(self), call)

    async def sleep_until_async(self, when: datetime, *, name: str | None = None) -> None:
        """The async form of :meth:`sleep_until`."""
        parking.check_parking(self, "ctx.sleep_until_async()")
        call = parking.sleep_call(None, when, name)
        parking.sleep_step(self, await steps.load_run_async(self), call)

    async def wait_for_event_async(
        self, name: str, *, timeout: float | timedelta | None = None
    ) -> Any:
        """The async form of :meth:`wait_for_event`."""
        parking.check_parking(self, "ctx.wait_for_event_async()")
        call = parking.wait_call(name, timeout)
        return parking.wait_step(self, await steps.load_run_async(self), call)

    def set_result(self, value: Any) -> None:
        """Inside a :meth:`transaction` block: the value the job keeps as its result (jobs
        with ``result_ttl``), recorded by the completion in the same transaction. Raises
        :class:`~pgqueue.InvalidJobError` for a value that cannot be stored."""
        if self.transaction_state != OPEN:
            raise JobTransactionError(
                "ctx.set_result() is for inside a ctx.transaction() block (elsewhere the "
                "handler's return value is the result)"
            )
        if self.job.wants_result and self.transactions is not None:
            limit = self.transactions.max_result_bytes
            self.result_json = dumps(value, limit=limit, what="result")

    def set_transaction_state(self, state: TransactionState | None) -> None:
        """Record where :meth:`transaction` stands (and tell the worker, from a child)."""
        self.transaction_state = state
        if self.transactions is not None:
            self.transactions.state_changed(self)

    def cancel(self, reason: CancelReason) -> None:
        """Mark the job cancelled for ``reason`` (the worker calls it; a handler sees
        :attr:`cancelled`)."""
        with _EVENT_LOCK:
            if self._cancelled:
                return
            self.cancel_reason = reason
            self._cancelled = True
            event = self._event
        if event is not None:
            event.set()


# Guards the lazy creation of a context's event against a concurrent cancel (loop thread vs
# handler thread), and the progress handed between a handler's thread and the heartbeat; taken
# only by cancel(), wait_cancelled() and progress calls, never per job.
_EVENT_LOCK = threading.Lock()


#: The running job's context; None inside a batch handler (it runs several jobs).
_current: contextvars.ContextVar[JobContext | None] = contextvars.ContextVar("pgqueue_current_job")


def current_job() -> JobContext:
    """The context of the job the calling handler runs (LookupError outside a handler, and
    inside a batch handler, which runs several jobs: each :class:`~pgqueue.Item` carries its
    own job's id, attempt and ``cancelled``)."""
    try:
        ctx = _current.get()
    except LookupError:
        raise LookupError("current_job() is only available inside a running job") from None
    if ctx is None:
        raise LookupError(
            "current_job() names one job, and a batch handler runs several: read each item's "
            "id, attempt and cancelled instead (durable steps, sleeps and waits need one job: "
            "a batch handler cannot sleep or wait; see docs/guide/durable.md)"
        )
    return ctx


def set_current(ctx: JobContext | None) -> contextvars.Token[JobContext | None]:
    return _current.set(ctx)


def reset_current(token: contextvars.Token[JobContext | None]) -> None:
    _current.reset(token)
