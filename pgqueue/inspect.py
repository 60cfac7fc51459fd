"""Read-only views of the queue for operators, shared by the CLI and the dashboard."""

from __future__ import annotations

from typing import Any

from pgqueue.client import PgQueue
from pgqueue.db.plan import Plan, Query


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
)


def queue_stats(pgq: PgQueue) -> list[dict[str, Any]]:
    return pgq.run(_dicts("queue_stats", QUEUE_STATS_COLUMNS))
