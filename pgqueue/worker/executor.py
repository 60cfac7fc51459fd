"""The executor: runs claimed jobs in slots, as a fixed pipeline.

1. **Claim** (the fetcher, :mod:`pgqueue.worker.fetcher`) hands claimed jobs to :meth:`accept`.
2. **Start**: a job takes a free slot, or waits for one (prefetch); a batch task's job joins
   its batch (:mod:`pgqueue.worker.batches`), and a due batch takes one slot.
3. **Run**: the task's runtime (:mod:`pgqueue.worker.runtimes`: the event loop, the handler
   threads or child processes, chosen once per task when the executor is built) runs the
   handler, one-job and batch alike.
4. **Outcome**: what the attempt amounts to (:mod:`pgqueue.worker.attempts`).
5. **Hand over**: the slot frees (the next waiting job starts) and the outcome goes to the
   completer (``submit``).

Prefetch: the fetcher may claim more jobs than there are free slots; the extra ones wait here
(``waiting``, leases held and heartbeated like running jobs) and start the moment a slot frees,
so the next claim overlaps with running the current batch instead of following it. With
``prefetch=None`` (auto) the executor prefetches up to eight times ``concurrency`` jobs (at most
1,000) only while recent jobs are short (a moving average under 50 ms): long jobs gain nothing
from it and would sit claimed here while another worker could have run them.

Stopping a handler (lease lost / cancelled / timeout / shutdown): ``ctx.cancelled`` turns true,
and the runtime stops it as it can (an async handler is cancelled, a child is told and then
killed, a thread past its timeout is abandoned). A job asked to stop before it started never
starts: its outcome is the one a handler that stopped at once would have had.

Batches: each job of a running batch has its own entry in ``running`` (its context, its lease,
a cancel or a lost lease reach it alone); the slots count the batch once.
"""

from __future__ import annotations

import asyncio
import contextlib
import time
from collections import deque
from collections.abc import Callable, Iterator
from typing import TYPE_CHECKING, Any

from pgqueue.handler.batch import BatchTask
from pgqueue.handler.job_context import ClaimedJob, JobContext
from pgqueue.handler.job_transaction import HOLDING, TransactionHost
from pgqueue.rules.tasks import Task
from pgqueue.rules.tracing import consumer
from pgqueue.rules.vocabulary import CancelReason
from pgqueue.worker.attempts import Running, Verdicts
from pgqueue.worker.batches import Batches, BatchRun, Gathering, prepare
from pgqueue.worker.outcome import Outcome, transaction_outcome
from pgqueue.worker.runtimes import LoopRuntime, Runtime, Settled, ThreadRuntime

if TYPE_CHECKING:
    from pgqueue.worker.child_process import ChildSettings

