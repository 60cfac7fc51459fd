"""Operator actions as plans: cancel, dead-letter listing and replay, reaping.

Shared by the Python API (:class:`~pgqueue.PgQueue` methods), the CLI and the dashboard.
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime
from typing import Any, Literal, NamedTuple

from psycopg.rows import class_row, dict_row

from pgqueue.db.plan import Plan, fetch_all, fetch_one, fetch_value, fetch_values
from pgqueue.enqueue import check_limit
from pgqueue.errors import InvalidJobError

CancelResult = Literal["cancelled", "cancelling", "not_found"]


class DeadLetter(NamedTuple):
    """A row of ``list_dead_letters``."""

    id: int
    queue: str
    task: str
    args: Any
    attempts: int
    max_attempts: int
    reason: str
    last_error: str | None
    errors: list[Any]
    created_at: datetime
    dead_at: datetime


DEAD_LETTER_COLUMNS = DeadLetter._fields


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
    result: CancelResult = yield from fetch_value("cancel_job", {"job_id": job_id})
    return result


def job_progress(job_id: int) -> Plan[Any]:
    return (yield from fetch_value("job_progress", {"job_id": job_id}))


def list_dead_letters(where: DeadLetterFilter, limit: int) -> Plan[list[dict[str, Any]]]:
    # Checked here, not in the plan's body: a bad limit is refused before any connection.
    return _list_dead_letters(where, check_limit(limit))


def _list_dead_letters(where: DeadLetterFilter, limit: int) -> Plan[list[dict[str, Any]]]:
    params = {**where.params(), "limit": limit}
    rows = yield from fetch_all("list_dead_letters", params, row=class_row(DeadLetter))
    return [row._asdict() for row in rows]


def count_dead_letters(where: DeadLetterFilter) -> Plan[int]:
    return int((yield from fetch_value("count_dead_letters", where.params())))


def replay_batch(where: DeadLetterFilter, batch_size: int) -> Plan[list[int]]:
    params = {**where.params(), "batch_size": batch_size}
    return [int(i) for i in (yield from fetch_values("replay_dead_letters", params))]


def set_paused(queue: str, paused: bool) -> Plan[bool]:
    params = {"queue": queue, "paused": paused}
    row = yield from fetch_one("set_queue_paused", params, row=dict_row)
    return bool(row["paused"])


def reap(max_jobs: int = 1000) -> Plan[int]:
    return int((yield from fetch_value("reap", {"max_jobs": max_jobs})))
