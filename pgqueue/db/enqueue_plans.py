"""Enqueue: option validation, job specs, and the plans that write them.

Everything here is pure (no I/O): :func:`make_spec` validates a call and resolves defaults into a
:class:`JobSpec`; :func:`enqueue_one` and :func:`enqueue_many` are plans (see
:mod:`pgqueue.db.plan`) that the sync and async clients both drive.
"""

from __future__ import annotations

import json
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from datetime import datetime, timedelta
from typing import Any

from pgqueue.db.plan import CopyIn, Plan, Query
from pgqueue.dedupe import derived_key
from pgqueue.errors import InvalidJobError, QueueFullError
from pgqueue.options import (
    DEFAULTS,
    MAX_META_BYTES,
    OPTION_NAMES,
    check_int,
    check_options,
    merge_meta,
    merge_tags,
)
from pgqueue.payload import check_name, dumps

# Below this many jobs a multi-row INSERT beats setting up a COPY.
_COPY_THRESHOLD = 64


class JobId(int):
    """A job id (an ``int``) that also tells what this call did.

    ``created`` is False when an idempotency key matched an existing job and its id was
    returned; ``replaced`` is True when that job had not started and this call replaced its
    arguments (``on_conflict="replace"`` or ``"replace_args"``).
    """

    # Class defaults: bulk enqueue makes one JobId per job, and most were created, so only
    # the exceptions carry an attribute of their own.
    created: bool = True
    replaced: bool = False

    def __new__(cls, value: int, created: bool = True, replaced: bool = False) -> JobId:
        self = super().__new__(cls, value)
        if not created:
            self.created = False
        if replaced:
            self.replaced = True
        return self

    def __repr__(self) -> str:
        replaced = ", replaced=True" if self.replaced else ""
        return f"JobId({int(self)}, created={self.created}{replaced})"

    __str__ = int.__repr__  # str(job_id) == "42", as for any int


# JobId(value) for a created job, without the Python-level __new__ (bulk enqueue makes one per
# job; int.__new__ alone is several times cheaper).
_new_job_id = int.__new__


@dataclass(slots=True)
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
    concurrency_key: str | None = None
    #: keep the idempotency key this long after the job finished in one of unique_states
    unique_for: timedelta | None = None
    unique_states: tuple[str, ...] | None = None
    #: seconds to wait for room in a full queue (max_depth) before raising QueueFullError
    wait_if_full: float | None = None
    #: Keep the return value this long (None: the ack is a plain DELETE; see pgq.result()).
    result_ttl: timedelta | None = None
    #: Ids of jobs that must succeed first (the job waits until they have).
    depends_on: tuple[int, ...] = ()
    #: The job's metadata as JSON text (a JSON object), None when it has none.
    meta_json: str | None = None
    #: The job's tags, None when it has none.
    tags: tuple[str, ...] | None = None
    #: Derive idempotency_key from the task and its arguments (True: all; or these names).
    unique_by: bool | tuple[str, ...] = False
    #: Until when the job holds its key: "live" (it finishes) or "pending" (it starts).
    unique_among: str = "live"
    #: What enqueueing the key again does to a holder not yet running: keep, replace, ...
    on_conflict: str = "keep"
    #: At most one job per key per period.
    throttle: timedelta | None = None

    def with_args_json(self, args_json: str, idempotency_key: str | None = None) -> JobSpec:
        """A copy with other arguments (and the key derived from them, if any). Bulk enqueue
        makes one per job: spelled out, because ``dataclasses.replace`` costs several times
        as much."""
        return JobSpec(
            self.task, args_json, self.queue, self.priority, self.max_attempts, self.run_at,
            self.delay, idempotency_key or self.idempotency_key, self.concurrency_key,
            self.unique_for, self.unique_states, self.wait_if_full, self.result_ttl,
            self.depends_on, self.meta_json, self.tags, self.unique_by, self.unique_among,
            self.on_conflict, self.throttle,
        )  # fmt: skip

    def with_meta_json(self, meta_json: str | None) -> JobSpec:
        """A copy with other metadata (JSON text of an object)."""
        spec = self.with_args_json(self.args_json)
        spec.meta_json = meta_json
        return spec

    @property
    def tag_list(self) -> list[str] | None:
        """The tags as a list (what psycopg writes as ``text[]``), or None."""
        return list(self.tags) if self.tags is not None else None

    @property
    def has_mode(self) -> bool:
        """A deduplication mode other than the default (held while live, keep the holder)."""
        return self.unique_among != "live" or self.on_conflict != "keep" or bool(self.throttle)

    @property
    def needs_transaction(self) -> bool:
        """Writing this job takes more than one statement, so they must share a transaction."""
        return self.result_ttl is not None or bool(self.depends_on)


