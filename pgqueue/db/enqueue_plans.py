"""Enqueue as plans: :func:`enqueue_one` and :func:`enqueue_many` write job specs
(:mod:`pgqueue.rules.job_specs`); the sync and async clients both drive them (see
:mod:`pgqueue.db.plan`). Jobs with ``depends_on`` go through the workflow plan. Every row and
column list comes from the job input's one declaration (:mod:`pgqueue.db.job_rows`).
"""

from __future__ import annotations

from collections.abc import Sequence
from datetime import datetime
from itertools import repeat
from typing import Any

from pgqueue.db.job_rows import (
    ID,
    KEY,
    all_now_unkeyed,
    all_plain_ready,
    copy_arrays,
    copy_row,
    copy_rows,
    due_at,
    input_arrays,
    input_params,
    input_row,
    ready_row,
    ready_rows,
    single_params,
)
from pgqueue.db.plan import CopyIn, Plan, Query
from pgqueue.errors import InvalidJobError, QueueFullError
from pgqueue.rules.job_specs import JobId, JobSpec

# JobId(value) for a created job, without the Python-level __new__ (bulk enqueue makes one per
# job; int.__new__ alone is several times cheaper).
_new_job_id = int.__new__

# Below this many jobs a multi-row INSERT beats setting up a COPY.
_COPY_THRESHOLD = 64


def enqueue_one(spec: JobSpec) -> Plan[JobId]:
    """One job: a plain ``INSERT`` for the common job, else ``pgqueue.enqueue_input`` (the SQL
    function holds the idempotency, concurrency-key and max_depth logic). Either writes the
    whole job (its ``result_ttl`` too) in one statement; a job with ``depends_on`` goes through
    the workflow plan, which needs a transaction (``spec.needs_transaction``).
    """
    if spec.depends_on:
        # The workflow plans load with the first job that has parents (not on a worker's or a
        # plain producer's start path).
        from pgqueue.db.workflow_plans import enqueue_dependents

        ids = yield from enqueue_dependents([spec])
        return ids[0]
    if spec.idempotency_key is None and spec.concurrency_key is None:
        # One statement and no function call: about 8% more single-job enqueues per second.
        inserted = yield Query("insert_job", single_params(spec))
        if inserted:
            return JobId(inserted[0][0])
        # A bounded or fair queue: enqueue_input checks its room and ranks the job.
    rows = yield Query(
        "enqueue_input",
        input_params(spec),
        guarded=True,  # a full queue raises PGQ01 (QueueFullError): keep the caller's transaction
    )
    job_id, created, replaced = rows[0]
    return JobId(job_id, created, replaced)


