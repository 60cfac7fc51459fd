"""The exceptions pgqueue raises, as one small tree rooted at :class:`PgQueueError`.

Every error a caller can trigger with bad input is raised *before* anything is written, and its
message names the offending value, so ``except PgQueueError`` is enough to catch all of them.
"""

from __future__ import annotations

import re


class PgQueueError(Exception):
    """Base class of every error raised by pgqueue."""


class ConfigurationError(PgQueueError):
    """The queue could not be set up: no DSN, embedded server unavailable, bad setting."""


class InvalidJobError(PgQueueError, ValueError):
    """A job was rejected before anything was written (bad args, bad option, bad name)."""


class UnsupportedConnectionError(PgQueueError, TypeError):
    """``conn=`` is not a connection pgqueue can use (the message says which are accepted), or
    it is closed or in an aborted transaction."""


class UnknownTaskError(PgQueueError, LookupError):
    """A task name that neither this :class:`~pgqueue.PgQueue` registered nor any worker has
    declared (raised by an enqueue by name: the message names the closest known names).
    ``task`` is the name, ``close`` the closest known names (when the enqueue checked it)."""

    def __init__(self, message: str, *, task: str = "", close: tuple[str, ...] = ()) -> None:
        super().__init__(message)
        self.task = task
        self.close = close


class SchemaVersionError(PgQueueError):
    """The database's pgqueue schema is missing, or at a revision other than the one this
    pgqueue needs (behind: migrate it; ahead: upgrade pgqueue). The message names both
    revisions and the command to run; ``database`` is None when the schema is missing."""

    def __init__(self, message: str, *, database: str | None, package: str) -> None:
        super().__init__(message)
        self.database = database
        self.package = package


class DatabaseConnectionError(PgQueueError):
    """pgqueue could not connect to PostgreSQL. ``cause`` is the driver's error (also the
    exception's ``__cause__``), ``server`` the DSN's host and database (never its password),
    ``hint`` what to check."""

    def __init__(self, problem: str, *, cause: BaseException, server: str, hint: str) -> None:
        super().__init__(f"{problem} ({server}): {hint}")
        self.problem = problem
        self.cause = cause
        self.server = server
        self.hint = hint


class DatabaseUnavailableError(DatabaseConnectionError):
    """The server could not be reached, or refused the connection (down, restarting, all
    connection slots taken): usually passes; workers wait it out at start-up."""


class DatabaseRejectedError(DatabaseConnectionError):
    """The server answered and refused this DSN for good (the database does not exist, the
    password or the role is wrong, pg_hba.conf has no entry): trying again cannot help."""


class JobNotFoundError(PgQueueError, LookupError):
    """No job with that id exists (live, finished in history, or dead-lettered); from
    ``pgq.result()``: pgqueue never handed out that id."""


class JobFailedError(PgQueueError):
    """Raised by ``pgq.result()`` when the job ended without succeeding.

    ``state`` is ``'dead'`` or ``'cancelled'``; ``error`` is the last error message recorded.
    """

    def __init__(self, job_id: int, state: str, error: str | None) -> None:
        detail = f": {error}" if error else ""
        super().__init__(f"job {job_id} ended {state}{detail}")
        self.job_id = job_id
        self.state = state
        self.error = error


class JobDeadError(JobFailedError):
    """The job failed for good and is in the dead letters."""


class JobCancelledError(JobFailedError):
    """The job was cancelled (by an operator, or because a workflow parent failed)."""


class ResultUnavailableError(PgQueueError, LookupError):
    """The job exists (or existed) but its result is not kept: the job was enqueued without
    ``result_ttl``, or the result expired."""


class WorkflowNotFoundError(PgQueueError, LookupError):
    """No workflow with that id (unknown, or pruned with its jobs' history)."""


class ResultTimeoutError(PgQueueError, TimeoutError):
    """``pgq.result(..., timeout=...)`` gave up waiting; the job is still live."""