#: The most rows one listing returns (the CLI's --limit takes the same range).
MAX_ROWS = 1_000_000


def check_limit(value: object, what: str = "limit") -> int:
    """A row count for a listing: 1 to :data:`MAX_ROWS` (a negative LIMIT is a database error,
    and a huge one a way to read a whole table by accident)."""
    return check_int(value, what, 1, MAX_ROWS)


def make_spec(
    task: str,
    args: Mapping[str, Any],
    options: Mapping[str, Any],
    *,
    defaults: Mapping[str, Any],
    payload_limit: int,
) -> JobSpec:
    """Validate one job and apply the task's defaults to the options the call left out."""
    return with_args(spec_template(task, options, defaults=defaults), args, payload_limit)


def with_args(template: JobSpec, args: Mapping[str, Any], payload_limit: int) -> JobSpec:
    """The job of ``template`` (validated task and options) with these arguments."""
    if not isinstance(args, Mapping):
        raise InvalidJobError(f"args must be a JSON object (a mapping), got {type(args).__name__}")
    plain = args if type(args) is dict else dict(args)
    args_json = dumps(plain, limit=payload_limit)
    unique_by = template.unique_by
    if unique_by and template.idempotency_key is None:
        names = unique_by if isinstance(unique_by, tuple) else None
        return template.with_args_json(args_json, derived_key(template.task, plain, names))
    return template.with_args_json(args_json)


def spec_template(task: str, options: Mapping[str, Any], *, defaults: Mapping[str, Any]) -> JobSpec:
    """Validate a task name and options once, for every job that shares them (bulk enqueue
    validates each distinct (task, options) pair once, not once per job)."""
    check_name(task, "task name")
    given = {name: value for name, value in check_options(options).items() if value is not None}
    task_defaults = check_options(defaults)
    merged = {**DEFAULTS, **{k: v for k, v in task_defaults.items() if v is not None}, **given}
    _check_dedupe(given, merged)
    # Every option is a field of the job: its value, the task's, or the default.
    fields: dict[str, Any] = {name: merged.get(name) for name in OPTION_NAMES}
    wait = fields["wait_if_full"]
    fields["wait_if_full"] = wait.total_seconds() if wait is not None else None
    fields["depends_on"] = given.get("depends_on", ())  # a task's jobs depend on nothing
    # Metadata and tags add up: the call's keys over the task's, the call's tags after its.
    meta = merge_meta(task_defaults.get("meta"), given.get("meta"))
    del fields["meta"]
    fields["meta_json"] = None if meta is None else dumps(meta, limit=MAX_META_BYTES, what="meta")
    fields["tags"] = merge_tags(task_defaults.get("tags"), given.get("tags"))
    fields["unique_by"] = fields["unique_by"] or False
    fields["unique_among"] = fields["unique_among"] or "live"
    fields["on_conflict"] = fields["on_conflict"] or "keep"
    return JobSpec(task=task, args_json="{}", **fields)


#: The options that say anything about a job's key (unset, none of them costs a check).
_KEY_OPTIONS = frozenset(
    ("idempotency_key", "unique_by", "unique_among", "on_conflict", "throttle", "unique_for",
     "unique_states")
)  # fmt: skip


