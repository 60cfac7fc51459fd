"""Batch tasks in the worker: claimed jobs gathered into batches, and what one call of a batch
handler amounts to for each of its jobs.

Gathering (:class:`Batches`): a claimed job of a batch task joins its task's open batch (per
task, whatever queue it came from: the handler is the same). A batch is *due* once it holds
``batch_size`` jobs or ``batch_wait`` seconds passed since its first job arrived; a due batch
waits for a slot like a prefetched job (the executor starts whichever of the two was due
first) and, until it starts, still takes jobs up to ``batch_size``. The jobs are claimed all
along: the heartbeater extends their leases, a cancel or a lost lease takes one out, shutdown
and an opening circuit breaker hand them back unstarted.

Claiming enough: a batch is only as big as what the claims bring, so the fetcher's room grows
by what the open batches lack (:meth:`Batches.room`): ``batch_size`` less the jobs gathered,
per batch task that had a job claimed in the last moments (or has jobs gathered); and, while
the claims bring nothing but batch tasks' jobs, by a full batch for every other free slot (at
most 1,000 jobs more), so that one claim can fill every slot (a claim of one batch at a time
left most slots idle: claiming took as long as running a batch). The room is not granted to
tasks whose jobs do not come, and shrinks to one batch per task once claims bring other tasks'
jobs too, so a worker serving batch tasks beside long ordinary ones on the same queues claims
few of those ahead; while batch jobs do come, a claim may still bring other tasks' jobs into
that room (they wait prefetched), which a queue of their own for batch tasks avoids.

A started batch is one call in one slot (:class:`BatchRun`). Each job keeps its own
``JobContext`` in the executor (its lease, a cancel or a lost lease reach it alone); the
batch's timeout and the worker's shutdown stop every job of it. What each job amounts to
(:func:`settle`) is decided by the same rules as a one-job handler, in the worker for async
and thread handlers and in the child process under ``--pool process``.
"""

from __future__ import annotations

import asyncio
import time
from collections import deque
from collections.abc import Callable, Iterator, Mapping
from dataclasses import dataclass, field
from typing import Any

from pgqueue.errors import InvalidJobError, StepError
from pgqueue.handler.batch import BatchTask, Item
from pgqueue.handler.job_context import ClaimedJob, JobContext
from pgqueue.handler.parking import JobParked
from pgqueue.worker.outcome import Outcome, returned_outcome

#: A batch task keeps its room in the claims this long (plus its batch_wait) after its last
#: job was claimed: jobs that stopped coming free the room for other tasks.
_ACTIVE = 1.0
#: The most room for the batches of other free slots (a claim of 1,000 rows is the largest
#: prefetch claims too).
_MORE_MAX = 1000


@dataclass(eq=False)
class Gathering:
    """A batch of one task, not started yet."""

    task: BatchTask[Any, Any]
    jobs: list[ClaimedJob] = field(default_factory=list)
    timer: asyncio.TimerHandle | None = None
    #: When it became due (``time.monotonic()``); None while it waits for more jobs.
    due_since: float | None = None


