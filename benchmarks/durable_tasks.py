"""The workload of ``benchmarks.durable`` for a real worker:
``pgq work benchmarks.durable_tasks:pgq --burst`` (DSN from ``PGQUEUE_DSN``).

``bench.durable`` runs ``count`` ``ctx.step`` calls of a function that returns a small dict
(0: a job with no step), the workflow ``benchmarks.drivers.dbos_driver`` gives DBOS.
"""

from __future__ import annotations

from typing import Any

from pgqueue import PgQueue, current_job

QUEUE = "durable_bench"
TASK = "bench.durable"

pgq = PgQueue()


def compute(i: int) -> dict[str, Any]:
    return {"step": i, "ok": True}


@pgq.task(name=TASK, queue=QUEUE)
def stepped(count: int) -> None:
    ctx = current_job()
    for i in range(count):
        ctx.step(f"s{i}", compute, i)
