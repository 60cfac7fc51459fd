"""Tasks the fairness benchmark runs: `pgq work benchmarks.fairness_tasks:pgq`.

``fairness.work`` is a no-op whose key is its tenant (``limit_by``); the probe tenant's job
writes when it was enqueued and claimed (the database clock).
``fairness.plain`` is the same job without a key (the plain claim's figures).
"""

from __future__ import annotations

import os

import psycopg

from pgqueue import PgQueue, current_job

pgq = PgQueue()

QUEUE = "tenants"
PROBE = "tenant-b"
EVENTS_DDL = """
CREATE TABLE IF NOT EXISTS bench_fairness (
    job_id bigint, created_at timestamptz, started_at timestamptz)
"""


@pgq.task(name="fairness.work", queue=QUEUE, limit_by="tenant")
async def work(tenant: str) -> None:
    if tenant != PROBE:
        return
    async with await psycopg.AsyncConnection.connect(
        os.environ["PGQUEUE_DSN"], autocommit=True
    ) as conn:
        # started_at: when the claim took it (the claim's clock).
        await conn.execute(
            "INSERT INTO bench_fairness (job_id, created_at, started_at)"
            " SELECT j.id, j.created_at, j.started_at FROM pgqueue.jobs AS j WHERE j.id = %s",
            (current_job().id,),
        )


@pgq.task(name="fairness.plain", queue=QUEUE)
async def plain(tenant: str) -> None:
    """The same no-op without a key."""