def _check_dedupe(given: Mapping[str, Any], merged: dict[str, Any]) -> None:
    """The key options together (see :mod:`pgqueue.dedupe`); ``merged`` (the options set,
    nothing None) loses a task's ``unique_by`` when the call gives its own key."""
    if _KEY_OPTIONS.isdisjoint(merged):
        return
    if given.get("idempotency_key") is not None:
        if given.get("unique_by"):
            raise InvalidJobError("pass either idempotency_key or unique_by, not both")
        merged["unique_by"] = False
    keyed = merged.get("idempotency_key") is not None or bool(merged.get("unique_by"))
    if not keyed:
        if merged.get("unique_for") or merged.get("unique_states"):
            raise InvalidJobError(
                "unique_for and unique_states need an idempotency_key (or unique_by)"
            )
        modes = [
            name
            for name, default in (("unique_among", "live"), ("on_conflict", "keep"))
            if merged.get(name) not in (None, default)
        ] + (["throttle"] if merged.get("throttle") else [])
        if modes:
            raise InvalidJobError(
                f"{' and '.join(modes)} need{'s' if len(modes) == 1 else ''} a key: "
                "pass idempotency_key=... or unique_by=True (or the argument names)"
            )
    if merged.get("unique_states") and not merged.get("unique_for"):
        raise InvalidJobError("unique_states needs unique_for (how long to keep the key)")
    if merged.get("unique_among") == "pending" and (
        merged.get("unique_for") or merged.get("throttle")
    ):
        raise InvalidJobError(
            'unique_among="pending" releases the key when the job starts; unique_for and '
            "throttle keep it after the job finished: choose one"
        )
    if merged.get("throttle") and (merged.get("unique_for") or merged.get("unique_states")):
        raise InvalidJobError(
            "throttle keeps the key for the rest of its period whatever the job's end: "
            "leave out unique_for and unique_states"
        )


def enqueue_one(spec: JobSpec) -> Plan[JobId]:
    """One job: a plain ``INSERT`` for the common job, else ``pgqueue.enqueue_job`` (the SQL
    function holds the idempotency, concurrency-key and max_depth logic).

    A job that keeps its result may take a second statement and one with ``depends_on`` goes
    through the workflow plan: both need one transaction (``spec.needs_transaction``).
    """
    if spec.depends_on:
        from pgqueue.db.workflow_plans import enqueue_dependents

        ids = yield from enqueue_dependents([spec])
        return ids[0]
    job = {
        "task": spec.task,
        "args": spec.args_json,
        "queue": spec.queue,
        "priority": spec.priority,
        "run_at": spec.run_at,
        "delay": spec.delay,
        "max_attempts": spec.max_attempts,
        "meta": spec.meta_json,
        "tags": spec.tag_list,
    }
    if spec.idempotency_key is None and spec.concurrency_key is None:
        # One statement and no function call: about 8% more single-job enqueues per second.
        inserted = yield Query("insert_job", {**job, "result_ttl": spec.result_ttl})
        if inserted:
            return JobId(inserted[0][0])
        # A bounded queue: enqueue_job checks its room.
    rows = yield Query(
        "enqueue_job",
        {
            **job,
            "idempotency_key": spec.idempotency_key,
            "concurrency_key": spec.concurrency_key,
            "unique_for": spec.unique_for,
            "unique_states": list(spec.unique_states) if spec.unique_states else None,
            "unique_among": spec.unique_among,
            "on_conflict": spec.on_conflict,
            "throttle": spec.throttle,
        },
        guarded=True,  # a full queue raises PGQ01 (QueueFullError): keep the caller's transaction
    )
    job_id, created, replaced = rows[0]
    if created and spec.result_ttl is not None:
        yield Query("set_result_ttl", {"ids": [job_id], "ttls": [spec.result_ttl]})
    return JobId(job_id, created, replaced)


