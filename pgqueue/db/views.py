"""Read-only views of the queue for operators, shared by the CLI, the dashboard and metrics.

Each function runs one named query (from ``pgqueue/db/queries/``) over a documented view or
table and returns plain dicts, so ``--json`` output, the dashboard's API and ``psql`` agree.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from datetime import datetime, timedelta
from itertools import pairwise
from typing import Any, NamedTuple
from uuid import UUID

import psycopg
from psycopg.rows import class_row
from psycopg.types.json import Jsonb

from pgqueue.db import search
from pgqueue.db.plan import Plan, Runner, fetch_all, fetch_first, fetch_value
from pgqueue.db.search import JobFilter, SearchPage
from pgqueue.errors import InvalidJobError
from pgqueue.rules.options import check_meta, check_tags
from pgqueue.rules.vocabulary import LiveState

#: The states ``jobs()`` lists (waiting workflow steps are read per workflow).
JOB_STATES: tuple[LiveState, ...] = ("ready", "scheduled", "running")


def _dicts(
    name: str, row: type[NamedTuple], params: dict[str, Any] | None = None
) -> Plan[list[dict[str, Any]]]:
    rows = yield from fetch_all(name, params, row=class_row(row))
    return [r._asdict() for r in rows]


class UnservedTask(NamedTuple):
    """A row of the ``unserved_tasks`` query: jobs that no running worker would claim."""

    queue: str
    task: str
    jobs: int
    oldest: datetime


class QueueStats(NamedTuple):
    """A row of ``pgqueue.queue_stats``."""

    queue: str
    ready: int
    scheduled: int
    running: int
    dead: int
    oldest_ready_age: timedelta | None
    paused: bool
    waiting: int
    succeeded_per_min: float
    failed_per_min: float


class LiveJob(NamedTuple):
    """A row of ``list_jobs`` (``pgqueue.jobs``)."""

    id: int
    queue: str
    task: str
    state: str
    priority: int
    attempts: int
    max_attempts: int
    run_at: datetime
    created_at: datetime
    worker_id: UUID | None
    lease_left: timedelta | None
    last_error: str | None
    tags: list[str] | None


class RunningJob(NamedTuple):
    """A row of ``pgqueue.running_jobs``."""

    id: int
    queue: str
    task: str
    attempt: int
    max_attempts: int
    worker_id: UUID
    host: str | None
    pid: int | None
    started_at: datetime
    running_for: timedelta
    lease_left: timedelta
    cancel_requested: bool
    progress: Any
    progress_at: datetime | None
    meta: dict[str, Any] | None
    tags: list[str] | None


class WorkerStatus(NamedTuple):
    """A row of ``pgqueue.worker_status``."""

    id: UUID
    host: str
    pid: int
    queues: list[str]
    concurrency: int
    version: str
    started_at: datetime
    last_seen: datetime
    stopped_at: datetime | None
    status: str
    jobs_held: int
    jobs_succeeded: int
    jobs_retried: int
    jobs_dead: int
    jobs_cancelled: int
    leases_lost: int


class RecentFailure(NamedTuple):
    """A row of ``pgqueue.recent_failures``."""

    queue: str
    task: str
    retried: int
    dead: int
    error_class: str | None
    last_error: str | None
    failed_at: datetime | None


class Throughput(NamedTuple):
    """A row of ``pgqueue.throughput``."""

    minute: datetime
    queue: str
    succeeded: int
    retried: int
    dead: int
    cancelled: int


# The columns each operator view shows, in order (the CLI's tables).
QUEUE_STATS_COLUMNS = QueueStats._fields
JOB_COLUMNS = LiveJob._fields
RUNNING_COLUMNS = RunningJob._fields
WORKER_COLUMNS = WorkerStatus._fields
FAILURE_COLUMNS = RecentFailure._fields
THROUGHPUT_COLUMNS = Throughput._fields


def queue_stats(pgq: Runner) -> list[dict[str, Any]]:
    """``pgqueue.queue_stats``: one row per queue."""
    return pgq.run(_dicts("queue_stats", QueueStats))


def jobs(
    pgq: Runner,
    *,
    queue: str | None = None,
    state: str | None = None,
    task: str | None = None,
    tags: Sequence[str] | None = None,
    meta: Mapping[str, Any] | None = None,
    limit: int = 50,
) -> list[dict[str, Any]]:
    """Live jobs (``pgqueue.jobs``), oldest first; ``tags``: only jobs with every one of
    these tags, ``meta``: only jobs whose metadata contains this object."""
    if state is not None and state not in JOB_STATES:
        raise InvalidJobError(f"state must be one of {', '.join(JOB_STATES)}, got {state!r}")
    if limit < 1:
        raise InvalidJobError("limit must be at least 1")
    params = {
        "queue": queue,
        "state": state,
        "task": task,
        "tags": list(check_tags(tags)) if tags else None,
        "meta": Jsonb(check_meta(meta)) if meta else None,
        "limit": limit,
    }
    return pgq.run(_dicts("list_jobs", LiveJob, params))


def find_job(pgq: Runner, job_id: int) -> dict[str, Any] | None:
    """Every column of one job, from wherever it is: ``place`` is live, dead or history."""
    found = pgq.run(fetch_first("find_job", {"id": job_id}, row=class_row(search.FoundJob)))
    if found is None:
        return None
    return {"place": found.place, **found.job}


def job_filter(
    *,
    id: int | None = None,
    task: str | None = None,
    queue: str | None = None,
    state: str | Sequence[str] | None = None,
    error: str | None = None,
    args: Mapping[str, Any] | None = None,
    since: datetime | timedelta | None = None,
    until: datetime | timedelta | None = None,
    finished_since: datetime | timedelta | None = None,
    finished_until: datetime | timedelta | None = None,
    tags: Sequence[str] | None = None,
    meta: Mapping[str, Any] | None = None,
) -> JobFilter:
    """A :class:`~pgqueue.db.search.JobFilter` from keyword arguments (``state``: one state or
    several, any of :data:`pgqueue.db.search.STATES`; ``tags``: every one of these tags;
    ``meta``: the metadata contains this object; ``since``, ``until``, ``finished_since``,
    ``finished_until``: an aware datetime, or a timedelta for an age counted back from the
    database's clock when the search runs)."""
    states = (state,) if isinstance(state, str) else (tuple(state) if state else None)
    return JobFilter(
        id=id,
        task=task,
        queue=queue,
        states=states,
        error=error,
        args=args,
        since=since,
        until=until,
        finished_since=finished_since,
        finished_until=finished_until,
        tags=tuple(tags) if tags else None,
        meta=meta or None,
    )


def search_jobs(
    pgq: Runner,
    *,
    limit: int = 50,
    after: str | None = None,
    timeout: float | None = search.DEFAULT_TIMEOUT,
    **filters: Any,
) -> SearchPage:
    """One page of jobs wherever they are (live, history, dead), newest first: ``page.jobs``
    (rows of :data:`pgqueue.db.search.COLUMNS`) and ``page.cursor``, which ``after=`` takes to get
    the next page (None: no more). ``filters``: those of :func:`job_filter`. A page taking
    longer than ``timeout`` seconds raises :class:`~pgqueue.errors.SearchTimeoutError`."""
    plan = search.search(job_filter(**filters), limit=limit, after=after, timeout=timeout)
    try:
        return pgq.run(plan, atomic=True)
    except psycopg.errors.QueryCanceled:
        raise search.timed_out(timeout) from None


async def search_jobs_async(
    pgq: Runner,
    *,
    limit: int = 50,
    after: str | None = None,
    timeout: float | None = search.DEFAULT_TIMEOUT,
    **filters: Any,
) -> SearchPage:
    """The async twin of :func:`search_jobs` (the same plan)."""
    plan = search.search(job_filter(**filters), limit=limit, after=after, timeout=timeout)
    try:
        return await pgq.run_async(plan, atomic=True)
    except psycopg.errors.QueryCanceled:
        raise search.timed_out(timeout) from None


def job_detail(pgq: Runner, job_id: int) -> dict[str, Any] | None:
    """Everything about one job: its row wherever it is (``place``, ``state``, ``args``,
    ``errors`` with every attempt's traceback), its ``workflow`` (parents and dependents with
    their states; None outside a workflow) and the ``actions`` its state allows. None when no
    table holds the id. An error that is the first attempt after a replay from the dead letters
    has ``replayed: true`` (and ``replayed_at`` when the replay recorded its time), so the
    attempts read 1, 2, replayed, 1, 2."""
    return _with_replays(pgq.run(search.job_detail(job_id)))


async def job_detail_async(pgq: Runner, job_id: int) -> dict[str, Any] | None:
    """The async twin of :func:`job_detail`."""
    return _with_replays(await pgq.run_async(search.job_detail(job_id)))


def _with_replays(job: dict[str, Any] | None) -> dict[str, Any] | None:
    # A replay marks the last error before it (replay_dead_letters); replays older than that
    # mark show as the attempt number starting again.
    errors = (job or {}).get("errors") or []
    marks = [
        (after, before.get("replayed_at"))
        for before, after in pairwise(errors)
        if "replayed_at" in before or _restarted(before.get("attempt"), after.get("attempt"))
    ]
    for error, at in marks:
        error["replayed"] = True
        if at is not None:
            error["replayed_at"] = at
    return job


def _restarted(before: object, after: object) -> bool:
    return isinstance(before, int) and isinstance(after, int) and after <= before


def unserved_tasks(pgq: Runner, limit: int = 50) -> list[dict[str, Any]]:
    """Tasks whose jobs wait (ready or scheduled) with no running worker for them: ``queue``,
    ``task``, ``jobs`` and the ``oldest`` job's enqueue time (see the ``unserved_tasks``
    query). Scans the waiting jobs: for an operator's look, not a hot path."""
    return pgq.run(_dicts("unserved_tasks", UnservedTask, {"limit": limit}))


def running_jobs(pgq: Runner, limit: int = 100) -> list[dict[str, Any]]:
    """``pgqueue.running_jobs``: what runs where, and how much lease it has left."""
    return pgq.run(_dicts("list_running_jobs", RunningJob, {"limit": limit}))


def workers(
    pgq: Runner, *, include_stopped: bool = False, stopped_within: timedelta | None = None
) -> list[dict[str, Any]]:
    """``pgqueue.worker_status``: worker processes (running and lost; stopped ones on request:
    all of them, or those stopped within ``stopped_within`` by the database's clock)."""
    params = {"all": include_stopped, "stopped_within": stopped_within}
    return pgq.run(_dicts("list_workers", WorkerStatus, params))


def recent_failures(pgq: Runner) -> list[dict[str, Any]]:
    """``pgqueue.recent_failures``: failures over the last hour by queue and task."""
    return pgq.run(_dicts("list_recent_failures", RecentFailure))


def database_now(pgq: Runner) -> datetime:
    """The database's clock (``now()``): where windows over rows it stamped should end."""
    now: datetime = pgq.run(fetch_value("db_now"))
    return now


def throughput(pgq: Runner) -> list[dict[str, Any]]:
    """``pgqueue.throughput``: finished jobs per minute and queue over the last hour."""
    return pgq.run(_dicts("list_throughput", Throughput))


def json_default(value: Any) -> Any:
    """``json.dumps(default=...)`` for the views' rows in operators' output (``--json``, the
    dashboard's API): timestamps as ISO 8601, durations as seconds, anything else as text."""
    if isinstance(value, datetime):
        return value.isoformat()
    if isinstance(value, timedelta):
        return value.total_seconds()
    return str(value)
