"""Flow control as plans: queue settings, task limits and circuit breakers read and written
(``pgqueue.queues``, ``pgqueue.task_limits``, ``pgqueue.circuit_breakers``), per-key buckets
pruned, and what the code declares synced. The values themselves are in
:mod:`pgqueue.rules.flow_control`.
"""

from __future__ import annotations

from collections.abc import Mapping
from datetime import datetime, timedelta
from typing import TYPE_CHECKING, Any, NamedTuple

from psycopg.rows import class_row

from pgqueue.db.plan import Plan, Query, fetch_all, fetch_one
from pgqueue.errors import ConfigurationError
from pgqueue.rules.flow_control import UNSET, CircuitBreaker, DeclaredLimits, RateLimit, check_limit
from pgqueue.rules.payload import check_name

if TYPE_CHECKING:
    from typing import Unpack

    from pgqueue.rules.flow_control import QueueChanges, TaskLimitChanges


class QueueSettings(NamedTuple):
    """A queue's settings (``pgqueue.queues``), as ``pgq queue`` shows them."""

    queue: str
    paused: bool
    weight: int | None
    max_depth: int | None
    concurrency_limit: int | None
    rate_limit: float | None
    rate_burst: float | None
    fair: bool


class TaskLimits(NamedTuple):
    """A task's limits (``pgqueue.task_limits``)."""

    task: str
    concurrency_limit: int | None
    key_limit: int | None
    keyed: bool
    rate_limit: float | None
    rate_burst: float | None
    key_rate_limit: float | None
    key_rate_burst: float | None
    from_code: bool


class BreakerStatus(NamedTuple):
    """A row of ``pgqueue.circuit_breaker_status``."""

    task: str
    state: str
    failures: int
    successes: int
    failure_rate: float | None
    failure_threshold: float
    min_calls: int
    window_length: timedelta
    cooldown: timedelta
    opened_at: datetime | None
    open_until: datetime | None
    probe_job_id: int | None
    trips: int


QUEUE_COLUMNS = QueueSettings._fields
TASK_COLUMNS = TaskLimits._fields
BREAKER_COLUMNS = BreakerStatus._fields


def _changes(values: Mapping[str, Any]) -> dict[str, Any]:
    """Query parameters: each setting's value and whether to change it."""
    params: dict[str, Any] = {}
    for name, value in values.items():
        params[f"set_{name}"] = value is not UNSET
        params[name] = None if value is UNSET else value
    return params


def _rate_changes(rate_limit: Any, prefix: str = "") -> dict[str, Any]:
    rate = None if rate_limit is None or rate_limit is UNSET else RateLimit.parse(rate_limit)
    return {
        f"set_{prefix}rate": rate_limit is not UNSET,
        f"{prefix}rate_limit": rate.rate if rate else None,
        f"{prefix}rate_burst": rate.bucket if rate else None,
    }


def configure_queue(queue: str, **settings: Unpack[QueueChanges]) -> Plan[dict[str, Any]]:
    check_name(queue, "queue name")
    weight = settings.get("weight", UNSET)
    max_depth = settings.get("max_depth", UNSET)
    concurrency_limit = settings.get("concurrency_limit", UNSET)
    fair = settings.get("fair", UNSET)
    if weight is not UNSET and weight is not None:
        check_limit(weight, "weight")
    for value, what in ((max_depth, "max_depth"), (concurrency_limit, "concurrency_limit")):
        if value is not UNSET:
            check_limit(value, what)
    if fair is not UNSET and fair is not None and not isinstance(fair, bool):
        raise ConfigurationError(f"fair must be True or False, got {fair!r}")
    params = _changes(
        {
            "weight": weight,
            "max_depth": max_depth,
            "concurrency_limit": concurrency_limit,
            "fair": fair if fair is UNSET else bool(fair),
        }
    )
    params.update(queue=queue, **_rate_changes(settings.get("rate_limit", UNSET)))
    row = yield from fetch_one("configure_queue", params, row=class_row(QueueSettings))
    return row._asdict()