def enqueue_many(specs: Sequence[JobSpec]) -> Plan[list[JobId]]:
    """Many jobs in few statements: ids allocated up front, then COPY (or one multi-row INSERT).

    Jobs with an idempotency key go through a multi-row ``INSERT ... ON CONFLICT DO NOTHING``;
    a key repeated inside the batch yields the first job's id for every repeat, and a key held
    by a live job or kept by a finished one (``unique_for``) yields that job's id. Jobs with a
    deduplication mode (``unique_among="pending"``, ``on_conflict``, ``throttle``) go through
    ``pgqueue.enqueue_job`` one by one, in input order, in one statement. Bounded
    queues (``max_depth``) are checked first: the whole batch is refused if it would overflow
    one. Jobs of fair queues (without an idempotency key) are written with their ranks, by a
    COPY of their own. Run the plan in a transaction: the jobs appear together or not at all.
    """
    if not specs:
        return []
    if any(spec.depends_on for spec in specs):
        from pgqueue.db.workflow_plans import enqueue_dependents

        return (yield from enqueue_dependents(specs))
    per_queue: dict[str, int] = {}
    for spec in specs:
        per_queue[spec.queue] = per_queue.get(spec.queue, 0) + 1
    rows = yield Query(
        "prepare_bulk",
        {"count": len(specs), "queues": list(per_queue), "counts": list(per_queue.values())},
    )
    db_now, ids, full_queues, max_depths, depths, fair_queues = rows[0]
    if full_queues:
        queue = full_queues[0]
        raise QueueFullError(queue, max_depths[0], depths[0], per_queue[queue])
    keyed_tasks = sorted({spec.task for spec in specs if spec.concurrency_key is not None})
    if keyed_tasks:
        yield Query("mark_keyed_tasks", {"tasks": keyed_tasks})
    result: list[JobId | None] = [None] * len(specs)
    pending: Sequence[JobSpec | None] = specs
    if fair_queues:
        pending = yield from _enqueue_fair(specs, ids, set(fair_queues), db_now, result)
    plain: list[tuple[Any, ...]] = []
    keyed: list[tuple[int, tuple[Any, ...]]] = []
    first_for_key: dict[str, int] = {}
    repeats: list[tuple[int, str]] = []
    # Jobs with a deduplication mode: pgqueue.enqueue_job each, in input order.
    moded: list[tuple[int, JobSpec, datetime]] = []
    # Jobs that are ready now and carry no key take the column defaults for run_at (now(): the
    # transaction's clock, the db_now read above), state and the keys: shorter rows to send.
    ready: list[tuple[Any, ...]] = []
    for index, (job, job_id) in enumerate(zip(pending, ids, strict=True)):
        # (One pass, spelled out: this loop runs once per job of a bulk enqueue.)
        if job is None:
            continue  # written with its rank (_enqueue_fair)
        spec = job
        key = spec.idempotency_key
        now = spec.run_at is None and not spec.delay
        if (
            now
            and key is None
            and spec.concurrency_key is None
            and spec.meta_json is None
            and spec.tags is None
        ):
            ready.append(
                (job_id, spec.queue, spec.task, spec.args_json, spec.priority, spec.max_attempts)
            )
            result[index] = _new_job_id(JobId, job_id)
            continue
        if now:
            run_at, state = db_now, "ready"
        else:
            run_at = due_at(spec, db_now)
            state = "scheduled" if run_at > db_now else "ready"
        row = (job_id, spec.queue, spec.task, spec.args_json, spec.priority, run_at, state,
               spec.max_attempts, key, spec.concurrency_key)  # fmt: skip
        if key is None:
            plain.append((*row, spec.meta_json, spec.tags))
            result[index] = _new_job_id(JobId, job_id)
        elif spec.has_mode:
            moded.append((index, spec, run_at))
        elif key in first_for_key:
            repeats.append((index, key))
        else:
            first_for_key[key] = index
            unique = ",".join(spec.unique_states) if spec.unique_states else None
            keyed.append((index, (*row, spec.unique_for, unique, spec.meta_json, spec.tags)))
    if len(ready) >= _COPY_THRESHOLD:
        yield CopyIn("copy_ready_jobs", ready)
    else:
        plain.extend(
            (i, q, t, a, p, db_now, "ready", m, None, None, None, None)
            for i, q, t, a, p, m in ready
        )
    if plain:
        if len(plain) >= _COPY_THRESHOLD:
            yield CopyIn("copy_jobs", [(*r[:11], _tag_array(r[11])) for r in plain])
        else:
            yield Query("insert_jobs", _columns(plain, _PLAIN_COLUMNS))
    if keyed:
        yield from _insert_keyed(keyed, result)
    if moded:
        written = yield Query("enqueue_jobs_in_order", _moded_columns(moded))
        for (index, _, _), (job_id, created, replaced) in zip(moded, written, strict=True):
            result[index] = JobId(job_id, created, replaced)
    for index, key in repeats:
        first = result[first_for_key[key]]
        assert first is not None
        result[index] = JobId(first, False)
    ids_out = [job_id for job_id in result if job_id is not None]
    kept = [
        (job_id, spec.result_ttl)
        for job_id, spec in zip(ids_out, specs, strict=True)
        if spec.result_ttl is not None and job_id.created
    ]
    if kept:
        yield Query("set_result_ttl", {"ids": [i for i, _ in kept], "ttls": [t for _, t in kept]})
    return ids_out


