"""Where handlers run: the event loop, the handler threads, or child processes. The executor
picks one :class:`Runtime` per task when it is built (``async def`` handlers on the loop; plain
functions in threads, or with ``pool="process"`` in children), and every one-job and batch
attempt of that task goes through it: start, stop, and the attempt's end handed back to the
executor (:class:`Host`).

* :class:`LoopRuntime`: a task on the worker's event loop (started eagerly on Python 3.12+: a
  handler that never suspends is done inside ``start``). Stopping cancels it (an
  ``asyncio.CancelledError`` at its current ``await``); a timeout is one more reason to.
* :class:`ThreadRuntime`: the worker's handler threads (:mod:`pgqueue.worker.threads`: no task
  or future per job, calls handed over and results handed back in batches). A thread cannot
  be killed: past its timeout the call is abandoned (the attempt fails at once, what it
  returns later is ignored, another thread takes its place); a call asked to stop before a
  thread took it never starts.
* :class:`~pgqueue.worker.child_runtime.ChildRuntime`: the child processes of
  :mod:`pgqueue.worker.process_pool`, in a module of its own (imported only with
  ``pool="process"``: it brings multiprocessing and the children's frames).
"""

from __future__ import annotations

import asyncio
import contextvars
import logging
import sys
from collections.abc import Callable, Coroutine, Sequence
from typing import Any, Protocol

from pgqueue.errors import JobTimeout
from pgqueue.handler.job_context import JobContext, reset_current, set_current
from pgqueue.handler.parking import JobParked
from pgqueue.rules.log_actions import Action, fields
from pgqueue.rules.tasks import Task
from pgqueue.rules.vocabulary import CancelReason
from pgqueue.worker.attempts import Running, Verdicts
from pgqueue.worker.batches import BatchRun, settle
from pgqueue.worker.outcome import Outcome, arguments, returned_outcome
from pgqueue.worker.threads import HandlerThreads, ThreadCall

log = logging.getLogger("pgqueue.worker.executor")

Settled = Sequence[Outcome | BaseException | None]

if sys.version_info >= (3, 12):

    def job_task(
        loop: asyncio.AbstractEventLoop, coro: Coroutine[Any, Any, None]
    ) -> asyncio.Task[None]:
        # Eager: the job's coroutine runs at once, up to its first real suspension, so a
        # handler that never waits (a no-op, a cache hit) is done without a trip through the
        # loop's ready queue. Only the executor's job tasks: the worker's own services keep
        # the usual start-on-the-next-iteration order.
        return asyncio.Task(coro, loop=loop, eager_start=True)

else:

    def job_task(
        loop: asyncio.AbstractEventLoop, coro: Coroutine[Any, Any, None]
    ) -> asyncio.Task[None]:
        return loop.create_task(coro)


class Host(Protocol):
    """The executor, as a runtime sees it."""

    tasks: dict[str, Task[..., Any]]
    worker_id: str
    verdicts: Verdicts

    def vacate(self, running: Running) -> None:
        """The attempt's handler is done: it leaves ``running`` (its slot frees)."""

    def refill(self) -> None:
        """Slots freed: start what waits for one."""

    def record(self, running: Running, outcome: Outcome | None) -> None:
        """Hand the attempt's outcome (if it has one to write) to the completer."""

    def finish(self, running: Running, outcome: Outcome | None) -> None:
        """vacate, refill, record."""

    def finish_batch(self, run: BatchRun, settled: Settled) -> None:
        """vacate_batch, record_batch."""

    def vacate_batch(self, run: BatchRun) -> None:
        """A batch's call is over: its jobs leave ``running``, its slot frees (and refills)."""

    def record_batch(self, run: BatchRun, settled: Settled) -> None:
        """Each job of a batch's outcome to the completer."""

    def stop_job(self, job_id: int, reason: CancelReason, token: int | None = None) -> bool: ...

    def stop_batch(self, run: BatchRun, reason: CancelReason) -> None: ...


class Runtime(Protocol):
    #: Whether the worker opens the attempt's span (a child process traces its own).
    traces: bool

    def start(self, running: Running) -> None:
        """Run one job's attempt; its end goes to the host."""

    def start_batch(self, run: BatchRun) -> None:
        """Run a batch's one call; its end goes to the host."""

    def stop(self, running: Running, reason: CancelReason) -> None:
        """Stop one job's handler (its context says why already)."""

    def stop_batch(self, run: BatchRun, reason: CancelReason) -> None:
        """Stop a batch's call (every context says why already)."""

    def stop_item(self, run: BatchRun, running: Running, reason: CancelReason) -> None:
        """One job of a running batch was asked to stop; the call goes on."""

    def refresh(self, running: Running) -> None:
        """Bring what the handler reported so far (its transaction's state) up to date."""

    def resize(self, concurrency: int) -> None: ...

    async def drain(self, timeout: float) -> None:
        """Nothing runs any more: let go of what the runtime holds (within ``timeout``)."""

    def close(self) -> bool:
        """At teardown: False if handlers are still running (abandoned or released)."""


