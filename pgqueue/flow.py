"""Flow control settings: per-queue and per-task limits, rate limits, circuit breakers.

Every limit lives in PostgreSQL (``pgqueue.queues``, ``pgqueue.task_limits``,
``pgqueue.circuit_breakers``) and is enforced by the claim (``pgqueue.claim``), so it holds across
every worker. Task limits and breakers can be declared on the task (``@pgq.task(...)``; workers
write them at start-up) or set by operators (``pgq.flow.configure_task``, ``pgq task set``).
Queue settings are set by operators (``pgq.flow.configure_queue``, ``pgq queue set``).
"""

from __future__ import annotations

import math
import re
from collections.abc import Mapping
from dataclasses import dataclass
from datetime import datetime, timedelta
from typing import TYPE_CHECKING, Any, Final, NamedTuple, TypedDict

from psycopg.rows import class_row

from pgqueue.db.plan import Plan, Query, fetch_all, fetch_one
from pgqueue.errors import ConfigurationError
from pgqueue.payload import check_name

if TYPE_CHECKING:
    from typing import Unpack


class Unset:
    """The type of :data:`UNSET`."""

    def __repr__(self) -> str:
        return "UNSET"


UNSET: Final = Unset()
"""The default of ``configure_queue``/``configure_task`` settings: "leave this setting as it is"
(``None`` clears a setting)."""

_PERIODS = {"s": 1.0, "sec": 1.0, "second": 1.0, "m": 60.0, "min": 60.0, "minute": 60.0,
            "h": 3600.0, "hour": 3600.0}  # fmt: skip
_RATE = re.compile(r"^\s*(?P<count>\d+(?:\.\d+)?)\s*/\s*(?P<period>[a-z]+)\s*$")


@dataclass(frozen=True, slots=True)
class RateLimit:
    """A token bucket: ``rate`` jobs started per second on average, bursts of ``burst``.

    ``RateLimit.parse("20/s")`` (or ``"100/m"``, ``"5/h"``): the burst defaults to one period's
    worth (20, 100, 5).
    """

    rate: float
    burst: float | None = None

    def __post_init__(self) -> None:
        if not (isinstance(self.rate, int | float) and math.isfinite(self.rate) and self.rate > 0):
            raise ConfigurationError(f"a rate limit must be a positive number, got {self.rate!r}")
        if self.burst is not None and not (
            isinstance(self.burst, int | float) and math.isfinite(self.burst) and self.burst >= 1
        ):
            raise ConfigurationError(f"a rate limit's burst must be at least 1, got {self.burst!r}")

    @property
    def bucket(self) -> float:
        """The bucket size actually used (at least one token)."""
        return float(self.burst) if self.burst is not None else max(1.0, self.rate)

    @classmethod
    def parse(cls, value: str | float | RateLimit, burst: float | None = None) -> RateLimit:
        """A rate limit from ``"20/s"``, ``"100/m"``, ``"5/h"``, a number (per second) or a
        ``RateLimit``; ``burst`` overrides its bucket size. Raises
        :class:`~pgqueue.ConfigurationError` for anything else."""
        if isinstance(value, RateLimit):
            return value if burst is None else cls(value.rate, burst)
        if isinstance(value, int | float) and not isinstance(value, bool):
            return cls(float(value), burst)
        if isinstance(value, str):
            match = _RATE.match(value.lower())
            if match and match.group("period") in _PERIODS:
                count = float(match.group("count"))
                period = _PERIODS[match.group("period")]
                return cls(count / period, burst if burst is not None else max(1.0, count))
        raise ConfigurationError(
            f"invalid rate limit {value!r}: use e.g. '20/s', '100/m', '5/h' or a RateLimit"
        )

    def __str__(self) -> str:
        return f"{self.rate:g}/s (burst {self.bucket:g})"


@dataclass(frozen=True, slots=True)
class CircuitBreaker:
    """Stop claiming a task while it keeps failing.

    When at least ``min_calls`` attempts finished within the current ``window`` (seconds) and the
    share of failures reaches ``failure_threshold``, the breaker opens: workers leave the task's
    jobs waiting for ``cooldown`` seconds. Then one probe job runs (half-open): success closes
    the breaker, failure opens it for another cooldown.
    """

    failure_threshold: float = 0.5
    min_calls: int = 10
    window: float = 60.0
    cooldown: float = 30.0

    def __post_init__(self) -> None:
        if not 0 < self.failure_threshold <= 1:
            raise ConfigurationError(
                f"failure_threshold must be in (0, 1], got {self.failure_threshold!r}"
            )
        if not isinstance(self.min_calls, int) or self.min_calls < 1:
            raise ConfigurationError(f"min_calls must be at least 1, got {self.min_calls!r}")
        for name in ("window", "cooldown"):
            value = getattr(self, name)
            if not (isinstance(value, int | float) and math.isfinite(value) and value > 0):
                raise ConfigurationError(f"{name} must be a positive number of seconds")


def check_limit(value: object, what: str) -> int | None:
    if value is None:
        return None
    if not isinstance(value, int) or isinstance(value, bool) or value < 1:
        raise ConfigurationError(f"{what} must be a positive integer or None, got {value!r}")
    return value


# -- plans -----------------------------------------------------------------------------------


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


class QueueChanges(TypedDict, total=False):
    """A queue's flow-control settings, for ``pgq.flow.configure_queue``: a setting left out
    (or :data:`UNSET`) stays as it is, ``None`` clears it."""

    weight: int | Unset | None
    """Its fair share of a worker's slots against the other queues'."""
    max_depth: int | Unset | None
    """Refuse enqueues beyond this many waiting jobs (backpressure)."""
    concurrency_limit: int | Unset | None
    """Its jobs running at once, fleet-wide."""
    rate_limit: str | float | RateLimit | Unset | None
    """Its jobs started per second, fleet-wide (``"20/s"``)."""
    fair: bool | Unset | None
    """Serve its keys (jobs' ``concurrency_key``) round-robin instead of first come, first
    served (None: False)."""


class TaskLimitChanges(TypedDict, total=False):
    """A task's limits, for ``pgq.flow.configure_task``: a limit left out (or :data:`UNSET`)
    stays as it is, ``None`` clears it."""

    concurrency_limit: int | Unset | None
    """Its jobs running at once, fleet-wide."""
    key_limit: int | Unset | None
    """Its running jobs per key (``concurrency_key``) (None: no limit per key)."""
    rate_limit: str | float | RateLimit | Unset | None
    """Its jobs started per second, fleet-wide (``"20/s"``)."""
    key_rate_limit: str | float | RateLimit | Unset | None
    """Its jobs started per second per key, fleet-wide (``"10/s"``)."""


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


class DeclaredLimits(NamedTuple):
    """What a task's code declares (``key_limit`` None: no limit per key)."""

    concurrency_limit: int | None
    key_limit: int | None
    rate_limit: RateLimit | None
    key_rate_limit: RateLimit | None = None


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