__all__ = ["Executor", "Running"]

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
        self.verdicts = Verdicts(worker_id, self.tracer)
        self.slot_freed = asyncio.Event()
        self._starting = False  # inside _start_waiting (an eager job may end inside start())
        #: Places held by claims in flight (see reserve).
        self.reserved = 0
        # The runtimes, and the one each task runs in (chosen here, once).
        self._loop = LoopRuntime(self)
        self._threads = ThreadRuntime(self, max(concurrency, max_concurrency or 0))
        sync_tasks = frozenset(name for name, task in tasks.items() if not task.is_async)
        sync: Runtime = self._threads
        if children is not None:
            # Only here: the process pool brings multiprocessing and the children's frames.
            from pgqueue.worker.child_runtime import ChildRuntime

            sync = ChildRuntime(self, children, concurrency, sync_tasks, transactions)
        self._runtimes: list[Runtime] = [self._loop, sync]
        self.runtime: dict[str, Runtime] = {
            name: self._loop if task.is_async else sync for name, task in tasks.items()
        }

    @property
    def abandoned(self) -> int:
        """Sync handlers still running in a thread past their timeout."""
        return self._threads.abandoned

    # -- slots -------------------------------------------------------------------------------

    def resize(self, concurrency: int) -> None:
        """Change the number of slots (the autoscaler); running jobs are never stopped."""
        self.concurrency = concurrency
        for runtime in self._runtimes:
            runtime.resize(concurrency)
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
        self._runtime_of(running).refresh(running)
        return running.ctx.transaction_state not in HOLDING

    async def wait_for_capacity(self, at_least: int = 1, prefetch: bool = True) -> None:
        """Until the fetcher may claim ``at_least`` jobs (or any, when nothing runs)."""
        while self.capacity(prefetch) < at_least and (self.running or self.capacity(prefetch) <= 0):
            self.slot_freed.clear()
            await self.slot_freed.wait()

    # -- start -------------------------------------------------------------------------------

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
        runtime = self._runtime_of(running)
        if self.tracer is not None and runtime.traces:
            running.span = self.tracer.start(job)
        runtime.start(running)

    def _runtime_of(self, running: Running) -> Runtime:
        return self.runtime.get(running.job.task, self._loop)

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
        self.runtime[task.name].start_batch(run)

    # -- hand over (the runtimes call these when a handler is done) --------------------------

    def vacate(self, running: Running) -> None:
        self.running.pop((running.job.id, running.job.lease_token), None)

    def refill(self) -> None:
        self._start_waiting()
        self.slot_freed.set()

    def finish(self, running: Running, outcome: Outcome | None) -> None:
        """An attempt is over: its slot frees (the next waiting job starts) and its outcome
        goes to the completer."""
        self.vacate(running)
        self.refill()
        self.record(running, outcome)

    def record(self, running: Running, outcome: Outcome | None) -> None:
        """Hand an attempt's outcome (if it has one to write) to the completer."""
        if running.ctx.transaction_state is not None:
            # Once the handler's ctx.transaction() ended, its outcome is what the transaction
            # wrote, whatever the handler did next.
            outcome = transaction_outcome(running.ctx, outcome)
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

    def finish_batch(self, run: BatchRun, settled: Settled) -> None:
        self.vacate_batch(run)
        self.record_batch(run, settled)

    def vacate_batch(self, run: BatchRun) -> None:
        """A batch's call is over: its slot frees (a waiting job or batch starts)."""
        for job in run.jobs:
            self.running.pop((job.id, job.lease_token), None)
        self._batched -= len(run.jobs) - 1
        self.refill()

    def record_batch(self, run: BatchRun, settled: Settled) -> None:
        """Each job's outcome to the completer (one write for all of them); the call's
        duration is each job's, and one sample of the moving average."""
        duration = time.monotonic() - run.started
        mean = self._mean_duration
        self._mean_duration = duration if mean is None else mean + _EWMA_WEIGHT * (duration - mean)
        outcomes: list[Outcome | None] = [run.failed.get(p) for p in range(len(run.jobs))]
        for position, what in zip(run.positions, settled, strict=False):
            outcomes[position] = (
                self.verdicts.raised(run.members[position], run.task, what)
                if isinstance(what, BaseException)
                else what
            )
        for outcome in outcomes:
            if outcome is not None:
                outcome.duration = duration
                self.submit(outcome)

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
        if reason in running.stops:
            # Heard again (a cancel's NOTIFY and a heartbeat reading cancel_requested both
            # tell it): stopping the handler again would interrupt its own cleanup after the
            # first stop (an async handler's task cancelled inside its `except CancelledError`).
            return
        running.stops.add(reason)
        run = running.batch
        if run is None:
            running.ctx.cancel(reason)
            self._runtime_of(running).stop(running, reason)
        elif reason in ("timeout", "shutdown"):
            # The batch's timeout and shutdown stop the whole call.
            self.stop_batch(run, reason)
        else:
            # A cancel or a lost lease reaches that job alone (``item.cancelled``; its outcome
            # is cancelled, or not ours), unless every job of the batch was asked to stop.
            running.ctx.cancel(reason)
            if run.cancelled:
                self.stop_batch(run, reason)
            else:
                self.runtime[run.task.name].stop_item(run, running, reason)

    def stop_batch(self, run: BatchRun, reason: CancelReason) -> None:
        """Stop a batch's call, as a one-job handler's would be for ``reason``."""
        for ctx in run.contexts:
            ctx.cancel(reason)
        self.runtime[run.task.name].stop_batch(run, reason)

    def stop_all(self, reason: CancelReason) -> list[Running]:
        stopped = list(self.running.values())
        batches: dict[int, BatchRun] = {}
        for running in stopped:
            if running.batch is None:
                self._stop(running, reason)
            else:
                batches[id(running.batch)] = running.batch
        for run in batches.values():
            self.stop_batch(run, reason)
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
        for runtime in self._runtimes:
            await runtime.drain(deadline - loop.time())
        return True

    def shutdown_threads(self) -> bool:
        """Stop the handler threads; False if handlers are still running in them (abandoned
        or released at shutdown), which the caller may choose not to wait for. Children of
        pool="process" still there (only when the drain did not run) are killed."""
        return all([runtime.close() for runtime in self._runtimes])