def _handler(host: Host, task: Task[..., Any], running: Running) -> Callable[..., Any]:
    """The task's function, run in the attempt's span when there is one."""
    if running.span is None:
        return task.func
    tracer = host.verdicts.tracer
    assert tracer is not None
    return tracer.wrap(task.func, running.span, task.is_async)


class _HoldsNothing:
    """What a runtime does by default with what it would hold beyond the loop's tasks:
    nothing to refresh (the handler's reports are written in the worker's memory), resize,
    drain or close."""

    def refresh(self, running: Running) -> None:
        pass

    def resize(self, concurrency: int) -> None:
        pass

    async def drain(self, timeout: float) -> None:
        pass

    def close(self) -> bool:
        return True


class OnTheLoop(_HoldsNothing):
    """Attempts as tasks on the loop: the steps before and after the call are shared."""

    traces = True

    def __init__(self, host: Host) -> None:
        self.host = host

    def start(self, running: Running) -> None:
        running.task = job_task(asyncio.get_running_loop(), self._run(running))

    def start_batch(self, run: BatchRun) -> None:
        run.aio = job_task(asyncio.get_running_loop(), self._run_batch(run))

    async def _run(self, running: Running) -> None:
        # One coroutine per job (besides the handler's own): the steps before and after the
        # handler are plain methods.
        host, job = self.host, running.job
        outcome: Outcome | None = None
        try:
            task = host.tasks[job.task]
            prepared = arguments(task, job, running.ctx, host.worker_id)
            if isinstance(prepared, Outcome):
                outcome = prepared
            else:
                outcome = await self._call(running, task, *prepared)
        except Exception:  # pragma: no cover - every handler error becomes an outcome
            log.exception(
                "executor bug while running a job", extra=fields(Action.EXECUTOR_BUG, job_id=job.id)
            )
        finally:
            host.vacate(running)
            host.refill()
        host.record(running, outcome)

    async def _run_batch(self, run: BatchRun) -> None:
        settled: Settled = []
        try:
            if run.items:
                settled = await self._call_batch(run)
        except Exception:  # pragma: no cover - every handler error becomes an outcome
            log.exception(
                "executor bug while running a batch",
                extra=fields(Action.EXECUTOR_BUG, task=run.task.name),
            )
        finally:
            self.host.vacate_batch(run)
        self.host.record_batch(run, settled)

    async def _call(
        self, running: Running, task: Task[..., Any], args: list[Any], kwargs: dict[str, Any]
    ) -> Outcome | None:
        raise NotImplementedError

    async def _call_batch(self, run: BatchRun) -> Settled:
        raise NotImplementedError


class LoopRuntime(OnTheLoop):
    """``async def`` handlers, on the worker's event loop."""

    async def _run(self, running: Running) -> None:
        # The hot path of async jobs: the handler is awaited here, in the job's one coroutine
        # (besides the handler's own), not through _call.
        host, job, ctx = self.host, running.job, running.ctx
        outcome: Outcome | None = None
        try:
            task = host.tasks[job.task]
            prepared = arguments(task, job, ctx, host.worker_id)
            if isinstance(prepared, Outcome):
                outcome = prepared
            else:
                args, kwargs = prepared
                func = _handler(host, task, running)
                token = set_current(ctx)
                # A timeout is one more reason to stop the handler, set before it is cancelled
                # so the handler (and the verdict) can tell why.
                timer = (
                    None
                    if task.timeout is None
                    else asyncio.get_running_loop().call_later(
                        task.timeout, host.stop_job, ctx.id, "timeout", job.lease_token
                    )
                )
                try:
                    try:
                        value = await func(*args, **kwargs)
                    finally:
                        if timer is not None:
                            timer.cancel()
                        reset_current(token)
                except (asyncio.CancelledError, Exception, JobParked) as exc:
                    outcome = host.verdicts.raised(running, task, exc)
                else:
                    outcome = returned_outcome(task, job, value, host.worker_id)
        except Exception:  # pragma: no cover - every handler error becomes an outcome
            log.exception(
                "executor bug while running a job", extra=fields(Action.EXECUTOR_BUG, job_id=job.id)
            )
        finally:
            host.vacate(running)
            host.refill()
        host.record(running, outcome)

    async def _call_batch(self, run: BatchRun) -> Settled:
        task, items, host = run.task, run.items, self.host
        timer = None
        if task.timeout is not None:
            timer = asyncio.get_running_loop().call_later(
                task.timeout, host.stop_batch, run, "timeout"
            )
        token = set_current(None)  # current_job() names one job: not in a batch
        try:
            value = await task.func(items)
        except (asyncio.CancelledError, Exception, JobParked) as exc:
            return settle(task, items, None, exc, host.worker_id)
        finally:
            if timer is not None:
                timer.cancel()
            reset_current(token)
        return settle(task, items, value, None, host.worker_id)

    def stop(self, running: Running, reason: CancelReason) -> None:
        if running.task is not None:
            running.task.cancel()

    def stop_batch(self, run: BatchRun, reason: CancelReason) -> None:
        if run.aio is not None:
            run.aio.cancel()

    def stop_item(self, run: BatchRun, running: Running, reason: CancelReason) -> None:
        pass  # item.cancelled says so; the call goes on