class QueueFullError(PgQueueError):
    """A queue is at its ``max_depth``: the job was not enqueued (backpressure)."""

    def __init__(self, queue: str, max_depth: int, waiting: int | None = None, adding: int = 1):
        self.queue = queue
        self.max_depth = max_depth
        detail = f"{waiting} waiting, " if waiting is not None else ""
        extra = f" cannot take {adding} more" if adding > 1 else ""
        super().__init__(
            f"queue {queue!r} is full{extra} ({detail}max_depth {max_depth}): wait for workers "
            "to catch up, pass wait_if_full=SECONDS, or raise the queue's max_depth"
        )

    @classmethod
    def from_database(cls, exc: BaseException) -> QueueFullError | None:
        """The error ``pgqueue.enqueue_job`` raises for a full queue (SQLSTATE PGQ01)."""
        if getattr(exc, "sqlstate", None) != "PGQ01":
            return None
        match = _FULL.match(str(getattr(getattr(exc, "diag", None), "message_primary", "")))
        if match is None:
            return cls("?", 0)
        return cls(match.group(1).replace("''", "'"), int(match.group(2)))


_FULL = re.compile(r"^queue '(.*)' is full \(max_depth (\d+)\)$", re.DOTALL)


class Retry(Exception):
    """Raised by a handler to run the job again later without counting it as an error.

    The attempt is not burned and no error is recorded; ``delay`` is in seconds (or a
    ``timedelta``); ``None`` lets the task's backoff policy decide.
    """

    def __init__(self, delay: float | None = None, reason: str = "") -> None:
        super().__init__(reason or f"retry requested (delay={delay})")
        self.delay = delay
        self.reason = reason


class Fail(Exception):
    """Raised by a handler to dead-letter the job at once, skipping the remaining attempts."""


class JobTimeout(Exception):
    """The handler ran longer than its task's timeout (a failed attempt, retried like any other
    error unless the task's ``no_retry_on`` includes it)."""


class JobCancelled(Exception):
    """Raised inside a handler (via ``ctx.raise_if_cancelled()``) when its job was cancelled or
    its lease was lost, so cooperative sync handlers can stop early."""


class LeaseLost(JobCancelled):
    """Raised by ``ctx.transaction()`` when the job's completion found that this worker no
    longer holds the job (its lease expired and it was reaped or claimed again): the
    transaction was rolled back, so nothing the block wrote is kept, and the worker writes
    nothing for this attempt. The job's new holder runs it."""


class CommitOutcomeUnknown(PgQueueError):
    """The connection failed while ``ctx.transaction()`` committed, and pgqueue could not find
    out whether the commit happened (the server stayed unreachable). Nothing is written for the
    attempt: if the transaction committed, the job is complete; if not, the job's lease runs
    out and it runs again. Either way its effects are applied once."""


class JobTransactionError(PgQueueError, RuntimeError):
    """``ctx.transaction()`` used where it cannot work: outside a worker, a second block after
    the job was completed, a block inside another, or ``ctx.set_result()`` outside a block."""


class InvalidCursorError(PgQueueError, ValueError):
    """A search cursor that no search page handed out (truncated, edited, or from another
    version of pgqueue)."""


class SearchTimeoutError(PgQueueError, TimeoutError):
    """A job search ran past its time limit: the filters select too little of what an index
    holds (say an error text alone over millions of finished jobs). Narrow it."""


class StepError(PgQueueError, RuntimeError):
    """``ctx.step()`` used in a way that cannot be checkpointed: a step name used twice in one
    run (:class:`DuplicateStepError`), a run whose steps differ from its job's checkpoints
    (:class:`NondeterministicStepError`), or a step outside a job run by a worker."""


class DuplicateStepError(StepError):
    """A step name used twice in one run of a job: each step needs its own name (a step in a
    loop: ``ctx.step(name, fn, repeat=True)`` numbers them, or put the loop's index in it)."""


class NondeterministicStepError(StepError):
    """A run of a durable job called its steps in another order, or with other names, than the
    run that recorded its checkpoints: the order and names of steps must be the same on every
    run. The message names the step and what was recorded in its place."""


class EventTimeout(PgQueueError, TimeoutError):
    """``ctx.wait_for_event()`` reached its timeout before the event was emitted."""
