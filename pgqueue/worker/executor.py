"""The executor: runs handlers in slots and turns each attempt into an :class:`Outcome`.

``async def`` handlers run as tasks on the worker's event loop; plain functions run in a thread
pool. A slot is taken when a job is started and given back when its handler is done (or, for a
sync handler past its timeout, abandoned). Stopping a handler:

* lease lost / cancelled / shutdown: ``ctx.cancelled`` turns true; async handlers are also
  cancelled (``asyncio.CancelledError`` raised at their current ``await``);
* timeout: async handlers are cancelled; a sync handler's thread cannot be killed, so it is
  abandoned: the attempt is recorded as failed at once and whatever it returns later is ignored.
"""

from __future__ import annotations

import asyncio
import contextvars
import logging
import time
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from datetime import timedelta
from typing import Any

from pgqueue.errors import Fail, InvalidJobError, JobCancelled, Retry
from pgqueue.payload import call_arguments, dumps
from pgqueue.tasks import Task
from pgqueue.worker.context import ClaimedJob, JobContext, reset_current, set_current
from pgqueue.worker.outcome import Outcome

log = logging.getLogger("pgqueue.worker.executor")


class JobTimeout(Exception):
    """The handler ran longer than its task's timeout (a failed attempt, retried like any other
    error unless the task's ``no_retry_on`` includes it)."""


@dataclass(eq=False)
class Running:
    job: ClaimedJob
    ctx: JobContext
    task: asyncio.Task[None] | None = None
    started: float = field(default_factory=time.monotonic)


