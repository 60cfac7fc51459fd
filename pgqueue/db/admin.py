"""Operator actions as plans: cancel, dead-letter listing and replay, reaping.

Shared by the Python API (:class:`~pgqueue.PgQueue` methods), the CLI and the dashboard.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from datetime import datetime
from typing import Any, Literal, NamedTuple, TypedDict

from psycopg.rows import class_row, dict_row

from pgqueue.db.plan import Plan, fetch_all, fetch_one, fetch_value, fetch_values
from pgqueue.errors import InvalidJobError
from pgqueue.rules.job_specs import check_row_limit
from pgqueue.rules.options import check_job_id

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
    meta: dict[str, Any] | None
    tags: list[str] | None


class DeadLetterFilter(TypedDict, total=False):
    """Which dead letters ``pgq.admin.dead_letters`` and ``replay_dead_letters`` apply to: a
    filter left out (or None) matches any."""

    ids: Iterable[int] | None
    """Only these job ids."""
    task: str | None
    """Only this task's."""
    queue: str | None
    """Only this queue's."""
    error: str | None
    """Only those whose last error message contains this (case-insensitive)."""
    since: datetime | None
    """Only those that died at or after this (timezone-aware)."""
    until: datetime | None
    """Only those that died before this (timezone-aware)."""


_FILTERS = tuple(DeadLetterFilter.__annotations__)


def where(filters: Mapping[str, Any]) -> dict[str, Any]:
    """The query parameters selecting the dead letters ``filters`` name; raises
    :class:`~pgqueue.InvalidJobError` for an unknown filter or a bad time range."""
    if not filters.keys() <= set(_FILTERS):
        raise InvalidJobError(
            f"unknown dead-letter filter in {sorted(filters)} (known: {', '.join(_FILTERS)})"
        )
    params = {name: filters.get(name) for name in _FILTERS}
    if params["ids"] is not None:
        params["ids"] = [int(i) for i in params["ids"]]
    since, until = params["since"], params["until"]
    for when in (since, until):
        if when is not None and when.tzinfo is None:
            raise InvalidJobError("since/until must be timezone-aware datetimes")
    if since and until and since >= until:
        raise InvalidJobError("since must be earlier than until")
    return params


def cancel(job_id: int) -> Plan[CancelResult]:
    # Checked here, not in the plan's body: refused before any connection.
    return _cancel(check_job_id(job_id))


def _cancel(job_id: int) -> Plan[CancelResult]:
    result: CancelResult = yield from fetch_value("cancel_job", {"job_id": job_id})
    return result


def job_progress(job_id: int) -> Plan[Any]:
    return _job_progress(check_job_id(job_id))


def _job_progress(job_id: int) -> Plan[Any]:
    return (yield from fetch_value("job_progress", {"job_id": job_id}))


def list_dead_letters(filters: DeadLetterFilter, limit: int = 100) -> Plan[list[dict[str, Any]]]:
    # Checked here, not in the plan's body: bad input is refused before any connection.
    return _list_dead_letters(where(filters), check_row_limit(limit))


def _list_dead_letters(params: dict[str, Any], limit: int) -> Plan[list[dict[str, Any]]]:
    rows = yield from fetch_all(
        "list_dead_letters", {**params, "limit": limit}, row=class_row(DeadLetter)
    )
    return [row._asdict() for row in rows]


def replay_dead_letters(
    filters: DeadLetterFilter, batch_size: int = 500, dry_run: bool = False
) -> Plan[int]:
    """Move matching dead letters back to their queue in batches of ``batch_size`` (on an
    autocommit connection, each batch commits on its own); how many were (or, with
    ``dry_run``, would be) replayed."""
    params = where(filters)  # before any connection, as the batch size
    batch_size = check_row_limit(batch_size, "batch_size")
    return _count(params) if dry_run else _replay(params, batch_size)


def _count(params: dict[str, Any]) -> Plan[int]:
    return int((yield from fetch_value("count_dead_letters", params)))


def _replay(params: dict[str, Any], batch_size: int) -> Plan[int]:
    total = 0
    while True:
        moved = yield from replay_batch(params, batch_size)
        total += len(moved)
        if len(moved) < batch_size:
            return total


def replay_batch(params: dict[str, Any], batch_size: int) -> Plan[list[int]]:
    """One batch of a replay (``params``: :func:`where`'s)."""
    params = {**params, "batch_size": batch_size}
    return [int(i) for i in (yield from fetch_values("replay_dead_letters", params))]


def set_paused(queue: str, paused: bool) -> Plan[bool]:
    params = {"queue": queue, "paused": paused}
    row = yield from fetch_one("set_queue_paused", params, row=dict_row)
    return bool(row["paused"])


def reap(max_jobs: int = 1000) -> Plan[int]:
    # Checked here, not in the plan's body: refused before any connection (a negative LIMIT
    # would be a database error).
    return _reap(check_row_limit(max_jobs, "max_jobs"))


def _reap(max_jobs: int) -> Plan[int]:
    return int((yield from fetch_value("reap", {"max_jobs": max_jobs})))