class ThreadRuntime(_HoldsNothing):
    """Sync handlers in the worker's handler threads (``pool="thread"``)."""

    traces = True

    def __init__(self, host: Host, limit: int) -> None:
        self.host = host
        self.limit = limit
        #: Started with the first sync job (on the loop, in the context handlers inherit).
        self.threads: HandlerThreads | None = None
        self.abandoned = 0  # handlers still running past their timeout

    def start(self, running: Running) -> None:
        host, loop = self.host, asyncio.get_running_loop()
        task = host.tasks[running.job.task]
        prepared = arguments(task, running.job, running.ctx, host.worker_id)
        if isinstance(prepared, Outcome):
            # Not at once: start() may be running inside the executor's refill for another job.
            loop.call_soon(host.finish, running, prepared)
            return
        args, kwargs = prepared
        call = ThreadCall(_handler(host, task, running), args, kwargs, running.ctx, running)
        self._submit(call, task, loop)

    def start_batch(self, run: BatchRun) -> None:
        loop = asyncio.get_running_loop()
        if not run.items:
            # Not at once: this runs inside the executor's refill.
            loop.call_soon(self.host.finish_batch, run, [])
            return
        self._submit(
            ThreadCall(run.task.func, [run.items], {}, None, run, stop=run), run.task, loop
        )

    def _submit(
        self, call: ThreadCall, task: Task[..., Any], loop: asyncio.AbstractEventLoop
    ) -> None:
        """Hand a call to the handler threads (started with the first), with its timeout."""
        if task.timeout is not None:
            call.timer = loop.call_later(task.timeout, self._timeout, call, task)
        threads = self.threads
        if threads is None:
            threads = self.threads = HandlerThreads(
                self.limit, self._done, loop=loop, context=contextvars.copy_context()
            )
        threads.submit(call)

    def _done(self, calls: list[ThreadCall]) -> None:
        """Sync calls that finished since the last batch (one loop callback per batch)."""
        host = self.host
        for call in calls:
            if isinstance(call.owner, BatchRun):
                self._batch_done(call.owner, call)
                continue
            running: Running = call.owner
            if call.abandoned:
                # Its attempt already failed with JobTimeout; what it did since is ignored.
                self.abandoned -= 1
                if call.error is None:
                    log.info(
                        "abandoned handler finished late; result ignored",
                        extra=fields(
                            Action.JOB_LATE,
                            job_id=running.ctx.id,
                            task=running.ctx.task,
                            attempt=running.ctx.attempt,
                        ),
                    )
                continue
            if call.timer is not None:
                call.timer.cancel()
            task = host.tasks[running.job.task]
            if call.skipped:
                outcome = host.verdicts.stopped(running, task, None)
            elif call.error is not None:
                outcome = host.verdicts.raised(running, task, call.error)
            else:
                outcome = returned_outcome(task, running.job, call.value, host.worker_id)
            host.vacate(running)
            host.record(running, outcome)
        host.refill()

    def _batch_done(self, run: BatchRun, call: ThreadCall) -> None:
        if call.abandoned:
            # Its jobs already failed with JobTimeout; what it did since is ignored.
            self.abandoned -= 1
            log.info(
                "abandoned batch handler finished late; ignored",
                extra=fields(Action.JOB_LATE, task=run.task.name, jobs=len(run.items)),
            )
            return
        if call.timer is not None:
            call.timer.cancel()
        if call.skipped:  # every job was asked to stop before a thread took it
            error: BaseException | None = asyncio.CancelledError()
        else:
            error = call.error
        settled = settle(run.task, run.items, call.value, error, self.host.worker_id)
        self.host.finish_batch(run, settled)

    def _timeout(self, call: ThreadCall, task: Task[..., Any]) -> None:
        assert self.threads is not None
        if not self.threads.abandon(call):
            return  # it finished just now: its outcome is on the way
        owner = call.owner
        contexts: list[JobContext] = owner.contexts if isinstance(owner, BatchRun) else [owner.ctx]
        for ctx in contexts:
            ctx.cancel("timeout")
        if call.abandoned:
            self.abandoned += 1
            why = "thread abandoned"
        else:
            why = "it never started: every handler thread was busy"
        error = JobTimeout(f"{task.name} timed out after {task.timeout:g}s ({why})")
        host = self.host
        if isinstance(owner, BatchRun):
            host.finish_batch(owner, settle(owner.task, owner.items, None, error, host.worker_id))
        else:
            host.finish(owner, host.verdicts.raised(owner, task, error))

    def stop(self, running: Running, reason: CancelReason) -> None:
        pass  # a thread cannot be stopped: ctx.cancelled says so, and a call not begun skips

    def stop_batch(self, run: BatchRun, reason: CancelReason) -> None:
        pass

    def stop_item(self, run: BatchRun, running: Running, reason: CancelReason) -> None:
        pass

    def close(self) -> bool:
        return self.threads is None or self.threads.close()