class Executor:
    def __init__(
        self,
        tasks: dict[str, Task[..., Any]],
        concurrency: int,
        worker_id: str,
        submit: Callable[[Outcome], None],
        max_concurrency: int | None = None,
    ) -> None:
        self.tasks = tasks
        self.concurrency = concurrency
        self.worker_id = worker_id
        self.submit = submit
        # Keyed by (job id, lease token): the same job can be re-claimed by this worker while
        # the handler of its lost attempt is still winding down.
        self.running: dict[tuple[int, int], Running] = {}
        self.slot_freed = asyncio.Event()
        self.abandoned = 0  # sync handlers still running past their timeout
        self.threads_busy = 0  # sync handlers executing right now (touched only on the loop)
        self._threads = ThreadPoolExecutor(
            max_workers=max(concurrency, max_concurrency or 0), thread_name_prefix="pgqueue-job"
        )

    # -- slots -------------------------------------------------------------------------------

    def resize(self, concurrency: int) -> None:
        """Change the number of slots (the autoscaler); running jobs are never stopped."""
        self.concurrency = concurrency
        self.slot_freed.set()  # a fetcher waiting for a slot may have one now

    def free_slots(self) -> int:
        return self.concurrency - len(self.running)

    def idle(self) -> bool:
        return not self.running

    def held(self) -> list[tuple[int, int]]:
        """(id, lease_token) of every job whose handler is running."""
        return list(self.running)

    async def wait_for_slot(self) -> None:
        while self.free_slots() <= 0:
            self.slot_freed.clear()
            await self.slot_freed.wait()

    # -- running -----------------------------------------------------------------------------

    def start(self, job: ClaimedJob) -> None:
        ctx = JobContext(job, self.worker_id)
        running = Running(job, ctx)
        self.running[job.id, job.lease_token] = running
        running.task = asyncio.get_running_loop().create_task(
            self._run(running), name=f"pgqueue-job-{job.id}"
        )

    async def _run(self, running: Running) -> None:
        outcome: Outcome | None = None
        try:
            outcome = await self._attempt(running)
        except Exception:  # pragma: no cover - _attempt turns every handler error into outcomes
            log.exception("executor bug while running job id=%s", running.job.id)
        finally:
            self.running.pop((running.job.id, running.job.lease_token), None)
            self.slot_freed.set()
        if outcome is not None:
            outcome.duration = time.monotonic() - running.started
            self.submit(outcome)

    async def _attempt(self, running: Running) -> Outcome | None:
        job, ctx = running.job, running.ctx
        task = self.tasks[job.task]
        try:
            if job.attempt > job.max_attempts:
                # Only a row edited by hand gets here (waiting jobs always have attempts left).
                raise InvalidJobError(
                    f"no attempts left: claimed for attempt {job.attempt} of "
                    f"max_attempts {job.max_attempts} (attempts edited by hand?)"
                )
            args, kwargs = call_arguments(task.signature, task.name, job.args)
        except InvalidJobError as exc:
            # The stored args can never fit this handler: retrying cannot help.
            return Outcome.from_exception(job, "fail", exc, self.worker_id)
        if task.pass_context:
            args.insert(0, ctx)
        try:
            if task.is_async:
                value = await self._run_async(task, ctx, args, kwargs)
            else:
                value = await self._run_sync(task, ctx, args, kwargs)
        except asyncio.CancelledError:
            return self._stopped(running, None)
        except JobCancelled as exc:
            return self._stopped(running, exc)
        except JobTimeout as exc:
            return self._failed(task, job, exc)
        except Retry as exc:
            delay = exc.delay if exc.delay is not None else task.retry_delay(job.attempt, exc)
            if isinstance(delay, timedelta):
                delay = delay.total_seconds()
            return Outcome(job, "retry", float(delay))
        except Fail as exc:
            return Outcome.from_exception(job, "fail", exc, self.worker_id)
        except Exception as exc:
            if ctx.cancel_reason in ("lease lost", "shutdown"):
                return self._stopped(running, exc)
            return self._failed(task, job, exc)
        # Finished, even if asked to stop meanwhile: report it (the ack is fenced anyway).
        if not job.wants_result:
            return Outcome(job, "ack")  # nobody reads the value: do not even serialise it
        try:
            result = dumps(value, limit=task.app.max_payload_bytes, what="result")
        except InvalidJobError as exc:
            # Storing it can never work, so retrying cannot help: fail for good, saying why.
            error = InvalidJobError(
                f"task {task.name!r} returned a value that cannot be stored: {exc}"
            )
            return Outcome.from_exception(job, "fail", error, self.worker_id)
        return Outcome(job, "ack", result=result)

    def _failed(self, task: Task[..., Any], job: ClaimedJob, exc: BaseException) -> Outcome:
        if not task.retry_policy.retryable(exc):
            # retry_on / no_retry_on say this error is final: dead-letter now.
            return Outcome.from_exception(job, "no_retry", exc, self.worker_id)
        try:
            delay = task.retry_delay(job.attempt, exc) if job.attempt < job.max_attempts else 0.0
        except Exception:
            log.exception("backoff policy failed; retrying at once task=%s", task.name)
            delay = 0.0
        return Outcome.from_exception(job, "error", exc, self.worker_id, delay)

    def _stopped(self, running: Running, exc: BaseException | None) -> Outcome | None:
        """A handler that stopped because we asked it to. Only an operator's cancel is written
        here: a lost lease means the job is not ours to write; shutdown releases it later."""
        reason = running.ctx.cancel_reason
        if reason == "cancelled":
            return Outcome(running.job, "cancelled")
        if reason == "timeout":
            task = self.tasks[running.job.task]
            timeout = JobTimeout(f"{task.name} timed out after {task.timeout:g}s")
            return self._failed(task, running.job, exc or timeout)
        return None

    async def _run_async(
        self, task: Task[..., Any], ctx: JobContext, args: list[Any], kwargs: dict[str, Any]
    ) -> Any:
        token = set_current(ctx)
        # A timeout is one more reason to stop the handler, set before it is cancelled so the
        # handler (and _stopped) can tell why.
        timer = None
        if task.timeout is not None:
            timer = asyncio.get_running_loop().call_later(
                task.timeout, self.stop_job, ctx.id, "timeout", ctx.job.lease_token
            )
        try:
            return await task.func(*args, **kwargs)
        finally:
            if timer is not None:
                timer.cancel()
            reset_current(token)

    async def _run_sync(
        self, task: Task[..., Any], ctx: JobContext, args: list[Any], kwargs: dict[str, Any]
    ) -> Any:
        context = contextvars.copy_context()
        context.run(set_current, ctx)
        loop = asyncio.get_running_loop()
        future = loop.run_in_executor(
            self._threads, lambda: context.run(task.func, *args, **kwargs)
        )
        self.threads_busy += 1
        future.add_done_callback(self._thread_done)
        if task.timeout is None:
            # shield: cancelling our wait (shutdown) must not pretend to stop the thread.
            return await asyncio.shield(future)
        try:
            return await asyncio.wait_for(asyncio.shield(future), task.timeout)
        except TimeoutError:
            ctx.cancel("timeout")
            self._abandon(future, ctx)
            raise JobTimeout(
                f"{task.name} timed out after {task.timeout:g}s (thread abandoned)"
            ) from None

    def _thread_done(self, _: asyncio.Future[Any]) -> None:
        self.threads_busy -= 1

    def _abandon(self, future: asyncio.Future[Any], ctx: JobContext) -> None:
        self.abandoned += 1

        def finished(_: asyncio.Future[Any]) -> None:
            self.abandoned -= 1
            if not future.cancelled() and future.exception() is None:
                log.info(
                    "abandoned handler finished late; result ignored job_id=%s task=%s attempt=%s",
                    ctx.id,
                    ctx.task,
                    ctx.attempt,
                )

        future.add_done_callback(finished)

    # -- stopping handlers -------------------------------------------------------------------

    def stop_job(self, job_id: int, reason: str, token: int | None = None) -> bool:
        """Ask the handler(s) of a job to stop (cancelled, timeout), or of one attempt (lease
        lost: ``token``). False if nothing matching runs here."""
        matching = [
            r
            for (jid, tok), r in self.running.items()
            if jid == job_id and (token is None or tok == token)
        ]
        for running in matching:
            self._stop(running, reason)
        return bool(matching)

    def _stop(self, running: Running, reason: str) -> None:
        running.ctx.cancel(reason)
        if running.task is not None and self.tasks[running.job.task].is_async:
            running.task.cancel()

    def stop_all(self, reason: str) -> list[Running]:
        stopped = list(self.running.values())
        for running in stopped:
            self._stop(running, reason)
        return stopped

    async def wait_idle(self, timeout: float) -> bool:
        """Wait until no handler runs (True) or ``timeout`` passes (False)."""
        loop = asyncio.get_running_loop()
        deadline = loop.time() + timeout
        while self.running:
            remaining = deadline - loop.time()
            if remaining <= 0:
                return False
            self.slot_freed.clear()
            try:
                await asyncio.wait_for(self.slot_freed.wait(), remaining)
            except TimeoutError:
                return not self.running
        return True

    def shutdown_threads(self) -> bool:
        """Stop the thread pool; False if handler threads are still running (abandoned or
        released at shutdown), which the caller may choose not to wait for."""
        busy = self.threads_busy > 0
        self._threads.shutdown(wait=not busy, cancel_futures=True)
        return not busy
