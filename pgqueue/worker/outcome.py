"""The result of one attempt, as the completer writes it, and how a handler's return or raise
becomes one (shared with the child processes of ``pool="process"``)."""

from __future__ import annotations

import json
import logging
import math
import os
import traceback
from dataclasses import dataclass
from datetime import timedelta
from typing import TYPE_CHECKING, Any

from pgqueue.errors import Fail, InvalidJobError, Retry
from pgqueue.handler.job_context import ClaimedJob, JobContext
from pgqueue.handler.job_transaction import COMMITTED, LOST, UNKNOWN
from pgqueue.handler.parking import JobParked
from pgqueue.rules.log_actions import Action, fields
from pgqueue.rules.options import MAX_DURATION
from pgqueue.rules.payload import dumps
from pgqueue.rules.vocabulary import OutcomeKind
from pgqueue.worker.array_params import int_array
from pgqueue.worker.store import Row

if TYPE_CHECKING:
    from pgqueue.rules.tasks import Task

# The executor's logger: these lines are about the attempts it runs.
log = logging.getLogger("pgqueue.worker.executor")

#: ack: succeeded. error: raised (retry with backoff while attempts remain, else dead letter).
#: retry: raised Retry (reschedule, attempt not burned). fail: raised Fail (dead letter now).
#: cancelled: stopped because the job was cancelled. no_retry: raised an error the task's retry
#: policy excludes (retry_on / no_retry_on): dead letter now. park: a durable sleep or wait
#: (the job is scheduled until it wakes; attempt not burned).
Kind = OutcomeKind

# pgqueue's own source tree: the frames a traceback starts with before it reaches the handler.
_PACKAGE = os.path.dirname(os.path.dirname(os.path.abspath(__file__))) + os.sep

# Tracebacks are for humans; a runaway recursion must not put megabytes into every row.
_MAX_TRACEBACK = 16_000
_MAX_MESSAGE = 2_000
# A retry delay the database can add to now() (a backoff callable may return anything).
_MAX_DELAY = MAX_DURATION.total_seconds()

#: Each outcome of a batch and what its write made of it (succeeded, cancelled, retry, dead,
#: stale, ...).
Written = list[tuple["Outcome", str]]


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
    #: A ``park`` outcome's sleep or wait (what ``park_sleeps`` / ``park_for_events`` write).
    park: JobParked | None = None

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


def format_traceback(exc: BaseException) -> str:
    """``exc``'s traceback as stored and shown: without the frames of pgqueue's own that
    called the handler (the worker's loop, its executor), which every traceback would otherwise
    start with; the handler's frames, and anything it called, stay whole."""
    summary = traceback.TracebackException.from_exception(exc)
    _drop_callers(summary, set())
    return "".join(summary.format())


def _drop_callers(summary: traceback.TracebackException, seen: set[int]) -> None:
    if id(summary) in seen:  # a cycle in __cause__ / __context__
        return
    seen.add(id(summary))
    frames = list(summary.stack)
    start = 0
    while start < len(frames) and frames[start].filename.startswith(_PACKAGE):
        start += 1
    # An error raised by pgqueue itself (a timeout, a lost lease) keeps its frames: they are the
    # story.
    if 0 < start < len(frames):
        summary.stack = traceback.StackSummary.from_list(frames[start:])
    for chained in (summary.__cause__, summary.__context__, *(summary.exceptions or ())):
        if chained is not None:
            _drop_callers(chained, seen)


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
    text = format_traceback(exc)
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
        # Typed by the return annotation: stored in the form pgq.result() decodes.
        codec = task.binder.codec
        if codec.result is not None:
            value = codec.encode_result(value)
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
        log.exception(
            "backoff policy failed; retrying at once",
            extra=fields(Action.RETRY_POLICY_FAILED, task=task.name),
        )
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
            log.exception(
                "backoff policy failed; retrying at once",
                extra=fields(Action.RETRY_POLICY_FAILED, task=task.name),
            )
            delay = 0.0
        if isinstance(delay, timedelta):
            delay = delay.total_seconds()
        return Outcome(job, "retry", float(delay))
    if isinstance(exc, Fail):
        return Outcome.from_exception(job, "fail", exc, worker_id)
    return failed_outcome(task, job, exc, worker_id)


def arguments(
    task: Task[..., Any], job: ClaimedJob, ctx: JobContext, worker_id: str
) -> tuple[list[Any], dict[str, Any]] | Outcome:
    """The handler's arguments, or the outcome of a job that can never run."""
    try:
        if job.attempt > job.max_attempts:
            # Only a row edited by hand gets here (waiting jobs always have attempts left).
            raise InvalidJobError(
                f"no attempts left: claimed for attempt {job.attempt} of "
                f"max_attempts {job.max_attempts} (attempts edited by hand?)"
            )
        args, kwargs = task.binder.bind(job.args)
    except InvalidJobError as exc:
        # The stored args can never fit this handler: retrying cannot help.
        return Outcome.from_exception(job, "fail", exc, worker_id)
    if task.pass_context:
        args.insert(0, ctx)
    return args, kwargs


