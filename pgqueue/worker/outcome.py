"""The result of one attempt, as the completer writes it, and how a handler's return or raise
becomes one (shared with the child processes of ``pool="process"``)."""

from __future__ import annotations

import json
import logging
import traceback
from dataclasses import dataclass
from datetime import timedelta
from typing import TYPE_CHECKING, Any

from pgqueue.errors import Fail, InvalidJobError, Retry
from pgqueue.handler.job_context import ClaimedJob
from pgqueue.rules.payload import dumps
from pgqueue.rules.vocabulary import OutcomeKind

if TYPE_CHECKING:
    from pgqueue.rules.tasks import Task

# The executor's logger: these lines are about the attempts it runs.
log = logging.getLogger("pgqueue.worker.executor")

#: ack: succeeded. error: raised (retry with backoff while attempts remain, else dead letter).
#: retry: raised Retry (reschedule, attempt not burned). fail: raised Fail (dead letter now).
#: cancelled: stopped because the job was cancelled. no_retry: raised an error the task's retry
#: policy excludes (retry_on / no_retry_on): dead letter now.
Kind = OutcomeKind

# Tracebacks are for humans; a runaway recursion must not put megabytes into every row.
_MAX_TRACEBACK = 16_000
_MAX_MESSAGE = 2_000


@dataclass(slots=True)
class Outcome:
    job: ClaimedJob
    kind: Kind
    delay: float = 0.0
    error: str | None = None  # JSON object describing the error
    duration: float = 0.0  # seconds the handler ran (set by the executor)
    result: str | None = None  # the return value as JSON, for jobs that keep it (ack only)
    #: "ValueError: bad address" (the error's class and message, as stored), for the log line.
    summary: str | None = None
    #: A write of it was cut off without a reply (the connection dropped): it may have
    #: committed, so a retry that finds nothing to write is not by itself a lost lease.
    ambiguous: bool = False
    #: Already written by the handler's own transaction (``ctx.transaction()``): succeeded or
    #: cancelled (it committed), stale (its completion found the lease lost and rolled back).
    #: The completer reports it and writes nothing.
    written: str | None = None

    @classmethod
    def from_exception(
        cls, job: ClaimedJob, kind: Kind, exc: BaseException, worker_id: str, delay: float = 0.0
    ) -> Outcome:
        name, message = describe(exc)
        return cls(
            job,
            kind,
            delay,
            error_json(job, exc, worker_id, name, message),
            summary=f"{name}: {message}",
        )


def describe(exc: BaseException) -> tuple[str, str]:
    """The error's class name (module-qualified unless a builtin) and message, as stored."""
    kind = type(exc)
    name = (
        kind.__qualname__
        if kind.__module__ == "builtins"
        else f"{kind.__module__}.{kind.__qualname__}"
    )
    message = str(exc) or name
    return name, message[:_MAX_MESSAGE].replace("\x00", "\\0")


def error_json(
    job: ClaimedJob,
    exc: BaseException,
    worker_id: str,
    name: str | None = None,
    message: str | None = None,
) -> str:
    """One attempt's error as a JSON object (the database adds the time it was recorded)."""
    if name is None or message is None:
        name, message = describe(exc)
    text = "".join(traceback.format_exception(exc))
    if len(text) > _MAX_TRACEBACK:
        text = "...(truncated)...\n" + text[-_MAX_TRACEBACK:]
    return json.dumps(
        {
            "attempt": job.attempt,
            "error": name,
            "message": message,
            "traceback": text.replace("\x00", "\\0"),
            "worker_id": worker_id,
        },
        ensure_ascii=False,
    )


# -- what an attempt amounts to -----------------------------------------------------------


def returned_outcome(task: Task[..., Any], job: ClaimedJob, value: Any, worker_id: str) -> Outcome:
    """The handler returned ``value``."""
    # Finished, even if asked to stop meanwhile: report it (the ack is fenced anyway).
    if not job.wants_result:
        return Outcome(job, "ack")  # nobody reads the value: do not even serialise it
    try:
        result = dumps(value, limit=task.app.max_payload_bytes, what="result")
    except InvalidJobError as exc:
        # Storing it can never work, so retrying cannot help: fail for good, saying why.
        error = InvalidJobError(f"task {task.name!r} returned a value that cannot be stored: {exc}")
        return Outcome.from_exception(job, "fail", error, worker_id)
    return Outcome(job, "ack", result=result)


def failed_outcome(
    task: Task[..., Any], job: ClaimedJob, exc: BaseException, worker_id: str
) -> Outcome:
    """A failed attempt: retried with the task's backoff while attempts remain, unless its
    retry policy (``retry_on`` / ``no_retry_on``) makes the error final."""
    if not task.retry_policy.retryable(exc):
        # retry_on / no_retry_on say this error is final: dead-letter now.
        return Outcome.from_exception(job, "no_retry", exc, worker_id)
    try:
        delay = task.retry_delay(job.attempt, exc) if job.attempt < job.max_attempts else 0.0
    except Exception:
        log.exception("backoff policy failed; retrying at once task=%s", task.name)
        delay = 0.0
    return Outcome.from_exception(job, "error", exc, worker_id, delay)


def raised_outcome(
    task: Task[..., Any], job: ClaimedJob, exc: Exception, worker_id: str
) -> Outcome:
    """The handler raised ``exc`` (not JobCancelled, and not because it was asked to stop)."""
    if isinstance(exc, Retry):
        try:
            delay = exc.delay if exc.delay is not None else task.retry_delay(job.attempt, exc)
        except Exception:
            log.exception("backoff policy failed; retrying at once task=%s", task.name)
            delay = 0.0
        if isinstance(delay, timedelta):
            delay = delay.total_seconds()
        return Outcome(job, "retry", float(delay))
    if isinstance(exc, Fail):
        return Outcome.from_exception(job, "fail", exc, worker_id)
    return failed_outcome(task, job, exc, worker_id)