class Batches:
    """The batches being gathered, per task, and the due ones in the order they became due."""

    def __init__(self, tasks: Mapping[str, BatchTask[Any, Any]], on_due: Callable[[], None]):
        self.tasks = tasks
        #: Called when a batch becomes due by its wait (the executor starts it if it can).
        self.on_due = on_due
        self.open: dict[str, Gathering] = {}
        self.due: deque[Gathering] = deque()
        #: Jobs gathered, open or due.
        self.count = 0
        #: The last claim that brought jobs brought batch tasks' jobs only.
        self.only_batches = False
        self._per_task: dict[str, int] = {}
        self._claimed_at: dict[str, float] = {}

    def add(self, job: ClaimedJob) -> None:
        """A claimed job of a batch task joins its task's open batch."""
        name = job.task
        task = self.tasks[name]
        self._claimed_at[name] = time.monotonic()
        gathering = self.open.get(name)
        if gathering is None:
            gathering = self.open[name] = Gathering(task)
            if task.batch_wait > 0:
                loop = asyncio.get_running_loop()
                gathering.timer = loop.call_later(task.batch_wait, self._waited, gathering)
            else:
                self._make_due(gathering)
        gathering.jobs.append(job)
        self.count += 1
        self._per_task[name] = self._per_task.get(name, 0) + 1
        if len(gathering.jobs) >= task.batch_size:
            self._close(gathering)
            self._make_due(gathering)

    def _waited(self, gathering: Gathering) -> None:
        gathering.timer = None
        if gathering.jobs and gathering.due_since is None:
            self._make_due(gathering)
            self.on_due()

    def _make_due(self, gathering: Gathering) -> None:
        if gathering.due_since is None:
            gathering.due_since = time.monotonic()
            self.due.append(gathering)

    def _close(self, gathering: Gathering) -> None:
        """No more jobs join it (full, started, or emptied)."""
        if self.open.get(gathering.task.name) is gathering:
            del self.open[gathering.task.name]
        if gathering.timer is not None:
            gathering.timer.cancel()
            gathering.timer = None

    def _forget(self, gathering: Gathering, count: int) -> None:
        self.count -= count
        self._per_task[gathering.task.name] -= count

    def first_due(self) -> float | None:
        """When the oldest due batch became due (None: no batch is due)."""
        return self.due[0].due_since if self.due else None

    def take_due(self) -> Gathering:
        """The oldest due batch, to be started now."""
        gathering = self.due.popleft()
        self._close(gathering)
        self._forget(gathering, len(gathering.jobs))
        return gathering

    def room(self, free_slots: int) -> int:
        """How many more jobs the claims should bring for the batches to fill (beyond the
        ``free_slots`` the executor counts already)."""
        now = time.monotonic()
        total = largest = 0
        for name, task in self.tasks.items():
            gathered = self._per_task.get(name, 0)
            if gathered or now - self._claimed_at.get(name, -1e9) < _ACTIVE + task.batch_wait:
                total += max(0, task.batch_size - gathered)
                largest = max(largest, task.batch_size)
        if self.only_batches and free_slots > 1:
            # A batch for each other free slot (each counted as one job already).
            total += min(_MORE_MAX, (free_slots - 1) * (largest - 1))
        return total

    def jobs(self) -> Iterator[ClaimedJob]:
        """Every job gathered (claimed, not started)."""
        for gathering in self.due:
            yield from gathering.jobs
        for gathering in self.open.values():
            if gathering.due_since is None:
                yield from gathering.jobs

    def _gatherings(self) -> list[Gathering]:
        return [*self.due, *(g for g in self.open.values() if g.due_since is None)]

    def remove(self, job_id: int, token: int | None) -> list[ClaimedJob]:
        """Take a job out of its batch (cancelled, or its lease lost before the batch started)."""
        removed: list[ClaimedJob] = []
        for gathering in self._gatherings():
            kept = [
                j for j in gathering.jobs if j.id != job_id or token not in (None, j.lease_token)
            ]
            if len(kept) == len(gathering.jobs):
                continue
            removed += [j for j in gathering.jobs if j not in kept]
            self._forget(gathering, len(gathering.jobs) - len(kept))
            gathering.jobs = kept
            if not kept:
                self._drop(gathering)
        return removed

    def release(self, task: str | None = None) -> list[ClaimedJob]:
        """Take back the batches not started (all, or ``task``'s): handed back unstarted."""
        jobs: list[ClaimedJob] = []
        for gathering in self._gatherings():
            if task is None or gathering.task.name == task:
                jobs += gathering.jobs
                self._forget(gathering, len(gathering.jobs))
                gathering.jobs = []
                self._drop(gathering)
        return jobs

    def _drop(self, gathering: Gathering) -> None:
        self._close(gathering)
        if gathering.due_since is not None:
            self.due.remove(gathering)


