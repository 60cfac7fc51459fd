"""Read-only views of the queue for operators, shared by the CLI, the dashboard and metrics.

Each function runs one named query (from ``pgqueue/db/queries.sql``) over a documented view or
table and returns plain dicts, so ``--json`` output, the dashboard's API and ``psql`` agree.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from datetime import datetime, timedelta
from typing import Any

import psycopg

from pgqueue import search
from pgqueue.client import PgQueue
from pgqueue.db.plan import Plan, Query
from pgqueue.errors import InvalidJobError
from pgqueue.search import JobFilter, SearchPage

JOB_STATES = ("ready", "scheduled", "running")


def _dicts(
    name: str, columns: tuple[str, ...], params: dict[str, Any] | None = None
) -> Plan[list[dict[str, Any]]]:
    rows = yield Query(name, params)
    return [dict(zip(columns, row, strict=True)) for row in rows]


QUEUE_STATS_COLUMNS = (
    "queue",
    "ready",
    "scheduled",
    "running",
    "dead",
    "oldest_ready_age",
    "paused",
    "waiting",
    "succeeded_per_min",
    "failed_per_min",
)
JOB_COLUMNS = (
    "id",
    "queue",
    "task",
    "state",
    "priority",
    "attempts",
    "max_attempts",
    "run_at",
    "created_at",
    "worker_id",
    "lease_left",
    "last_error",
)
RUNNING_COLUMNS = (
    "id",
    "queue",
    "task",
    "attempt",
    "max_attempts",
    "worker_id",
    "host",
    "pid",
    "started_at",
    "running_for",
    "lease_left",
    "cancel_requested",
    "progress",
    "progress_at",
)
WORKER_COLUMNS = (
    "id",
    "host",
    "pid",
    "queues",
    "concurrency",
    "version",
    "started_at",
    "last_seen",
    "stopped_at",
    "status",
    "jobs_held",
    "jobs_succeeded",
    "jobs_retried",
    "jobs_dead",
    "jobs_cancelled",
    "leases_lost",
)
FAILURE_COLUMNS = (
    "queue",
    "task",
    "retried",
    "dead",
    "error_class",
    "last_error",
    "failed_at",
)
THROUGHPUT_COLUMNS = ("minute", "queue", "succeeded", "retried", "dead", "cancelled")


def queue_stats(pgq: PgQueue) -> list[dict[str, Any]]:
    """``pgqueue.queue_stats``: one row per queue."""
    return pgq.run(_dicts("queue_stats", QUEUE_STATS_COLUMNS))


def jobs(
    pgq: PgQueue,
    *,
    queue: str | None = None,
    state: str | None = None,
    task: str | None = None,
    limit: int = 50,
) -> list[dict[str, Any]]:
    """Live jobs (``pgqueue.jobs``), oldest first."""
    if state is not None and state not in JOB_STATES:
        raise InvalidJobError(f"state must be one of {', '.join(JOB_STATES)}, got {state!r}")
    if limit < 1:
        raise InvalidJobError("limit must be at least 1")
    params = {"queue": queue, "state": state, "task": task, "limit": limit}
    return pgq.run(_dicts("list_jobs", JOB_COLUMNS, params))


def find_job(pgq: PgQueue, job_id: int) -> dict[str, Any] | None:
    """Every column of one job, from wherever it is: ``place`` is live, dead or history."""
    rows = pgq.run(_dicts("find_job", ("place", "job"), {"id": job_id}))
    if not rows:
        return None
    return {"place": rows[0]["place"], **rows[0]["job"]}


def job_filter(
    *,
    id: int | None = None,
    task: str | None = None,
    queue: str | None = None,
    state: str | Sequence[str] | None = None,
    error: str | None = None,
    args: Mapping[str, Any] | None = None,
    since: datetime | None = None,
    until: datetime | None = None,
    finished_since: datetime | None = None,
    finished_until: datetime | None = None,
) -> JobFilter:
    """A :class:`~pgqueue.search.JobFilter` from keyword arguments (``state``: one state or
    several, any of :data:`pgqueue.search.STATES`)."""
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
    )


def search_jobs(
    pgq: PgQueue,
    *,
    limit: int = 50,
    after: str | None = None,
    timeout: float | None = search.DEFAULT_TIMEOUT,
    **filters: Any,
) -> SearchPage:
    """One page of jobs wherever they are (live, history, dead), newest first: ``page.jobs``
    (rows of :data:`pgqueue.search.COLUMNS`) and ``page.cursor``, which ``after=`` takes to get
    the next page (None: no more). ``filters``: those of :func:`job_filter`. A page taking
    longer than ``timeout`` seconds raises :class:`~pgqueue.errors.SearchTimeoutError`."""
    plan = search.search(job_filter(**filters), limit=limit, after=after, timeout=timeout)
    try:
        return pgq.run(plan, atomic=True)
    except psycopg.errors.QueryCanceled:
        raise search.timed_out(timeout) from None


async def search_jobs_async(
    pgq: PgQueue,
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


def job_detail(pgq: PgQueue, job_id: int) -> dict[str, Any] | None:
    """Everything about one job: its row wherever it is (``place``, ``state``, ``args``,
    ``errors`` with every attempt's traceback), its ``workflow`` (parents and dependents with
    their states; None outside a workflow) and the ``actions`` its state allows. None when no
    table holds the id."""
    return pgq.run(search.job_detail(job_id))


async def job_detail_async(pgq: PgQueue, job_id: int) -> dict[str, Any] | None:
    """The async twin of :func:`job_detail`."""
    return await pgq.run_async(search.job_detail(job_id))


def running_jobs(pgq: PgQueue, limit: int = 100) -> list[dict[str, Any]]:
    """``pgqueue.running_jobs``: what runs where, and how much lease it has left."""
    return pgq.run(_dicts("list_running_jobs", RUNNING_COLUMNS, {"limit": limit}))


def workers(pgq: PgQueue, *, include_stopped: bool = False) -> list[dict[str, Any]]:
    """``pgqueue.worker_status``: worker processes (running and lost; stopped ones on request)."""
    return pgq.run(_dicts("list_workers", WORKER_COLUMNS, {"all": include_stopped}))


def recent_failures(pgq: PgQueue) -> list[dict[str, Any]]:
    """``pgqueue.recent_failures``: failures over the last hour by queue and task."""
    return pgq.run(_dicts("list_recent_failures", FAILURE_COLUMNS))


def throughput(pgq: PgQueue) -> list[dict[str, Any]]:
    """``pgqueue.throughput``: finished jobs per minute and queue over the last hour."""
    return pgq.run(_dicts("list_throughput", THROUGHPUT_COLUMNS))


def json_default(value: Any) -> Any:
    """``json.dumps(default=...)`` for the views' rows in operators' output (``--json``, the
    dashboard's API): timestamps as ISO 8601, durations as seconds, anything else as text."""
    if isinstance(value, datetime):
        return value.isoformat()
    if isinstance(value, timedelta):
        return value.total_seconds()
    return str(value)
