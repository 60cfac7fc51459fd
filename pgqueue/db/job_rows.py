"""Job rows as the multi-row inserts take them: shared by the enqueue and the workflow plans."""

from __future__ import annotations

import json
from collections.abc import Iterable, Sequence
from datetime import datetime
from typing import Any

from pgqueue.rules.job_specs import JobSpec


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
#: Where a job row holds its id and its idempotency key (the ninth column, when keyed).
ID, KEY = JOB_COLUMNS.index("ids"), JOB_COLUMNS.index("keys")


def column_arrays(
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
