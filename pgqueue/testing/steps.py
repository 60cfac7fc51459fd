"""What a drain does, written once: a generator of steps that the sync and the async drivers
(:mod:`pgqueue.testing.drain`) run. A step is a named query (:class:`~pgqueue.db.plan.Query`:
the worker's own statements, ``claim_jobs``, ``ack_jobs``, ``fail_jobs``, ... fenced by lease
token), a handler to call (:class:`Invoke`), or a pause (:class:`Pause`: a rate limit's next
token). The attempt's outcome is decided by the worker's own functions
(:mod:`pgqueue.worker.outcome`), so a job fares in a drain as it would under ``pgq work``.

Time is collapsed where nothing is ready: cron ticks due are enqueued, then scheduled jobs (a
retry's backoff, a ``run_at`` later) are made due now (``make_scheduled_due``). Each such step
is one entry of :func:`_collapse`; durable sleeps and events, when they exist, are one more.
"""

from __future__ import annotations

import uuid
from collections.abc import Callable, Generator, Mapping
from dataclasses import dataclass
from datetime import timedelta
from typing import Any, NamedTuple, TypeVar

from psycopg.rows import class_row, tuple_row

from pgqueue.db import plan as plans
from pgqueue.db.search import FoundJob
from pgqueue.errors import JobCancelled
from pgqueue.handler.batch import BatchTask
from pgqueue.handler.job_context import CLAIMED_COLUMNS, ClaimedJob, JobContext
from pgqueue.handler.job_transaction import TransactionHost
from pgqueue.handler.parking import JobParked
from pgqueue.handler.steps import SLEEP
from pgqueue.rules.tasks import Task
from pgqueue.testing.runs import DrainError, DrainSummary, JobRun, run_outcome
from pgqueue.worker.batches import prepare, settle
from pgqueue.worker.outcome import (
    Outcome,
    ack_params,
    acked,
    arguments,
    fail_params,
    failed,
    park_sleep_params,
    park_wait_params,
    parked,
    parked_outcome,
    raised_outcome,
    returned_outcome,
    transaction_outcome,
)
from pgqueue.worker.scheduler import due_ticks
from pgqueue.worker.store import FLOW_CLAIM_COLUMNS, rows_named

# A flow claim's rows: the claimed job's columns, then how long a rate limit holds back the rest.
_FLOW_ROWS = rows_named(FLOW_CLAIM_COLUMNS)
_THROTTLED = FLOW_CLAIM_COLUMNS.index("throttled")

T = TypeVar("T")

#: A drain's lease: long enough for any handler a test runs (nothing heartbeats it).
LEASE = timedelta(hours=1)


@dataclass(frozen=True, slots=True)
class Invoke:
    """Call a handler: the driver calls ``func(*args, **kwargs)`` (awaited when the task is
    async) with ``ctx`` as the current job, and sends back a :class:`Called`."""

    task: Task[..., Any]
    ctx: JobContext | None
    func: Callable[..., Any]
    args: list[Any]
    kwargs: dict[str, Any]


class Called(NamedTuple):
    """What a handler did: returned ``value``, or raised ``error``."""

    value: Any
    error: Exception | JobParked | None


@dataclass(frozen=True, slots=True)
class Pause:
    """Wait ``seconds`` (flow control holds ready jobs back until then)."""

    seconds: float


Step = plans.Step | Invoke | Pause
Steps = Generator[Step, Any, T]


@dataclass(frozen=True, slots=True)
class DrainOptions:
    queue: str | None = None
    max_jobs: int = 1000
    cron: bool = True
    scheduled: bool = True
    #: The longest a drain waits in total for rate limits to let jobs through.
    max_wait: float = 10.0


def new_worker_id() -> str:
    return str(uuid.uuid4())


def drain_steps(
    tasks: Mapping[str, Task[..., Any]],
    options: DrainOptions,
    host: TransactionHost,
    worker_id: str,
) -> Steps[DrainSummary]:
    """Run ready jobs one at a time until none is, collapsing time whenever none is."""
    summary = DrainSummary()
    names = sorted(tasks)
    if not names:
        return summary
    waited = 0.0
    # The queues to claim from: read again whenever a claim finds nothing (a handler may have
    # enqueued into another queue), not before every claim (one statement less per job).
    queues: list[str] | None = [options.queue] if options.queue else None
    while True:
        fresh = queues is None
        if queues is None:
            queues = yield from _live_queues()
        job, throttled = (
            (None, None) if not queues else (yield from _claim(queues, names, worker_id))
        )
        if job is None:
            if not fresh:
                queues = None if not options.queue else queues
                if queues is None:
                    continue  # read the queues again before concluding nothing is ready
            if throttled is not None and waited + throttled <= options.max_wait:
                waited += throttled
                yield Pause(throttled)
                continue
            if (yield from _collapse(options, names, summary)):
                queues = None if not options.queue else queues
                continue
            return summary
        if len(summary.runs) >= options.max_jobs:
            yield from plans.fetch_values(
                "release_jobs", {"ids": [job.id], "tokens": [job.lease_token]}
            )
            raise DrainError(
                f"the drain ran {options.max_jobs} attempts and jobs are still ready (a job "
                "that enqueues itself, or raises Retry for ever?); pass a larger max_jobs= "
                f"if that many are expected ({summary})"
            )
        summary.runs.append((yield from attempt(tasks[job.task], job, host, worker_id)))


