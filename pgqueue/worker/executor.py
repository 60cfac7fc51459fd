"""The executor: runs handlers in slots and turns each attempt into an :class:`Outcome`.

``async def`` handlers run as tasks on the worker's event loop (started eagerly on Python 3.12+:
a handler that never suspends is done inside :meth:`Executor.start`); plain functions run in the
worker's handler threads (:mod:`pgqueue.worker.threads`: no task or future per job, calls handed
over and results handed back in batches), or with ``pool="process"`` in child processes
(:mod:`pgqueue.worker.process_pool`). A slot is taken when a job is started and given back when
its handler is done (or, for a sync handler in a thread past its timeout, abandoned; a child
past its timeout is killed first).

Prefetch: the fetcher may claim more jobs than there are free slots; the extra ones wait here
(``waiting``, leases held and heartbeated like running jobs) and start the moment a slot frees,
so the next claim overlaps with running the current batch instead of following it. With
``prefetch=None`` (auto) the executor prefetches up to eight times ``concurrency`` jobs (at most
1,000) only while recent jobs are short (a moving average under 50 ms): long jobs gain nothing
from it and would sit claimed here while another worker could have run them.

Stopping a handler:

* lease lost / cancelled / shutdown: ``ctx.cancelled`` turns true; async handlers are also
  cancelled (``asyncio.CancelledError`` raised at their current ``await``);
* timeout: async handlers are cancelled; a sync handler's thread cannot be killed, so it is
  abandoned: the attempt is recorded as failed at once and whatever it returns later is ignored
  (another thread takes its place).

A sync job asked to stop before a thread took it (all of them busy) never starts: its outcome is
the one a handler that stopped at once would have had.

Batch tasks (:mod:`pgqueue.worker.batches`): their claimed jobs are gathered instead of started;
a due batch takes one slot (whichever of it and the oldest prefetched job was due first starts
first) and runs as one call. Each of its jobs has its own entry in ``running`` (its context,
its lease, a cancel or a lost lease reach it alone); the slots count the batch once.

In a child process (``pool="process"``) the same reasons reach the handler's ``ctx.cancelled``
by a message; a timeout or shutdown then kills the child, a cancel or a lost lease does after a
short grace. The attempt's outcome waits for the child's answer or death, so nothing the
handler does can outlive it. What an exception amounts to (Retry, Fail, the retry policy,
the backoff) is decided in the child by the functions below, shared by both pools.
"""

from __future__ import annotations

import asyncio
import contextlib
import contextvars
import logging
import sys
import time
from collections import deque
from collections.abc import Callable, Coroutine, Iterator, Sequence
from dataclasses import dataclass, field
from typing import Any

from pgqueue.errors import Fail, JobCancelled, JobTimeout, Retry
from pgqueue.handler.batch import BatchTask
from pgqueue.handler.job_context import ClaimedJob, JobContext, reset_current, set_current
from pgqueue.handler.job_transaction import HOLDING, TransactionHost
from pgqueue.rules.tasks import Task
from pgqueue.rules.tracing import consumer
from pgqueue.rules.vocabulary import CancelReason
from pgqueue.worker.batches import Batches, BatchRun, Gathering, prepare, settle
from pgqueue.worker.outcome import (
    Outcome,
    arguments,
    failed_outcome,
    raised_outcome,
    returned_outcome,
    transaction_outcome,
)
from pgqueue.worker.process_pool import ChildGone, ChildReply, ChildSettings, ProcessPool
from pgqueue.worker.threads import HandlerThreads, ThreadCall

log = logging.getLogger("pgqueue.worker.executor")


@dataclass(eq=False, slots=True)
class Running:
    job: ClaimedJob
    ctx: JobContext
    task: asyncio.Task[None] | None = None
    started: float = field(default_factory=time.monotonic)
    #: The attempt's span when the worker traces (pgqueue.rules.tracing), else None.
    span: Any = None
    #: The batch this job runs in (a batch task's job), else None.
    batch: BatchRun | None = None


