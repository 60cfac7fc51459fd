"""The statements of a group commit (:mod:`pgqueue.client.group_commit`): the single jobs of
several callers written together, each statement its own transaction on an autocommit
connection, each job getting back what a single enqueue (:func:`~pgqueue.db.enqueue_plans.
enqueue_one`) would have given it.

* jobs without keys: ``insert_job_group``, the single ``insert_job`` for many (None for a job
  whose queue is bounded or fair: it is left to ``enqueue_input``, alone);
* jobs with an idempotency or concurrency key (and deduplication modes): ``enqueue_jobs_in_order``,
  ``pgqueue.enqueue_input`` (what a single enqueue calls) for each, in order, so a key repeated
  in the group behaves as consecutive single enqueues do.
"""

from __future__ import annotations

from collections.abc import Sequence

from pgqueue.db.job_rows import input_arrays, input_row, plain_arrays
from pgqueue.db.plan import Plan, Query
from pgqueue.rules.job_specs import JobId, JobSpec


def groupable(spec: JobSpec) -> bool:
    """A job a group may write: one statement writes it alone too (a job with ``depends_on``
    needs the workflow plan's transaction)."""
    return not spec.depends_on


def group_writes(
    specs: Sequence[JobSpec],
) -> list[tuple[list[int], Plan[list[JobId | None]]]]:
    """The statements that write ``specs`` (every one :func:`groupable`): per statement, the
    places in ``specs`` of the jobs it writes and its plan (plain jobs first)."""
    plain = [
        n for n, s in enumerate(specs) if s.idempotency_key is None and s.concurrency_key is None
    ]
    keyed = [
        n
        for n, s in enumerate(specs)
        if s.idempotency_key is not None or s.concurrency_key is not None
    ]
    writes: list[tuple[list[int], Plan[list[JobId | None]]]] = []
    if plain:
        writes.append((plain, _plain([specs[n] for n in plain])))
    if keyed:
        writes.append((keyed, _keyed([specs[n] for n in keyed])))
    return writes


def _plain(specs: Sequence[JobSpec]) -> Plan[list[JobId | None]]:
    rows = yield Query("insert_job_group", plain_arrays(specs))
    return [None if job_id is None else JobId(job_id) for (job_id,) in rows]


def _keyed(specs: Sequence[JobSpec]) -> Plan[list[JobId | None]]:
    given = input_arrays([input_row(spec, None, spec.run_at, None) for spec in specs])
    rows = yield Query("enqueue_jobs_in_order", given)
    return [JobId(job_id, created, replaced) for job_id, created, replaced in rows]