def _enqueue_fair(
    specs: Sequence[JobSpec],
    ids: Sequence[int],
    fair_queues: set[str],
    db_now: datetime,
    result: list[JobId | None],
) -> Plan[list[JobSpec | None]]:
    """Write the batch's jobs of fair queues with their ranks: the jobs of one (queue,
    priority, key) take consecutive ranks from where that key stands (``fair_ranks_of``).
    Jobs with an idempotency key are left to ``insert_keyed_jobs``, which ranks them itself.
    Returns the specs with the written ones replaced by None."""
    rest: list[JobSpec | None] = list(specs)
    groups: dict[tuple[str, int, str | None], list[int]] = {}
    for index, spec in enumerate(specs):
        if spec.queue in fair_queues and spec.idempotency_key is None:
            groups.setdefault((spec.queue, spec.priority, spec.concurrency_key), []).append(index)
    if not groups:
        return rest
    keys = list(groups)
    bases = yield Query(
        "fair_ranks_of",
        {
            "queues": [queue for queue, _, _ in keys],
            "priorities": [priority for _, priority, _ in keys],
            "keys": [key for _, _, key in keys],
        },
    )
    rows: list[tuple[Any, ...]] = []
    for (base,), members in zip(bases, groups.values(), strict=True):
        for offset, index in enumerate(members):
            spec = specs[index]
            run_at = due_at(spec, db_now)
            state = "scheduled" if run_at > db_now else "ready"
            rows.append(
                (ids[index], spec.queue, spec.task, spec.args_json, spec.priority, run_at, state,
                 spec.max_attempts, None, spec.concurrency_key, base + offset, spec.meta_json,
                 _tag_array(spec.tags))
            )  # fmt: skip
            result[index] = _new_job_id(JobId, ids[index])
            rest[index] = None
    yield CopyIn("copy_fair_jobs", rows)
    return rest


def due_at(spec: JobSpec, db_now: datetime) -> datetime:
    """When the job may run, by the database clock read for the batch."""
    return spec.run_at or (db_now + spec.delay if spec.delay else db_now)


def job_row(job_id: int, spec: JobSpec, run_at: datetime, state: str, last: Any) -> tuple[Any, ...]:
    """The first nine columns of a job row (``last``: the idempotency key, or the result TTL)."""
    return (
        job_id,
        spec.queue,
        spec.task,
        spec.args_json,
        spec.priority,
        run_at,
        state,
        spec.max_attempts,
        last,
    )