def transaction_outcome(ctx: JobContext, outcome: Outcome | None) -> Outcome | None:
    """The attempt of a handler that used ``ctx.transaction()``: once that transaction ended,
    its outcome is what the transaction wrote, whatever the handler did next."""
    job = ctx.job
    state = ctx.transaction_state
    if state == COMMITTED:
        if outcome is None or outcome.kind != "ack":
            log.warning(
                "handler failed after its transaction completed the job; ignored (the job "
                "is complete)",
                extra=fields(
                    Action.JOB_FAILED_AFTER_COMMIT,
                    job_id=job.id,
                    task=job.task,
                    attempt=job.attempt,
                    error=(outcome.summary if outcome is not None else None) or "stopped",
                ),
            )
        elif outcome.result not in (None, "null") and ctx.result_json is None:
            log.warning(
                "handler returned a value after its transaction completed the job: not "
                "kept (call ctx.set_result(value) inside the block)",
                extra=fields(Action.JOB_RESULT_NOT_KEPT, job_id=job.id, task=job.task),
            )
        return Outcome(job, "ack", written=ctx.completed_as or "succeeded")
    if state == LOST:
        return Outcome(job, "ack", written="stale")
    if state == UNKNOWN:
        log.warning(
            "the job's transaction may or may not have committed (its COMMIT got no reply "
            "and the server could not be asked); nothing written: if it did not commit, "
            "the job runs again once its lease expires",
            extra=fields(Action.OUTCOME_UNKNOWN, job_id=job.id, task=job.task, attempt=job.attempt),
        )
        return None
    return outcome  # rolled back (or never ended): the attempt as the handler left it


# -- how the completer writes outcomes (shared with pgqueue.testing) -----------------------


def ack_params(chunk: list[Outcome]) -> dict[str, Any]:
    """``ack_jobs``'s parameters for a batch of successes."""
    return {
        "ids": int_array([o.job.id for o in chunk]),
        "tokens": int_array([o.job.lease_token for o in chunk]),
        # NULL when no job keeps a result (most batches): unnest pads with NULLs.
        "results": (
            [o.result for o in chunk] if any(o.result is not None for o in chunk) else None
        ),
    }


def acked(chunk: list[Outcome], rows: list[Row]) -> Written:
    """What ``ack_jobs`` did with each outcome: succeeded, cancelled (cancelled while its handler
    ran: recorded as cancelled) or stale (the lease was lost)."""
    done: dict[int, bool] = {row[0]: row[1] for row in rows}
    written: Written = []
    for outcome in chunk:
        cancelled = done.get(outcome.job.id)
        if cancelled is None:
            written.append((outcome, "stale"))
        else:
            written.append((outcome, "cancelled" if cancelled else "succeeded"))
    return written


def fail_params(chunk: list[Outcome], wake: list[str] | None = None) -> dict[str, Any]:
    """``fail_jobs``'s parameters for a batch of unsuccessful outcomes."""
    return {
        "ids": [o.job.id for o in chunk],
        "tokens": [o.job.lease_token for o in chunk],
        "kinds": [o.kind for o in chunk],
        "delays": [clamped_delay(o.delay) for o in chunk],
        "errors": [o.error for o in chunk],
        "wake": wake,
    }


def failed(chunk: list[Outcome], rows: list[Row]) -> Written:
    """What ``fail_jobs`` decided for each outcome: retry, dead, cancelled, or stale."""
    decided: dict[int, str] = {row[0]: row[1] for row in rows}
    return [(o, decided.get(o.job.id, "stale")) for o in chunk]


def parked_outcome(job: ClaimedJob, signal: JobParked) -> Outcome:
    """The handler slept or waited (``JobParked``): the job leaves the worker, not a failure
    (no error, no attempt burned, nothing for a circuit breaker)."""
    return Outcome(job, "park", park=signal)


def park_sleep_params(chunk: list[Outcome]) -> dict[str, Any]:
    """``park_sleeps``' parameters for a batch of sleeping jobs."""
    params, parks = _park_params(chunk)
    params["delays"] = [p.delay or 0.0 for p in parks]
    params["untils"] = [p.until for p in parks]
    return params


def park_wait_params(chunk: list[Outcome]) -> dict[str, Any]:
    """``park_for_events``' parameters for a batch of waiting jobs."""
    params, parks = _park_params(chunk)
    params["events"] = [p.event for p in parks]
    params["timeouts"] = [p.timeout for p in parks]
    return params


def _park_params(chunk: list[Outcome]) -> tuple[dict[str, Any], list[JobParked]]:
    """The parameters every park statement takes (the jobs, their leases and the steps they
    park at), and the parks, for the parameters of their kind."""
    parks = [o.park for o in chunk if o.park is not None]
    params = {
        "ids": int_array(o.job.id for o in chunk),
        "tokens": int_array(o.job.lease_token for o in chunk),
        "seqs": [p.seq for p in parks],
        "names": [p.name for p in parks],
    }
    return params, parks


#: What a park statement says of a job whose cancel was requested while it ran: not parked
#: (it would wake later and run on), to be written cancelled instead.
CANCEL_REQUESTED = "cancel_requested"


def parked(chunk: list[Outcome], rows: list[Row]) -> Written:
    """What a park statement did with each outcome (its rows end with the job's state):
    parked, stale (the lease was lost: no row, or 'lost'), or :data:`CANCEL_REQUESTED`."""
    states = {row[0]: row[-1] for row in rows}

    def what(outcome: Outcome) -> str:
        state = states.get(outcome.job.id, "lost")
        if state == "lost":
            return "stale"
        return CANCEL_REQUESTED if state == CANCEL_REQUESTED else "parked"

    return [(o, what(o)) for o in chunk]


def cancel_instead(outcome: Outcome) -> None:
    """A park the job's cancel request overtook: the outcome becomes a cancel (written by
    ``fail_jobs`` like a handler's that stopped on the request)."""
    outcome.kind = "cancelled"
    outcome.park = None


def clamped_delay(seconds: float) -> float:
    """A retry delay the database can add to ``now()`` (a backoff may return anything)."""
    if math.isnan(seconds):
        return 0.0
    return min(max(seconds, 0.0), _MAX_DELAY)