def _collapse(options: DrainOptions, names: list[str], summary: DrainSummary) -> Steps[bool]:
    """Nothing is ready: let time pass. Whether that made any job ready to claim."""
    if options.cron:
        ticks = yield from _cron_ticks()
        summary.cron_ticks += ticks
        if ticks:
            return True
    if options.scheduled:
        queues = [options.queue] if options.queue else (yield from _scheduled_queues())
        if queues:
            due = yield from plans.fetch_values(
                "make_scheduled_due", {"queues": queues, "tasks": names}
            )
            # Waits for events not emitted: time passes for their timeouts too; one without
            # a timeout goes on waiting (an event the test emits wakes it).
            held: list[Any] = []
            if due:
                held = yield from plans.fetch_values("collapse_waits", {"ids": due})
            if len(due) > len(held):
                return True
    return False


def _live_queues() -> Steps[list[str]]:
    """Queues with ready or due jobs (the metrics' ``queue_depths``)."""
    rows = yield from plans.fetch_all("queue_depths", row=tuple_row)
    return sorted(row[0] for row in rows if row[1])


def _scheduled_queues() -> Steps[list[str]]:
    rows = yield from plans.fetch_all("queue_depths", row=tuple_row)
    return sorted(row[0] for row in rows if row[2])


def _claim_params(
    queues: list[str], names: list[str], worker_id: str, after: list[Any] | None = None
) -> dict[str, Any]:
    empty = [None] * len(queues)
    return {
        "queues": queues,
        "tasks": names,
        "lease": LEASE,
        "worker_id": worker_id,
        "limit": 1,
        "running": [0] * len(queues),
        "after_priority": empty if after is None else [after[0]],
        "after_run_at": empty if after is None else [after[1]],
        "after_id": empty if after is None else [after[2]],
    }


def _claim(
    queues: list[str], names: list[str], worker_id: str
) -> Steps[tuple[ClaimedJob | None, float | None]]:
    """The next job, as the worker's fetcher claims it (``claim_jobs``; ``claim_flow`` when
    flow control applies, as ``next_due`` says), or None and how long until a rate limit lets
    one through (None: nothing is held back)."""
    params = _claim_params(queues, names, worker_id)
    rows = yield from plans.fetch_all("claim_jobs", params, row=rows_named(CLAIMED_COLUMNS))
    if rows:
        return ClaimedJob.from_row(rows[0]), None
    due = yield from plans.fetch_all("next_due", params, row=tuple_row)
    if not (due and due[0][1]):
        return None, None
    throttled = None
    for row in (yield from plans.fetch_all("claim_flow", params, row=_FLOW_ROWS)):
        if row[0] is not None:
            return ClaimedJob.from_row(row), None
        seconds = row[_THROTTLED]
        if seconds is not None and seconds > 0:
            throttled = float(seconds)
    return None, throttled


def _cron_ticks() -> Steps[int]:
    """Enqueue the ticks due of every cron schedule (the worker's scheduler does the same)."""
    count = 0
    for row in (yield from plans.fetch_all("due_schedules", row=tuple_row)):
        _, params = due_ticks(row)
        enqueued = yield from plans.fetch_all("enqueue_schedule_ticks", params, row=tuple_row)
        count += sum(1 for tick, *_ in enqueued if tick is not None)
    return count