def enqueue_many(specs: Sequence[JobSpec]) -> Plan[list[JobId]]:
    """Many jobs in few statements: ids allocated up front, then COPY (or ``insert_jobs``).

    Jobs with an idempotency key go through ``pgqueue.insert_jobs`` (``ON CONFLICT DO
    NOTHING``); a key repeated inside the batch yields the first job's id for every repeat, and
    a key held by a live job or kept by a finished one (``unique_for``) yields that job's id.
    Jobs with a deduplication mode (``unique_among="pending"``, ``on_conflict``, ``throttle``)
    go through ``pgqueue.enqueue_input`` one by one, in input order, in one statement. Bounded
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
    if not fair_queues and len(specs) >= _COPY_THRESHOLD:
        # The common batch, alike jobs without keys: one COPY whose rows are made in C.
        if all_plain_ready(specs):
            yield CopyIn("copy_ready_jobs", ready_rows(specs, ids))
            return list(map(_new_job_id, repeat(JobId), ids))
        if all_now_unkeyed(specs):
            yield CopyIn("copy_jobs", copy_rows(specs, ids, db_now, "ready"))
            return list(map(_new_job_id, repeat(JobId), ids))
    result: list[JobId | None] = [None] * len(specs)
    pending: Sequence[JobSpec | None] = specs
    if fair_queues:
        pending = yield from _enqueue_fair(specs, ids, set(fair_queues), db_now, result)
    # Jobs without a key: (spec, id, run_at, state).
    plain: list[tuple[JobSpec, int, datetime, str]] = []
    keyed: list[tuple[int, tuple[Any, ...]]] = []
    first_for_key: dict[str, int] = {}
    repeats: list[tuple[int, str]] = []
    # Jobs with a deduplication mode: pgqueue.enqueue_input each, in input order.
    moded: list[tuple[int, tuple[Any, ...]]] = []
    # Jobs that are ready now and carry no key or option take the column defaults for run_at
    # (now(): the transaction's clock, the db_now read above), state and the rest: shorter rows.
    ready: list[tuple[Any, ...]] = []
    ready_specs: list[JobSpec] = []
    for index, (job, job_id) in enumerate(zip(pending, ids, strict=True)):
        # (One pass, spelled out: this loop runs once per job of a bulk enqueue.)
        if job is None:
            continue  # written with its rank (_enqueue_fair)
        spec = job
        row = ready_row(spec, job_id)
        if row is not None:
            ready.append(row)
            ready_specs.append(spec)
            result[index] = _new_job_id(JobId, job_id)
            continue
        if spec.run_at is None and not spec.delay:
            run_at, state = db_now, "ready"
        else:
            run_at = due_at(spec, db_now)
            state = "scheduled" if run_at > db_now else "ready"
        key = spec.idempotency_key
        if key is None:
            plain.append((spec, job_id, run_at, state))
            result[index] = _new_job_id(JobId, job_id)
        elif spec.has_mode:
            moded.append((index, input_row(spec, None, run_at, None)))
        elif key in first_for_key:
            repeats.append((index, key))
        else:
            first_for_key[key] = index
            keyed.append((index, input_row(spec, job_id, run_at, state)))
    if len(ready) >= _COPY_THRESHOLD:
        yield CopyIn("copy_ready_jobs", ready)
    else:
        plain.extend(
            (spec, row[0], db_now, "ready") for spec, row in zip(ready_specs, ready, strict=True)
        )
    if len(plain) >= _COPY_THRESHOLD:
        yield CopyIn("copy_jobs", [copy_row(*job) for job in plain])
    elif plain:
        yield Query("insert_plain_jobs", copy_arrays([copy_row(*job) for job in plain]))
    if keyed:
        yield from _insert_keyed(keyed, result)
    if moded:
        written = yield Query("enqueue_jobs_in_order", input_arrays([row for _, row in moded]))
        for (index, _), (job_id, created, replaced) in zip(moded, written, strict=True):
            result[index] = JobId(job_id, created, replaced)
    for index, key in repeats:
        first = result[first_for_key[key]]
        assert first is not None
        result[index] = JobId(first, False)
    return [job_id for job_id in result if job_id is not None]


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
            rows.append(copy_row(spec, ids[index], run_at, state, base + offset))
            result[index] = _new_job_id(JobId, ids[index])
            rest[index] = None
    yield CopyIn("copy_jobs", rows)
    return rest


def _insert_keyed(
    keyed: list[tuple[int, tuple[Any, ...]]], result: list[JobId | None]
) -> Plan[None]:
    """Keyed jobs: kept keys of finished jobs first, then insert, then the live holders."""
    kept_rows = yield Query("kept_idempotency_keys", {"keys": [row[KEY] for _, row in keyed]})
    kept: dict[str, int] = {key: job_id for key, job_id in kept_rows}
    fresh = [(index, row) for index, row in keyed if row[KEY] not in kept]
    created_ids: set[int] = set()
    if fresh:
        inserted = yield Query("insert_jobs", input_arrays([row for _, row in fresh]))
        created_ids = {row[0] for row in inserted}
    if created_ids:
        # A holder that finished (keeping its key) while we inserted: take our job back.
        raced = yield Query("drop_raced_keyed_jobs", {"ids": sorted(created_ids)})
        for job_id, key, holder in raced:
            created_ids.discard(job_id)
            kept[key] = holder
    missing = [
        str(row[KEY]) for _, row in keyed if row[ID] not in created_ids and row[KEY] not in kept
    ]
    existing: dict[str, int] = dict(kept)
    if missing:
        found = yield Query("jobs_by_idempotency_keys", {"keys": missing})
        existing.update({key: job_id for key, job_id in found})
    for index, row in keyed:
        if row[ID] in created_ids:
            result[index] = JobId(row[ID], True)
        elif row[KEY] in existing:
            result[index] = JobId(existing[row[KEY]], False)
        else:
            # The holder of the key finished between our two statements; rare enough that a
            # clear error beats a retry loop in a bulk path.
            raise InvalidJobError(
                f"idempotency key {row[KEY]!r} was released while enqueueing; retry"
            )