def configure_task(task: str, **limits: Unpack[TaskLimitChanges]) -> Plan[dict[str, Any]]:
    check_name(task, "task name")
    concurrency_limit = limits.get("concurrency_limit", UNSET)
    key_limit = limits.get("key_limit", UNSET)
    if concurrency_limit is not UNSET:
        check_limit(concurrency_limit, "concurrency_limit")
    if key_limit is not UNSET:
        check_limit(key_limit, "key_limit")
    params = _changes({"concurrency_limit": concurrency_limit, "key_limit": key_limit})
    params.update(task=task, **_rate_changes(limits.get("rate_limit", UNSET)))
    params.update(_rate_changes(limits.get("key_rate_limit", UNSET), "key_"))
    row = yield from fetch_one("configure_task", params, row=class_row(TaskLimits))
    return row._asdict()


def list_queue_settings() -> Plan[list[dict[str, Any]]]:
    rows = yield from fetch_all("list_queue_settings", row=class_row(QueueSettings))
    return [row._asdict() for row in rows]


def list_task_limits() -> Plan[list[dict[str, Any]]]:
    rows = yield from fetch_all("list_task_limits", row=class_row(TaskLimits))
    return [row._asdict() for row in rows]


def list_breakers() -> Plan[list[dict[str, Any]]]:
    rows = yield from fetch_all("list_circuit_breakers", row=class_row(BreakerStatus))
    return [row._asdict() for row in rows]


#: Key buckets deleted per statement by :func:`prune_key_buckets`.
KEY_BUCKET_BATCH = 500


def prune_key_buckets(batch_size: int = KEY_BUCKET_BATCH) -> Plan[int]:
    """Delete per-key token buckets that are full again (a missing row is a full bucket), in
    batches, so keys that never come back leave nothing behind; returns how many. Run it on an
    autocommit connection (the workers' pruner does, every ``prune_interval``)."""
    deleted = 0
    while True:
        rows = yield Query("prune_key_buckets", {"batch_size": batch_size})
        deleted += int(rows[0][0])
        if rows[0][0] < batch_size:
            return deleted


def set_breaker(task: str, state: str, open_for: float | None = None) -> Plan[bool]:
    """Close (reset) or open (trip) a breaker by hand; False if the task has none."""
    if state not in ("closed", "open"):
        raise ConfigurationError(f"a breaker can be set 'closed' or 'open', not {state!r}")
    rows = yield Query(
        "set_circuit_breaker",
        {
            "task": check_name(task, "task name"),
            "state": state,
            "open_for": timedelta(seconds=open_for) if open_for is not None else None,
        },
    )
    return bool(rows)


def sync_task_declarations(
    known: list[str],
    limits: Mapping[str, DeclaredLimits],
    breakers: Mapping[str, CircuitBreaker],
) -> Plan[None]:
    """Write what the code declares for its tasks (limits, breakers); clear what a task no
    longer declares but an earlier deploy did (rows with from_code)."""
    names = sorted(limits)
    declared = [limits[n] for n in names]
    yield Query(
        "sync_task_limits",
        {
            "known": known,
            "tasks": names,
            "concurrency": [d.concurrency_limit for d in declared],
            "key_limits": [d.key_limit for d in declared],
            "rates": [r.rate if (r := d.rate_limit) else None for d in declared],
            "bursts": [r.bucket if (r := d.rate_limit) else None for d in declared],
            "key_rates": [r.rate if (r := d.key_rate_limit) else None for d in declared],
            "key_bursts": [r.bucket if (r := d.key_rate_limit) else None for d in declared],
        },
    )
    tasks = sorted(breakers)
    yield Query(
        "sync_circuit_breakers",
        {
            "known": known,
            "tasks": tasks,
            "thresholds": [breakers[t].failure_threshold for t in tasks],
            "min_calls": [breakers[t].min_calls for t in tasks],
            "windows": [breakers[t].window for t in tasks],
            "cooldowns": [breakers[t].cooldown for t in tasks],
        },
    )
