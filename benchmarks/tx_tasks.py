"""Tasks of ``benchmarks.transactions``: one row per job, written two ways.

    pgq work benchmarks.tx_tasks:pgq

``*.plain``: through the worker process's own connection pool, committed before the handler
returns (the job is acked afterwards, in a batch: at least once). ``*.tx``: in the transaction
that completes the job (``ctx.transaction()``: exactly once).
"""

from __future__ import annotations

from benchmarks.drivers import jobs
from pgqueue import PgQueue, current_job

pgq = PgQueue()


@pgq.task(name="row.plain")
async def plain() -> None:
    await jobs.write_row_async()


@pgq.task(name="row.tx")
async def tx() -> None:
    async with current_job().transaction() as conn:
        await conn.execute(jobs.INSERT, ("tx",))


@pgq.task(name="row.sync_plain")
def sync_plain() -> None:
    jobs.write_row()


@pgq.task(name="row.sync_tx")
def sync_tx() -> None:
    with current_job().transaction() as conn:
        conn.execute(jobs.INSERT, ("sync tx",))
