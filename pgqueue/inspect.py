"""Read-only views of the queue for operators, shared by the CLI, the dashboard and metrics.

Each function runs one named query (from ``pgqueue/db/queries.sql``) over a documented view or
table and returns plain dicts, so ``--json`` output, the dashboard's API and ``psql`` agree.
"""

from __future__ import annotations

from datetime import datetime, timedelta
from typing import Any

from pgqueue.client import PgQueue
from pgqueue.db.plan import Plan, Query
from pgqueue.errors import InvalidJobError

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