def attempt(
    task: Task[..., Any], job: ClaimedJob, host: TransactionHost, worker_id: str
) -> Steps[JobRun]:
    """Run one claimed job's handler and write its outcome with the worker's statements."""
    ctx = JobContext(job, worker_id)
    ctx.transactions = host
    called = Called(None, None)
    if isinstance(task, BatchTask):
        # A batch of one: the handler gets its list of items, as under a worker.
        items, _, unfit = prepare(task, [ctx], worker_id)
        if unfit:
            outcome: Outcome | None = unfit[0]
        else:
            called = yield Invoke(task, None, task.func, [items], {})
            what = settle(task, items, called.value, called.error, worker_id)[0]
            outcome = (
                _raised(task, job, what, worker_id) if isinstance(what, BaseException) else what
            )
    else:
        prepared = arguments(task, job, ctx, worker_id)
        if isinstance(prepared, Outcome):
            outcome = prepared
        else:
            called = yield Invoke(task, ctx, task.func, *prepared)
            outcome = (
                returned_outcome(task, job, called.value, worker_id)
                if called.error is None
                else _raised(task, job, called.error, worker_id)
            )
    if ctx.transaction_state is not None:
        outcome = transaction_outcome(ctx, outcome)
    written = "stale" if outcome is None else (yield from write(outcome))
    return JobRun(
        job.id,
        job.task,
        job.queue,
        job.args,
        job.attempt,
        job.max_attempts,
        run_outcome(written),
        called.value,
        called.error,
        None if outcome is None else outcome.summary,
    )


def _raised(task: Task[..., Any], job: ClaimedJob, exc: BaseException, worker_id: str) -> Outcome:
    if isinstance(exc, JobParked):
        return parked_outcome(job, exc)
    if isinstance(exc, JobCancelled):
        return Outcome(job, "cancelled")
    if not isinstance(exc, Exception):
        raise exc
    return raised_outcome(task, job, exc, worker_id)


def write(outcome: Outcome) -> Steps[str]:
    """The outcome written as the worker's completer writes it (fenced by lease token): what
    the statement made of it (succeeded, cancelled, retry, dead, stale)."""
    if outcome.written is not None:  # the handler's ctx.transaction() completed it
        return outcome.written
    if outcome.kind == "ack":
        rows = yield from plans.fetch_all(
            "ack_jobs", ack_params([outcome]), row=tuple_row, prepare=False
        )
        return acked([outcome], rows)[0][1]
    if outcome.kind == "park":
        if outcome.park is not None and outcome.park.kind == SLEEP:
            rows = yield from plans.fetch_all(
                "park_sleeps", park_sleep_params([outcome]), row=tuple_row, prepare=False
            )
        else:
            rows = yield from plans.fetch_all(
                "park_for_events", park_wait_params([outcome]), row=tuple_row, prepare=False
            )
        return parked([outcome], rows)[0][1]
    rows = yield from plans.fetch_all(
        "fail_jobs", fail_params([outcome]), row=tuple_row, prepare=False
    )
    return failed([outcome], rows)[0][1]


def run_job_steps(
    tasks: Mapping[str, Task[..., Any]], job_id: int, host: TransactionHost, worker_id: str
) -> Steps[JobRun]:
    """Claim one job by id (made due now if it was scheduled) and run it."""
    found = yield from _live_job(job_id)
    state, name = found["state"], found["task"]
    if state == "scheduled":
        yield from plans.fetch_values("retry_waiting_jobs", {"ids": [job_id]})
        found = yield from _live_job(job_id)
    elif state != "ready":
        why = {
            "running": "a worker holds it",
            "waiting": "it waits for its workflow's parents (or room in its queue)",
        }.get(state, state)
        raise DrainError(f"job {job_id} cannot run now: {why}")
    if name not in tasks:
        raise DrainError(f"job {job_id} is of task {name!r}, which this PgQueue has not registered")
    # The claim's own walk, started just before this job's key: it is the first it meets.
    after = [found["priority"], found["run_at"], job_id - 1]
    params = _claim_params([found["queue"]], [name], worker_id, after)
    rows = yield from plans.fetch_all("claim_jobs", params, row=rows_named(CLAIMED_COLUMNS))
    job = ClaimedJob.from_row(rows[0]) if rows else None
    if job is None or job.id != job_id:
        if job is not None:
            yield from plans.fetch_values(
                "release_jobs", {"ids": [job.id], "tokens": [job.lease_token]}
            )
        raise DrainError(
            f"job {job_id} could not be claimed (its queue {found['queue']!r} is paused, flow "
            "control holds it back, or another worker took it)"
        )
    return (yield from attempt(tasks[name], job, host, worker_id))


def _live_job(job_id: int) -> Steps[dict[str, Any]]:
    found = yield from plans.fetch_first("find_job", {"id": job_id}, row=class_row(FoundJob))
    if found is None:
        raise DrainError(f"no job {job_id} (never enqueued, or finished and not kept)")
    if found.place != "live":
        where = "dead-lettered" if found.place == "dead" else "finished"
        raise DrainError(f"job {job_id} cannot run: it is {where}")
    return found.job