def _insert_keyed(
    keyed: list[tuple[int, tuple[Any, ...]]], result: list[JobId | None]
) -> Plan[None]:
    """Keyed jobs: kept keys of finished jobs first, then insert, then the live holders."""
    kept_rows = yield Query("kept_idempotency_keys", {"keys": [row[8] for _, row in keyed]})
    kept: dict[str, int] = {key: job_id for key, job_id in kept_rows}
    fresh = [(index, row) for index, row in keyed if row[8] not in kept]
    created_ids: set[int] = set()
    if fresh:
        inserted = yield Query("insert_jobs_keyed", _columns([row for _, row in fresh], _KEYED))
        created_ids = {row[0] for row in inserted}
    if created_ids:
        # A holder that finished (keeping its key) while we inserted: take our job back.
        raced = yield Query("drop_raced_keyed_jobs", {"ids": sorted(created_ids)})
        for job_id, key, holder in raced:
            created_ids.discard(job_id)
            kept[key] = holder
    missing = [str(row[8]) for _, row in keyed if row[0] not in created_ids and row[8] not in kept]
    existing: dict[str, int] = dict(kept)
    if missing:
        found = yield Query("jobs_by_idempotency_keys", {"keys": missing})
        existing.update({key: job_id for key, job_id in found})
    for index, row in keyed:
        if row[0] in created_ids:
            result[index] = JobId(row[0], True)
        elif row[8] in existing:
            result[index] = JobId(existing[row[8]], False)
        else:
            # The holder of the key finished between our two statements; rare enough that a
            # clear error beats a retry loop in a bulk path.
            raise InvalidJobError(
                f"idempotency key {row[8]!r} was released while enqueueing; retry"
            )


def _moded_columns(moded: Sequence[tuple[int, JobSpec, datetime]]) -> dict[str, list[Any]]:
    """The parameters of enqueue_jobs_in_order: one array per enqueue_job argument."""
    specs = [spec for _, spec, _ in moded]
    return {
        "tasks": [s.task for s in specs],
        "args": [s.args_json for s in specs],
        "queues": [s.queue for s in specs],
        "priorities": [s.priority for s in specs],
        "run_ats": [run_at for _, _, run_at in moded],
        "max_attempts": [s.max_attempts for s in specs],
        "keys": [s.idempotency_key for s in specs],
        "concurrency_keys": [s.concurrency_key for s in specs],
        "unique_fors": [s.unique_for for s in specs],
        "unique_states": [",".join(s.unique_states) if s.unique_states else None for s in specs],
        "metas": [s.meta_json for s in specs],
        "tag_lists": [None if s.tags is None else json.dumps(s.tags) for s in specs],
        "unique_among": [s.unique_among for s in specs],
        "on_conflict": [s.on_conflict for s in specs],
        "throttles": [s.throttle for s in specs],
    }


#: The parameters of insert_jobs / insert_jobs_keyed, in row order (rows may stop early).
JOB_COLUMNS = (
    "ids",
    "queues",
    "tasks",
    "args",
    "priorities",
    "run_ats",
    "states",
    "max_attempts",
    "keys",
    "concurrency_keys",
    "unique_fors",
    "unique_states",
)


#: The parameters of insert_jobs: the first ten job columns, then metadata and tags.
_PLAIN_COLUMNS = (*JOB_COLUMNS[:10], "metas", "tag_lists")
#: The parameters of insert_jobs_keyed.
_KEYED = (*JOB_COLUMNS, "metas", "tag_lists")


def _columns(
    rows: Iterable[tuple[Any, ...]], names: Sequence[str] = JOB_COLUMNS
) -> dict[str, list[Any]]:
    """Rows to one array per column (the ``unnest`` parameters of the multi-row inserts).
    Tags (a column named ``tag_lists``) travel as JSON arrays: unnest would flatten an array
    of arrays."""
    columns: dict[str, list[Any]] = {name: [] for name in names}
    width = 0
    for row in rows:
        width = len(row)
        for name, value in zip(names, row, strict=False):
            columns[name].append(value)
    if "tag_lists" in columns:
        columns["tag_lists"] = [None if t is None else json.dumps(t) for t in columns["tag_lists"]]
    return {name: values for name, values in list(columns.items())[:width]}


def _tag_array(tags: tuple[str, ...] | None) -> list[str] | None:
    """Tags as COPY writes them (a list becomes a ``text[]``)."""
    return None if tags is None else list(tags)