if sys.version_info >= (3, 12):

    def _job_task(
        loop: asyncio.AbstractEventLoop, coro: Coroutine[Any, Any, None]
    ) -> asyncio.Task[None]:
        # Eager: the job's coroutine runs at once, up to its first real suspension, so a
        # handler that never waits (a no-op, a cache hit) is done without a trip through the
        # loop's ready queue. Only the executor's job tasks: the worker's own services keep
        # the usual start-on-the-next-iteration order.
        return asyncio.Task(coro, loop=loop, eager_start=True)

else:

    def _job_task(
        loop: asyncio.AbstractEventLoop, coro: Coroutine[Any, Any, None]
    ) -> asyncio.Task[None]:
        return loop.create_task(coro)


#: Jobs shorter than this (moving average) make auto-prefetch worthwhile.
_SHORT_JOB = 0.05
_EWMA_WEIGHT = 0.05
#: Auto-prefetch for short jobs: this many batches of slots, at most _AUTO_PREFETCH_MAX jobs
#: (measured: claims of a few hundred short jobs keep the worker and PostgreSQL both busy).
_AUTO_PREFETCH_FACTOR = 8
_AUTO_PREFETCH_MAX = 1000


class Executor:
    def __init__(
        self,
        tasks: dict[str, Task[..., Any]],
        concurrency: int,
        worker_id: str,
        submit: Callable[[Outcome], None],
        max_concurrency: int | None = None,
        prefetch: int | None = None,
        children: ChildSettings | None = None,
        transactions: TransactionHost | None = None,
    ) -> None:
        self.tasks = tasks
        self.concurrency = concurrency
        self.worker_id = worker_id
        self.submit = submit
        self.prefetch = prefetch  # None: auto
        # Keyed by (job id, lease token): the same job can be re-claimed by this worker while
        # the handler of its lost attempt is still winding down.
        self.running: dict[tuple[int, int], Running] = {}
        #: Jobs of running batches beyond the one slot each batch takes.
        self._batched = 0
        #: Claimed jobs waiting for a slot (prefetch), in claim order.
        self.waiting: deque[ClaimedJob] = deque()
        batch_tasks = {n: t for n, t in tasks.items() if isinstance(t, BatchTask)}
        #: Batch tasks' jobs being gathered (None: the app has no batch task).
        self.batches = Batches(batch_tasks, self._start_waiting) if batch_tasks else None
        self._mean_duration: float | None = None
        #: OpenTelemetry: a span per attempt when the app set a tracer provider, else None.
        self.tracer = consumer()
        self.slot_freed = asyncio.Event()
        self._starting = False  # inside _start_waiting (an eager job may end inside start())
        #: Places held by claims in flight (see reserve).
        self.reserved = 0
        self.abandoned = 0  # sync handlers still running past their timeout
        self._thread_limit = max(concurrency, max_concurrency or 0)
        #: Started with the first sync job (on the loop, in the context handlers inherit).
        self._threads: HandlerThreads | None = None
        #: pool="process": sync handlers run in these children instead of the threads.
        self.pool = (
            None
            if children is None
            else ProcessPool(
                children,
                concurrency,
                worker_id,
                frozenset(name for name, task in tasks.items() if not task.is_async),
                transactions,
            )
        )

    # -- slots -------------------------------------------------------------------------------

    def resize(self, concurrency: int) -> None:
        """Change the number of slots (the autoscaler); running jobs are never stopped."""
        self.concurrency = concurrency
        if self.pool is not None:
            self.pool.resize(concurrency)
        self.slot_freed.set()  # a fetcher waiting for a slot may have one now

    def slots_busy(self) -> int:
        """Slots taken: one per running job, one per running batch."""
        return len(self.running) - self._batched

    def free_slots(self) -> int:
        return self.concurrency - self.slots_busy()

    def prefetch_limit(self) -> int:
        if self.prefetch is not None:
            return self.prefetch
        mean = self._mean_duration
        if mean is None or mean >= _SHORT_JOB:
            return 0
        return min(_AUTO_PREFETCH_FACTOR * self.concurrency, _AUTO_PREFETCH_MAX)

    def capacity(self, prefetch: bool = True) -> int:
        """How many more jobs the fetcher may claim now (free slots plus prefetch room, plus
        what the batches being gathered lack, less what claims in flight may bring)."""
        room = self.prefetch_limit() if prefetch else 0
        busy = len(self.running) - self._batched
        if self.batches is not None:
            room += self.batches.room(self.concurrency - busy)
        return self.concurrency + room - busy - len(self.waiting) - self.reserved

    @contextlib.contextmanager
    def reserve(self, count: int) -> Iterator[None]:
        """Hold ``count`` places for a claim in flight, so a second claim does not take them."""
        self.reserved += count
        try:
            yield
        finally:
            self.reserved -= count
            self.slot_freed.set()  # the other claim lane may be waiting for these places

    def idle(self) -> bool:
        return not self.running and not self.waiting and not self.gathered()

    def gathered(self) -> list[ClaimedJob]:
        """Jobs of batch tasks claimed and gathered into batches not started yet."""
        return [] if self.batches is None else list(self.batches.jobs())

    def held(self) -> list[tuple[int, int]]:
        """(id, lease_token) of every job claimed here and not finished: running, waiting or
        gathered into a batch. Not a job whose transaction is completing it (its row is locked
        by that transaction until it ends) or has ended (complete, or no longer ours)."""
        return [
            *(key for key, r in self.running.items() if r.ctx.transaction_state in HOLDING),
            *((job.id, job.lease_token) for job in (*self.waiting, *self.gathered())),
        ]

    def completing(self, job_id: int, token: int) -> bool:
        """Whether the job's own transaction is completing it or has (a heartbeat that finds
        its row gone has not found a lost lease). A child's state comes by its pipe: what it
        wrote before sending the completion is read first."""
        running = self.running.get((job_id, token))
        if running is None:
            return False
        if self.pool is not None:
            self.pool.read_now((job_id, token))
        return running.ctx.transaction_state not in HOLDING

    async def wait_for_capacity(self, at_least: int = 1, prefetch: bool = True) -> None:
        """Until the fetcher may claim ``at_least`` jobs (or any, when nothing runs)."""
        while self.capacity(prefetch) < at_least and (self.running or self.capacity(prefetch) <= 0):
            self.slot_freed.clear()
            await self.slot_freed.wait()

    # -- running -----------------------------------------------------------------------------

    def accept(self, jobs: list[ClaimedJob]) -> None:
        """Start claimed jobs in free slots; the rest wait for one (prefetch); batch tasks'
        jobs join their batches."""
        batches = self.batches
        ordinary = False
        for job in jobs:
            if batches is not None and job.task in batches.tasks:
                batches.add(job)
                continue
            ordinary = True
            if (
                len(self.running) - self._batched < self.concurrency
                and not self.waiting
                and (batches is None or not batches.due)
            ):
                self.start(job)
            else:
                self.waiting.append(job)
        if batches is not None and jobs:
            batches.only_batches = not ordinary
            if batches.due:
                self._start_waiting()

    def start(self, job: ClaimedJob) -> None:
        if self.batches is not None and job.task in self.batches.tasks:
            # Handed over as waiting (at shutdown): a batch task's job never runs alone.
            self.batches.add(job)
            return
        running = Running(job, JobContext(job, self.worker_id))
        self.running[job.id, job.lease_token] = running
        task = self.tasks.get(job.task)
        if self.tracer is not None and not (self.pool is not None and task and not task.is_async):
            # (A child process traces the attempts it runs itself.)
            running.span = self.tracer.start(job)
        if task is not None and not task.is_async and self.pool is None:
            self._start_in_thread(running, task)
        else:
            running.task = _job_task(asyncio.get_running_loop(), self._run(running))

    def _start_waiting(self) -> None:
        # Not re-entered: a job task started eagerly may finish inside start() and come back
        # here; the loop below sees its slot free and goes on (no recursion per job).
        if self._starting:
            return
        self._starting = True
        try:
            while len(self.running) - self._batched < self.concurrency:
                batches = self.batches
                due = None if batches is None else batches.first_due()
                if self.waiting and (due is None or self.waiting[0].leased_at <= due):
                    self.start(self.waiting.popleft())
                elif due is not None:
                    assert batches is not None
                    self._start_batch(batches.take_due())
                else:
                    break
        finally:
            self._starting = False

    def find(self, job_id: int, token: int) -> ClaimedJob | None:
        """The job held here with this lease token (running, waiting or gathered), if any."""
        running = self.running.get((job_id, token))
        if running is not None:
            return running.job
        return next(
            (
                j
                for j in (*self.waiting, *self.gathered())
                if j.id == job_id and j.lease_token == token
            ),
            None,
        )

    def keep_unstarted(self, jobs: list[ClaimedJob]) -> None:
        """Hold claimed jobs without starting them (claims that came back while the worker
        stops): the shutdown hands them back with the prefetched ones."""
        self.waiting.extend(jobs)

    def release_waiting(self, task: str | None = None) -> list[ClaimedJob]:
        """Take back the jobs that never started (all, or ``task``'s), batches being gathered
        included: shutdown hands them back, and so does a circuit breaker opening for their
        task."""
        jobs = [job for job in self.waiting if task is None or job.task == task]
        if task is None:
            self.waiting.clear()
        else:
            self.waiting = deque(job for job in self.waiting if job.task != task)
        if self.batches is not None:
            jobs += self.batches.release(task)
        return jobs

    async def _run(self, running: Running) -> None:
        # One coroutine per job (besides the handler's own): the steps before and after the
        # handler are plain methods.
        job, ctx = running.job, running.ctx
        outcome: Outcome | None = None
        try:
            task = self.tasks[job.task]
            prepared = self._arguments(task, job, ctx)
            if isinstance(prepared, Outcome):
                outcome = prepared
            elif self.pool is not None and not task.is_async:
                outcome = await self._run_in_child(running, task)
            else:
                args, kwargs = prepared
                func = self._handler(task, running)
                try:
                    if task.timeout is None:
                        token = set_current(ctx)
                        try:
                            value = await func(*args, **kwargs)
                        finally:
                            reset_current(token)
                    else:
                        value = await self._run_async(task, func, ctx, args, kwargs)
                except (asyncio.CancelledError, Exception) as exc:
                    outcome = self._raised(running, task, exc)
                else:
                    outcome = self._returned(task, job, value)
        except Exception:  # pragma: no cover - every handler error becomes an outcome above
            log.exception("executor bug while running job id=%s", job.id)
        finally:
            self.running.pop((job.id, job.lease_token), None)
            self._start_waiting()
            self.slot_freed.set()
        self._record(running, outcome)

    def _handler(self, task: Task[..., Any], running: Running) -> Callable[..., Any]:
        """The task's function, run in the attempt's span when there is one."""
        if running.span is None:
            return task.func
        assert self.tracer is not None
        return self.tracer.wrap(task.func, running.span, task.is_async)

    def _record(self, running: Running, outcome: Outcome | None) -> None:
        """Hand an attempt's outcome (if it has one to write) to the completer."""
        if running.ctx.transaction_state is not None:
            outcome = self._transaction_outcome(running, outcome)
        if running.span is not None:
            assert self.tracer is not None
            self.tracer.finish(running.span, outcome)
            running.span = None
        if outcome is not None:
            duration = outcome.duration = time.monotonic() - running.started
            mean = self._mean_duration
            self._mean_duration = (
                duration if mean is None else mean + _EWMA_WEIGHT * (duration - mean)
            )
            self.submit(outcome)

    def _transaction_outcome(self, running: Running, outcome: Outcome | None) -> Outcome | None:
        """The attempt of a handler that used ``ctx.transaction()``: once that transaction
        ended, its outcome is what the transaction wrote, whatever the handler did next."""
        return transaction_outcome(running.ctx, outcome)

    def _finish(self, running: Running, outcome: Outcome | None) -> None:
        """A sync attempt is over: its slot frees (the next waiting job starts) and its
        outcome goes to the completer."""
        self.running.pop((running.job.id, running.job.lease_token), None)
        self._start_waiting()
        self.slot_freed.set()
        self._record(running, outcome)

    # -- sync handlers in threads ----------------------------------------------------------

    def _start_in_thread(self, running: Running, task: Task[..., Any]) -> None:
        loop = asyncio.get_running_loop()
        prepared = self._arguments(task, running.job, running.ctx)
        if isinstance(prepared, Outcome):
            # Not at once: start() may be running inside _start_waiting for another job.
            loop.call_soon(self._finish, running, prepared)
            return
        args, kwargs = prepared
        self._submit(
            ThreadCall(self._handler(task, running), args, kwargs, running.ctx, running), task, loop
        )

    def _submit(
        self, call: ThreadCall, task: Task[..., Any], loop: asyncio.AbstractEventLoop
    ) -> None:
        """Hand a call to the handler threads (started with the first), with its timeout."""
        if task.timeout is not None:
            call.timer = loop.call_later(task.timeout, self._thread_timeout, call, task)
        threads = self._threads
        if threads is None:
            threads = self._threads = HandlerThreads(
                self._thread_limit,
                self._threads_done,
                loop=loop,
                context=contextvars.copy_context(),
            )
        threads.submit(call)

    def _threads_done(self, calls: list[ThreadCall]) -> None:
        """Sync calls that finished since the last batch (one loop callback per batch)."""
        for call in calls:
            if isinstance(call.owner, BatchRun):
                self._batch_thread_done(call.owner, call)
                continue
            running: Running = call.owner
            if call.abandoned:
                # Its attempt already failed with JobTimeout; what it did since is ignored.
                self.abandoned -= 1
                if call.error is None:
                    log.info(
                        "abandoned handler finished late; result ignored "
                        "job_id=%s task=%s attempt=%s",
                        running.ctx.id,
                        running.ctx.task,
                        running.ctx.attempt,
                    )
                continue
            if call.timer is not None:
                call.timer.cancel()
            task = self.tasks[running.job.task]
            if call.skipped:
                outcome = self._stopped(running, None)
            elif call.error is not None:
                outcome = self._raised(running, task, call.error)
            else:
                outcome = self._returned(task, running.job, call.value)
            self.running.pop((running.job.id, running.job.lease_token), None)
            self._record(running, outcome)
        self._start_waiting()
        self.slot_freed.set()

    def _thread_timeout(self, call: ThreadCall, task: Task[..., Any]) -> None:
        assert self._threads is not None
        if not self._threads.abandon(call):
            return  # it finished just now: its outcome is on the way
        if isinstance(call.owner, BatchRun):
            self._batch_thread_timeout(call.owner, call)
            return
        running: Running = call.owner
        running.ctx.cancel("timeout")
        if call.abandoned:
            self.abandoned += 1
            why = "thread abandoned"
        else:
            why = "it never started: every handler thread was busy"
        error = JobTimeout(f"{task.name} timed out after {task.timeout:g}s ({why})")
        self._finish(running, self._raised(running, task, error))

    def _arguments(
        self, task: Task[..., Any], job: ClaimedJob, ctx: JobContext
    ) -> tuple[list[Any], dict[str, Any]] | Outcome:
        """The handler's arguments, or the outcome of a job that can never run."""
        return arguments(task, job, ctx, self.worker_id)

    def _raised(self, running: Running, task: Task[..., Any], exc: BaseException) -> Outcome | None:
        """What the attempt amounts to when the handler raised (or was cancelled)."""
        job, ctx = running.job, running.ctx
        if running.span is not None and not isinstance(exc, asyncio.CancelledError | JobCancelled):
            assert self.tracer is not None
            self.tracer.failed(running.span, exc)
        if isinstance(exc, asyncio.CancelledError):
            return self._stopped(running, None)
        if isinstance(exc, JobCancelled):
            return self._stopped(running, exc)
        if isinstance(exc, JobTimeout | Retry | Fail):
            return raised_outcome(task, job, exc, self.worker_id)
        if ctx.cancel_reason in ("lease lost", "shutdown"):
            return self._stopped(running, exc)
        return self._failed(task, job, exc)

    def _returned(self, task: Task[..., Any], job: ClaimedJob, value: Any) -> Outcome:
        return returned_outcome(task, job, value, self.worker_id)

    def _failed(self, task: Task[..., Any], job: ClaimedJob, exc: BaseException) -> Outcome:
        return failed_outcome(task, job, exc, self.worker_id)

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

    async def _run_in_child(self, running: Running, task: Task[..., Any]) -> Outcome | None:
        """A sync handler in a child process (pool="process")."""
        assert self.pool is not None
        job, ctx = running.job, running.ctx
        loop = asyncio.get_running_loop()
        timer: asyncio.TimerHandle | None = None

        def started() -> None:
            nonlocal timer
            # The handler's own time: not the wait for a child to start and import the app.
            running.started = time.monotonic()
            if task.timeout is not None:
                timer = loop.call_later(
                    task.timeout, self.stop_job, job.id, "timeout", job.lease_token
                )

        try:
            reply = await self.pool.run(job, ctx, started)
        finally:
            if timer is not None:
                timer.cancel()
        return self._child_outcome(running, task, reply)

    def _child_outcome(
        self, running: Running, task: Task[..., Any], reply: ChildReply | ChildGone | None
    ) -> Outcome | None:
        """What a child's answer (or death, or never starting) makes of a job's attempt."""
        job, ctx = running.job, running.ctx
        if reply is None:  # stopped before a child took it
            return self._stopped(running, None)
        if isinstance(reply, ChildGone):
            if ctx.cancel_reason is not None:
                # Killed because we asked it to stop: the reason decides (a timeout is a
                # failed attempt, a cancel is cancelled, a lost lease or shutdown not ours).
                return self._child_stopped(running, task)
            return self._failed(task, job, reply.error)
        if reply.kind == "stopped" or (
            reply.kind in ("error", "no_retry")
            and ctx.cancel_reason in ("lease lost", "shutdown", "timeout")
        ):
            return self._child_stopped(running, task)
        return Outcome(
            job, reply.kind, reply.delay, reply.error, result=reply.result, summary=reply.summary
        )

    def _child_stopped(self, running: Running, task: Task[..., Any]) -> Outcome | None:
        """A child's attempt that ended because we stopped it (answer or death alike)."""
        if running.ctx.cancel_reason == "timeout":
            timeout = JobTimeout(
                f"{task.name} timed out after {task.timeout:g}s (child process killed)"
            )
            return self._stopped(running, timeout)
        return self._stopped(running, None)

    async def _run_async(
        self,
        task: Task[..., Any],
        func: Callable[..., Any],
        ctx: JobContext,
        args: list[Any],
        kwargs: dict[str, Any],
    ) -> Any:
        """An async handler with a timeout."""
        assert task.timeout is not None
        token = set_current(ctx)
        # A timeout is one more reason to stop the handler, set before it is cancelled so the
        # handler (and _stopped) can tell why.
        timer = asyncio.get_running_loop().call_later(
            task.timeout, self.stop_job, ctx.id, "timeout", ctx.job.lease_token
        )
        try:
            return await func(*args, **kwargs)
        finally:
            timer.cancel()
            reset_current(token)

    # -- batches ---------------------------------------------------------------------------

    def _start_batch(self, gathering: Gathering) -> None:
        """A due batch takes one slot: its jobs become running, each with its own context."""
        task = gathering.task
        contexts = [JobContext(job, self.worker_id) for job in gathering.jobs]
        run = BatchRun(task, gathering.jobs, contexts)
        for job, ctx in zip(gathering.jobs, contexts, strict=True):
            running = self.running[job.id, job.lease_token] = Running(job, ctx, batch=run)
            run.members.append(running)
        self._batched += len(contexts) - 1
        run.items, run.positions, run.failed = prepare(task, contexts, self.worker_id)
        if not task.is_async and self.pool is None:
            self._start_batch_in_thread(run)
        else:
            run.aio = _job_task(asyncio.get_running_loop(), self._run_batch(run))

    async def _run_batch(self, run: BatchRun) -> None:
        """An async batch handler on the loop, or a sync one in a child process."""
        task, items = run.task, run.items
        settled: list[Outcome | BaseException | None] = []
        try:
            if not items:
                pass
            elif self.pool is not None and not task.is_async:
                settled = [*await self._run_batch_in_child(run)]
            else:
                loop = asyncio.get_running_loop()
                timer = None
                if task.timeout is not None:
                    timer = loop.call_later(task.timeout, self._stop_batch, run, "timeout")
                token = set_current(None)  # current_job() names one job: not in a batch
                try:
                    value = await task.func(items)
                except (asyncio.CancelledError, Exception) as exc:
                    settled = [*settle(task, items, None, exc, self.worker_id)]
                else:
                    settled = [*settle(task, items, value, None, self.worker_id)]
                finally:
                    if timer is not None:
                        timer.cancel()
                    reset_current(token)
        except Exception:  # pragma: no cover - every handler error becomes an outcome above
            log.exception("executor bug while running a batch task=%s", task.name)
        finally:
            self._batch_over(run)
        self._record_batch(run, settled)

    def _start_batch_in_thread(self, run: BatchRun) -> None:
        loop = asyncio.get_running_loop()
        if not run.items:
            # Not at once: this runs inside _start_waiting.
            loop.call_soon(self._batch_thread_finished, run, [])
            return
        self._submit(
            ThreadCall(run.task.func, [run.items], {}, None, run, stop=run), run.task, loop
        )

    def _batch_thread_done(self, run: BatchRun, call: ThreadCall) -> None:
        if call.abandoned:
            # Its jobs already failed with JobTimeout; what it did since is ignored.
            self.abandoned -= 1
            log.info(
                "abandoned batch handler finished late; ignored task=%s jobs=%s",
                run.task.name,
                len(run.items),
            )
            return
        if call.timer is not None:
            call.timer.cancel()
        task = run.task
        if call.skipped:  # every job was asked to stop before a thread took it
            error: BaseException | None = asyncio.CancelledError()
        else:
            error = call.error
        self._batch_thread_finished(run, settle(task, run.items, call.value, error, self.worker_id))

    def _batch_thread_finished(
        self, run: BatchRun, settled: Sequence[Outcome | BaseException | None]
    ) -> None:
        self._batch_over(run)
        self._record_batch(run, settled)

    def _batch_thread_timeout(self, run: BatchRun, call: ThreadCall) -> None:
        for ctx in run.contexts:
            ctx.cancel("timeout")
        if call.abandoned:
            self.abandoned += 1
            why = "thread abandoned"
        else:
            why = "it never started: every handler thread was busy"
        task = run.task
        error = JobTimeout(f"{task.name} timed out after {task.timeout:g}s ({why})")
        self._batch_thread_finished(run, settle(task, run.items, None, error, self.worker_id))

    async def _run_batch_in_child(self, run: BatchRun) -> list[Outcome | None]:
        """A sync batch handler in a child process: each job's answer comes back on its own."""
        assert self.pool is not None
        task = run.task
        loop = asyncio.get_running_loop()
        timer: asyncio.TimerHandle | None = None

        def started() -> None:
            nonlocal timer
            run.started = time.monotonic()
            if task.timeout is not None:
                timer = loop.call_later(task.timeout, self._stop_batch, run, "timeout")

        members = [run.members[position] for position in run.positions]
        try:
            reply = await self.pool.run(
                members[0].job, members[0].ctx, started, batch=[m.ctx for m in members]
            )
        finally:
            if timer is not None:
                timer.cancel()
        if isinstance(reply, ChildReply):
            replies: list[ChildReply | ChildGone | None] = [*reply.items]
        else:
            replies = [reply] * len(members)
        return [
            self._child_outcome(member, task, answer)
            for member, answer in zip(members, replies, strict=True)
        ]

    def _batch_over(self, run: BatchRun) -> None:
        """The call is over: its slot frees (a waiting job or batch starts)."""
        for job in run.jobs:
            self.running.pop((job.id, job.lease_token), None)
        self._batched -= len(run.jobs) - 1
        self._start_waiting()
        self.slot_freed.set()

    def _record_batch(
        self, run: BatchRun, settled: Sequence[Outcome | BaseException | None]
    ) -> None:
        """Each job's outcome to the completer (one write for all of them); the call's
        duration is each job's, and one sample of the moving average."""
        duration = time.monotonic() - run.started
        mean = self._mean_duration
        self._mean_duration = duration if mean is None else mean + _EWMA_WEIGHT * (duration - mean)
        outcomes: list[Outcome | None] = [run.failed.get(p) for p in range(len(run.jobs))]
        for position, what in zip(run.positions, settled, strict=False):
            outcomes[position] = (
                self._raised(run.members[position], run.task, what)
                if isinstance(what, BaseException)
                else what
            )
        for outcome in outcomes:
            if outcome is not None:
                outcome.duration = duration
                self.submit(outcome)

    def _stop_in_batch(self, running: Running, run: BatchRun, reason: CancelReason) -> None:
        """Stop one job of a running batch. A cancel or a lost lease reaches that job alone
        (``item.cancelled``; its outcome is cancelled, or not ours); the batch's timeout and
        shutdown stop the whole call, and so does every job of it being asked to stop."""
        if reason in ("timeout", "shutdown"):
            self._stop_batch(run, reason)
            return
        running.ctx.cancel(reason)
        if run.cancelled:
            self._stop_batch(run, reason)
        elif self.pool is not None and not run.task.is_async:
            self.pool.stop_item(run.key, (running.job.id, running.job.lease_token), reason)

    def _stop_batch(self, run: BatchRun, reason: CancelReason) -> None:
        """Stop a batch's call, as a one-job handler's would be for ``reason``."""
        for ctx in run.contexts:
            ctx.cancel(reason)
        if run.task.is_async:
            if run.aio is not None:
                run.aio.cancel()
        elif self.pool is not None:
            self.pool.stop(run.key, reason)

    # -- stopping handlers -------------------------------------------------------------------

    def stop_job(self, job_id: int, reason: CancelReason, token: int | None = None) -> bool:
        """Ask the handler(s) of a job to stop (cancelled, timeout), or of one attempt (lease
        lost: ``token``). False if nothing matching runs or waits here."""
        matching = [
            r
            for (jid, tok), r in self.running.items()
            if jid == job_id and (token is None or tok == token)
        ]
        for running in matching:
            self._stop(running, reason)
        waiting = [j for j in self.waiting if j.id == job_id and token in (None, j.lease_token)]
        for job in waiting:
            self.waiting.remove(job)
        if self.batches is not None:
            waiting += self.batches.remove(job_id, token)
        for job in waiting:
            # Never started: a cancelled one is written as cancelled; a lost one is not ours.
            if reason == "cancelled":
                self.submit(Outcome(job, "cancelled"))
        return bool(matching or waiting)

    def _stop(self, running: Running, reason: CancelReason) -> None:
        if running.batch is not None:
            self._stop_in_batch(running, running.batch, reason)
            return
        running.ctx.cancel(reason)
        if self.tasks[running.job.task].is_async:
            if running.task is not None:
                running.task.cancel()
        elif self.pool is not None:
            self.pool.stop((running.job.id, running.job.lease_token), reason)

    def stop_all(self, reason: CancelReason) -> list[Running]:
        stopped = list(self.running.values())
        batches: dict[int, BatchRun] = {}
        for running in stopped:
            if running.batch is None:
                self._stop(running, reason)
            else:
                batches[id(running.batch)] = running.batch
        for run in batches.values():
            self._stop_batch(run, reason)
        return stopped

    async def wait_idle(self, timeout: float) -> bool:
        """Wait until no handler runs (True) or ``timeout`` passes (False). The shutdown's
        drain: once nothing runs, the children of pool="process" are told to exit, and this
        returns when they have (killed if they take more than the time left, or a second)."""
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
                break
        if self.running:
            return False
        if self.pool is not None:
            await self.pool.close(deadline - loop.time())
        return True

    def shutdown_threads(self) -> bool:
        """Stop the handler threads; False if handlers are still running in them (abandoned
        or released at shutdown), which the caller may choose not to wait for. Children of
        pool="process" still there (only when the drain did not run) are killed."""
        if self.pool is not None:
            self.pool.kill_all()
        return self._threads is None or self._threads.close()
