"""Operator actions as plans: cancel, dead-letter listing and replay, reaping.

Shared by the Python API (:class:`~pgqueue.PgQueue` methods), the CLI and the dashboard.
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime
from typing import Any, Literal

from pgqueue.db.plan import Plan, Query
from pgqueue.enqueue import check_limit
from pgqueue.errors import InvalidJobError

CancelResult = Literal["cancelled", "cancelling", "not_found"]

DEAD_LETTER_COLUMNS = (
    "id",
    "queue",
    "task",
    "args",
    "attempts",
    "max_attempts",
    "reason",
    "last_error",
    "errors",
    "created_at",
    "dead_at",
)


@dataclass(frozen=True, slots=True)
class DeadLetterFilter:
    """Which dead letters an operation applies to; None means "any"."""

    ids: tuple[int, ...] | None = None
    task: str | None = None
    queue: str | None = None
    error: str | None = None  # case-insensitive substring of the last error message
    since: datetime | None = None
    until: datetime | None = None

    def __post_init__(self) -> None:
        for when in (self.since, self.until):
            if when is not None and when.tzinfo is None:
                raise InvalidJobError("since/until must be timezone-aware datetimes")
        if self.since and self.until and self.since >= self.until:
            raise InvalidJobError("since must be earlier than until")

    def params(self) -> dict[str, Any]:
        return {
            "ids": list(self.ids) if self.ids is not None else None,
            "task": self.task,
            "queue": self.queue,
            "error": self.error,
            "since": self.since,
            "until": self.until,
        }


def cancel(job_id: int) -> Plan[CancelResult]:
    rows = yield Query("cancel_job", {"job_id": job_id})
    result: CancelResult = rows[0][0]
    return result


def job_progress(job_id: int) -> Plan[Any]:
    rows = yield Query("job_progress", {"job_id": job_id})
    return rows[0][0] if rows else None


def list_dead_letters(where: DeadLetterFilter, limit: int) -> Plan[list[dict[str, Any]]]:
    # Checked here, not in the plan's body: a bad limit is refused before any connection.
    return _list_dead_letters(where, check_limit(limit))


def _list_dead_letters(where: DeadLetterFilter, limit: int) -> Plan[list[dict[str, Any]]]:
    rows = yield Query("list_dead_letters", {**where.params(), "limit": limit})
    return [dict(zip(DEAD_LETTER_COLUMNS, row, strict=True)) for row in rows]


def count_dead_letters(where: DeadLetterFilter) -> Plan[int]:
    rows = yield Query("count_dead_letters", where.params())
    return int(rows[0][0])


def replay_batch(where: DeadLetterFilter, batch_size: int) -> Plan[list[int]]:
    rows = yield Query("replay_dead_letters", {**where.params(), "batch_size": batch_size})
    return [int(row[0]) for row in rows]


def set_paused(queue: str, paused: bool) -> Plan[bool]:
    rows = yield Query("set_queue_paused", {"queue": queue, "paused": paused})
    return bool(rows[0][1])


def reap(max_jobs: int = 1000) -> Plan[int]:
    rows = yield Query("reap", {"max_jobs": max_jobs})
    return int(rows[0][0])
