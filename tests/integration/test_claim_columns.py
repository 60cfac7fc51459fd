"""The claims' rows as PostgreSQL returns them: every column ClaimedJob reads, by name, and in
its order, so the worker's store decodes them by name at no cost per row (rows in another order
are in tests/unit/worker/test_claim_rows.py)."""

from __future__ import annotations

import asyncio
import uuid
from datetime import timedelta
from typing import Any

import pytest

from pgqueue.db.queries import query
from pgqueue.handler.job_context import CLAIMED_COLUMNS, ClaimedJob
from pgqueue.worker.store import FLOW_CLAIM_COLUMNS, WorkerDB

PARAMS: dict[str, Any] = {
    **{"queues": ["emails"], "tasks": ["send"], "limit": 5, "worker_id": str(uuid.uuid4())},
    **{"lease": timedelta(seconds=30), "running": [0]},
    **{"after_priority": [None], "after_run_at": [None], "after_id": [None]},
}


@pytest.mark.parametrize(
    ("name", "columns"), [("claim_jobs", CLAIMED_COLUMNS), ("claim_flow", FLOW_CLAIM_COLUMNS)]
)
def test_a_claim_names_its_columns_in_the_order_a_claimed_job_reads_them(
    dsn, pgq, conn, name, columns
):
    pgq.enqueue("send", {"to": "a"}, queue="emails", meta={"k": 1}, tags=["t"])
    with conn.transaction(force_rollback=True):
        cur = conn.execute(query(name), PARAMS)
        assert tuple(column.name for column in cur.description or ()) == columns

    async def claimed() -> list[tuple[Any, ...]]:
        db = WorkerDB(dsn, size=1)
        await db.open()
        try:
            return await db.fetch(name, PARAMS)
        finally:
            await db.close()

    (row,) = [row for row in asyncio.run(claimed()) if row[0] is not None]
    job = ClaimedJob.from_row(row)
    assert (job.queue, job.task, job.args, job.attempt, job.lease_token) == (
        "emails",
        "send",
        {"to": "a"},
        1,
        1,
    )
    assert (job.meta, job.tags, job.wants_result) == ({"k": 1}, ["t"], False)