@dataclass(eq=False)
class BatchRun:
    """A started batch: one handler call for its jobs, each with its own context."""

    task: BatchTask[Any, Any]
    jobs: list[ClaimedJob]
    contexts: list[JobContext]
    #: The executor's record of each job (its ``Running``), in the order of ``jobs``.
    members: list[Any] = field(default_factory=list)
    #: What the handler gets, and the positions (in ``jobs``) of their jobs (see prepare).
    items: list[Item[Any]] = field(default_factory=list)
    positions: list[int] = field(default_factory=list)
    #: Outcomes of jobs that never run (arguments that do not fit), by position.
    failed: dict[int, Outcome] = field(default_factory=dict)
    started: float = field(default_factory=time.monotonic)
    #: The coroutine running it (async handlers, and children of ``--pool process``).
    aio: asyncio.Task[None] | None = None

    @property
    def key(self) -> tuple[int, int]:
        """The batch's key (its child process's job): its first running job's."""
        job = self.jobs[self.positions[0] if self.positions else 0]
        return job.id, job.lease_token

    @property
    def cancelled(self) -> bool:
        """Every job of it was asked to stop: the call need not run (or go on)."""
        return all(ctx.cancelled for ctx in self.contexts)


def prepare(
    task: BatchTask[Any, Any], contexts: list[JobContext], worker_id: str
) -> tuple[list[Item[Any]], list[int], dict[int, Outcome]]:
    """The items the handler gets, the positions (in ``contexts``) of their jobs, and the
    outcomes of the jobs that can never run (arguments that do not fit the task's model, no
    attempts left): those fail for good and the rest run without them."""
    items: list[Item[Any]] = []
    positions: list[int] = []
    failed: dict[int, Outcome] = {}
    for position, ctx in enumerate(contexts):
        job = ctx.job
        try:
            if job.attempt > job.max_attempts:
                raise InvalidJobError(
                    f"no attempts left: claimed for attempt {job.attempt} of "
                    f"max_attempts {job.max_attempts} (attempts edited by hand?)"
                )
            items.append(Item(ctx, task.model.value(job.args)))
        except InvalidJobError as exc:
            failed[position] = Outcome.from_exception(job, "fail", exc, worker_id)
            continue
        positions.append(position)
    return items, positions, failed


def settle(
    task: BatchTask[Any, Any],
    items: list[Item[Any]],
    value: Any,
    error: BaseException | None,
    worker_id: str,
) -> list[Outcome | BaseException]:
    """What the call amounts to for each item: the exception its job failed with (what it was
    marked with, else what the handler raised), or its outcome (it succeeded, with its result
    when the job keeps one).

    Results: a handler whose jobs keep results (``result_ttl``) returns a list with one value
    per item, in the items' order (or None: every result None)."""
    if isinstance(error, JobParked):
        # Only a one-job handler parks: a batch's jobs cannot all take one job's sleep.
        error = StepError(
            f"batch task {task.name!r} slept or waited ({error}): a batch handler cannot park "
            "its jobs; enqueue a one-job task for the durable part"
        )
    if error is not None:
        return [item.error or error for item in items]
    results = _results(value, len(items))
    settled: list[Outcome | BaseException] = []
    for position, item in enumerate(items):
        job = item._ctx.job
        if item.error is not None:
            settled.append(item.error)
        elif not job.wants_result:
            settled.append(Outcome(job, "ack"))
        elif results is None:
            # Retrying cannot change what the code returns: fail for good, saying why.
            problem = InvalidJobError(
                f"batch task {task.name!r} returned {type(value).__name__}: to keep results, "
                f"return a list with one value per item ({len(items)}), or None"
            )
            settled.append(Outcome.from_exception(job, "fail", problem, worker_id))
        else:
            settled.append(returned_outcome(task, job, results[position], worker_id))
    return settled


def _results(value: Any, count: int) -> list[Any] | None:
    if value is None:
        return [None] * count
    if isinstance(value, list | tuple) and len(value) == count:
        return list(value)
    return None
