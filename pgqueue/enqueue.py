"""Enqueue: option validation, job specs, and the plans that write them.

Everything here is pure (no I/O): :func:`make_spec` validates a call and resolves defaults into a
:class:`JobSpec`; :func:`enqueue_one` and :func:`enqueue_many` are plans (see
:mod:`pgqueue.db.plan`) that the sync and async clients both drive.
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from datetime import datetime, timedelta
from typing import Any

from pgqueue.db.plan import CopyIn, Plan, Query
from pgqueue.errors import InvalidJobError
from pgqueue.payload import check_name, check_unicode, dumps

#: Keyword arguments of ``enqueue`` that are options, not task arguments.
OPTION_NAMES = frozenset(
    {"queue", "priority", "run_at", "delay", "max_attempts", "idempotency_key"}
)
_SMALLINT = (-32768, 32767)
_MAX_KEY_LENGTH = 1000
# Below this many jobs a multi-row INSERT beats setting up a COPY.
_COPY_THRESHOLD = 64


class JobId(int):
    """A job id (an ``int``) that also tells whether this call created the job.

    ``created`` is False when an idempotency key matched a live job and its id was returned.
    """

    created: bool

    def __new__(cls, value: int, created: bool = True) -> JobId:
        self = super().__new__(cls, value)
        self.created = created
        return self

    def __repr__(self) -> str:
        return f"JobId({int(self)}, created={self.created})"

    __str__ = int.__repr__  # str(job_id) == "42", as for any int


@dataclass(frozen=True, slots=True)
class JobSpec:
    """A fully validated job, ready to be written."""

    task: str
    args_json: str
    queue: str
    priority: int
    max_attempts: int
    run_at: datetime | None = None
    delay: timedelta | None = None
    idempotency_key: str | None = None


def check_options(options: Mapping[str, Any]) -> dict[str, Any]:
    """Validate option values (not defaults); raise :class:`InvalidJobError` naming the problem."""
    unknown = sorted(set(options) - OPTION_NAMES)
    if unknown:
        raise InvalidJobError(
            f"unknown enqueue option(s): {', '.join(unknown)} "
            f"(known: {', '.join(sorted(OPTION_NAMES))})"
        )
    checked = dict(options)
    if options.get("queue") is not None:
        check_name(options["queue"], "queue name")
    if options.get("priority") is not None:
        checked["priority"] = _check_int(options["priority"], "priority", *_SMALLINT)
    if options.get("max_attempts") is not None:
        checked["max_attempts"] = _check_int(options["max_attempts"], "max_attempts", 1, 1_000_000)
    if options.get("run_at") is not None and options.get("delay") is not None:
        raise InvalidJobError("pass either run_at or delay, not both")
    if options.get("run_at") is not None:
        run_at = options["run_at"]
        if not isinstance(run_at, datetime):
            raise InvalidJobError(f"run_at must be a datetime, got {type(run_at).__name__}")
        if run_at.tzinfo is None or run_at.utcoffset() is None:
            raise InvalidJobError(
                "run_at must be timezone-aware (naive datetimes are ambiguous); "
                "use datetime.now(timezone.utc) + ... or pass delay="
            )
    if options.get("delay") is not None:
        checked["delay"] = to_timedelta(options["delay"], "delay")
    key = options.get("idempotency_key")
    if key is not None and (
        not isinstance(key, str) or not key or len(key) > _MAX_KEY_LENGTH or "\x00" in key
    ):
        raise InvalidJobError(
            f"idempotency_key must be a non-empty string of at most {_MAX_KEY_LENGTH} "
            f"characters without NUL, got {key!r:.80}"
        )
    if key is not None:
        check_unicode(key, "idempotency_key")
    return checked


def to_timedelta(value: object, what: str) -> timedelta:
    """Seconds (int/float) or a timedelta, non-negative and finite."""
    if isinstance(value, timedelta):
        delta = value
    elif isinstance(value, int | float) and not isinstance(value, bool):
        if not math.isfinite(value):
            raise InvalidJobError(f"{what} must be finite, got {value!r}")
        delta = timedelta(seconds=value)
    else:
        raise InvalidJobError(f"{what} must be seconds or a timedelta, got {type(value).__name__}")
    if delta < timedelta(0):
        raise InvalidJobError(f"{what} must not be negative, got {value!r}")
    return delta


def _check_int(value: object, what: str, low: int, high: int) -> int:
    if not isinstance(value, int) or isinstance(value, bool):
        raise InvalidJobError(f"{what} must be an integer, got {type(value).__name__}")
    if not low <= value <= high:
        raise InvalidJobError(f"{what} must be between {low} and {high}, got {value}")
    return value


def make_spec(
    task: str,
    args: Mapping[str, Any],
    options: Mapping[str, Any],
    *,
    defaults: Mapping[str, Any],
    payload_limit: int,
) -> JobSpec:
    """Validate one job and apply the task's defaults to the options the call left out."""
    check_name(task, "task name")
    if not isinstance(args, Mapping):
        raise InvalidJobError(f"args must be a JSON object (a mapping), got {type(args).__name__}")
    given = {name: value for name, value in check_options(options).items() if value is not None}
    merged = {**check_options(defaults), **given}
    return JobSpec(
        task=task,
        args_json=dumps(dict(args), limit=payload_limit),
        queue=check_name(merged.get("queue", "default"), "queue name"),
        priority=merged.get("priority", 0),
        max_attempts=merged.get("max_attempts", 5),
        run_at=merged.get("run_at"),
        delay=merged.get("delay"),
        idempotency_key=merged.get("idempotency_key"),
    )


