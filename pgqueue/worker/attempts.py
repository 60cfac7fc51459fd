"""One attempt in the executor (:class:`Running`), and the pipeline's outcome stage: what a
handler's return, exception, stop or child's answer amounts to.

Only an operator's cancel of a stopped handler is written here: a lost lease means the job is
not ours to write; shutdown releases it later. What an exception amounts to (Retry, Fail, the
retry policy, the backoff) is decided by :mod:`pgqueue.worker.outcome`, shared with the child
processes of ``--pool process``, which decide it where the exception object is.
"""

from __future__ import annotations

import asyncio
import time
from dataclasses import dataclass, field
from typing import Any

from pgqueue.errors import Fail, JobCancelled, JobTimeout, Retry
from pgqueue.handler.job_context import ClaimedJob, JobContext
from pgqueue.handler.parking import JobParked
from pgqueue.rules.tasks import Task
from pgqueue.rules.tracing import Consumer
from pgqueue.rules.vocabulary import CancelReason
from pgqueue.worker.batches import BatchRun
from pgqueue.worker.outcome import Outcome, failed_outcome, parked_outcome, raised_outcome


@dataclass(eq=False, slots=True)
class Running:
    """A job started in a slot (alone or in a batch), until its handler is done."""

    job: ClaimedJob
    ctx: JobContext
    task: asyncio.Task[None] | None = None
    started: float = field(default_factory=time.monotonic)
    #: The attempt's span when the worker traces (pgqueue.rules.tracing), else None.
    span: Any = None
    #: The batch this job runs in (a batch task's job), else None.
    batch: BatchRun | None = None
    #: Why the handler was asked to stop so far (each reason is acted on once).
    stops: set[CancelReason] = field(default_factory=set)


class Verdicts:
    """The outcome stage, for one worker (its id goes into error records)."""

    def __init__(self, worker_id: str, tracer: Consumer | None) -> None:
        self.worker_id = worker_id
        self.tracer = tracer

    def raised(self, running: Running, task: Task[..., Any], exc: BaseException) -> Outcome | None:
        """What the attempt amounts to when the handler raised (or was cancelled)."""
        job, ctx = running.job, running.ctx
        if isinstance(exc, JobParked):
            return self.parked(running, task, exc)
        if running.span is not None and not isinstance(exc, asyncio.CancelledError | JobCancelled):
            assert self.tracer is not None
            self.tracer.failed(running.span, exc)
        if isinstance(exc, asyncio.CancelledError):
            return self.stopped(running, task, None)
        if isinstance(exc, JobCancelled):
            return self.stopped(running, task, exc)
        if isinstance(exc, JobTimeout | Retry | Fail):
            return raised_outcome(task, job, exc, self.worker_id)
        if ctx.cancel_reason in ("lease lost", "shutdown"):
            return self.stopped(running, task, exc)
        return failed_outcome(task, job, exc, self.worker_id)

    def parked(self, running: Running, task: Task[..., Any], signal: JobParked) -> Outcome | None:
        """The handler slept or waited: the job parks, unless it was asked to stop meanwhile
        (cancelled: written cancelled; its lease lost: not ours)."""
        if running.ctx.cancel_reason in ("cancelled", "lease lost"):
            return self.stopped(running, task, None)
        return parked_outcome(running.job, signal)

    def stopped(
        self, running: Running, task: Task[..., Any], exc: BaseException | None
    ) -> Outcome | None:
        """A handler that stopped because we asked it to."""
        reason = running.ctx.cancel_reason
        if reason == "cancelled":
            return Outcome(running.job, "cancelled")
        if reason == "timeout":
            timeout = JobTimeout(f"{task.name} timed out after {task.timeout:g}s")
            return failed_outcome(task, running.job, exc or timeout, self.worker_id)
        return None