def enqueue_one(spec: JobSpec) -> Plan[JobId]:
    """One job through ``pgqueue.enqueue_job`` (the SQL function holds the idempotency logic)."""
    rows = yield Query(
        "enqueue_job",
        {
            "task": spec.task,
            "args": spec.args_json,
            "queue": spec.queue,
            "priority": spec.priority,
            "run_at": spec.run_at,
            "delay": spec.delay,
            "max_attempts": spec.max_attempts,
            "idempotency_key": spec.idempotency_key,
        },
    )
    job_id, created = rows[0]
    return JobId(job_id, created)


def enqueue_many(specs: Sequence[JobSpec]) -> Plan[list[JobId]]:
    """Many jobs in few statements: ids allocated up front, then COPY (or one multi-row INSERT).

    Jobs with an idempotency key go through a multi-row ``INSERT ... ON CONFLICT DO NOTHING``;
    a key repeated inside the batch yields the first job's id for every repeat. Run the plan in
    a transaction: the jobs appear together or not at all.
    """
    if not specs:
        return []
    rows = yield Query("allocate_job_ids", {"count": len(specs)})
    db_now, ids = rows[0]
    result: list[JobId | None] = [None] * len(specs)
    plain: list[tuple[Any, ...]] = []
    keyed: list[tuple[int, tuple[Any, ...]]] = []
    first_for_key: dict[str, int] = {}
    repeats: list[tuple[int, str]] = []
    for index, (spec, job_id) in enumerate(zip(specs, ids, strict=True)):
        run_at = spec.run_at or (db_now + spec.delay if spec.delay else db_now)
        state = "scheduled" if run_at > db_now else "ready"
        row = (
            job_id,
            spec.queue,
            spec.task,
            spec.args_json,
            spec.priority,
            run_at,
            state,
            spec.max_attempts,
            spec.idempotency_key,
        )
        key = spec.idempotency_key
        if key is None:
            plain.append(row)
            result[index] = JobId(job_id, True)
        elif key in first_for_key:
            repeats.append((index, key))
        else:
            first_for_key[key] = index
            keyed.append((index, row))
    if plain:
        if len(plain) >= _COPY_THRESHOLD:
            yield CopyIn("copy_jobs", plain)
        else:
            yield Query("insert_jobs", _columns(plain))
    if keyed:
        inserted = yield Query("insert_jobs_keyed", _columns([row for _, row in keyed]))
        created_ids = {row[0] for row in inserted}
        missing: list[str] = []
        for index, row in keyed:
            if row[0] in created_ids:
                result[index] = JobId(row[0], True)
            else:
                missing.append(str(row[8]))
        existing: dict[str, int] = {}
        if missing:
            found = yield Query("jobs_by_idempotency_keys", {"keys": missing})
            existing = {key: job_id for key, job_id in found}
        for index, row in keyed:
            if result[index] is None:
                if row[8] not in existing:
                    # The holder of the key finished between our two statements; rare enough
                    # that a clear error beats a retry loop in a bulk path.
                    raise InvalidJobError(
                        f"idempotency key {row[8]!r} was released while enqueueing; retry"
                    )
                result[index] = JobId(existing[row[8]], False)
    for index, key in repeats:
        first = result[first_for_key[key]]
        assert first is not None
        result[index] = JobId(first, False)
    return [job_id for job_id in result if job_id is not None]


def _columns(rows: Iterable[tuple[Any, ...]]) -> dict[str, list[Any]]:
    names = (
        "ids",
        "queues",
        "tasks",
        "args",
        "priorities",
        "run_ats",
        "states",
        "max_attempts",
        "keys",
    )
    columns: dict[str, list[Any]] = {name: [] for name in names}
    for row in rows:
        for name, value in zip(names, row, strict=True):
            columns[name].append(value)
    return columns
