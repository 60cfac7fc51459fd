"""Tasks the batch benchmark runs: `pgq work benchmarks.batch_tasks:pgq`.

The same work two ways: each job adds one row to an application table (``bench_rows``), through
a pool of connections of the process's own. ``one_row`` is an ordinary task (one ``INSERT`` per
job); ``many_rows`` a batch task (one ``COPY`` per batch). The rows' ``at`` is the database's
clock when they were written: the benchmark's throughput is rows over the time from the first
row to the last.
"""

from __future__ import annotations

import os
import threading
from typing import TypedDict

from psycopg_pool import ConnectionPool

from pgqueue import Item, PgQueue, current_job

pgq = PgQueue()

ROWS_DDL = """
CREATE TABLE IF NOT EXISTS bench_rows (
    job_id bigint NOT NULL, n integer NOT NULL,
    at timestamptz NOT NULL DEFAULT clock_timestamp())
"""

#: The batch task's size; `python -m benchmarks.batches --batch-size` sets it for the workers.
BATCH_SIZE = int(os.environ.get("BENCH_BATCH_SIZE", "100"))

_pools: list[ConnectionPool] = []
_lock = threading.Lock()


def pool() -> ConnectionPool:
    """The process's pool (as many connections as the worker has slots)."""
    with _lock:
        if not _pools:
            size = int(os.environ.get("BENCH_POOL_SIZE", "10"))
            _pools.append(
                ConnectionPool(
                    os.environ["PGQUEUE_DSN"],
                    min_size=size,
                    max_size=size,
                    kwargs={"autocommit": True},
                    open=True,
                )
            )
        return _pools[0]


class Row(TypedDict):
    n: int


@pgq.task(name="bench.one_row")
def one_row(n: int) -> None:
    with pool().connection() as conn:
        conn.execute("INSERT INTO bench_rows (job_id, n) VALUES (%s, %s)", (current_job().id, n))


@pgq.task(name="bench.many_rows", batch_size=BATCH_SIZE, batch_wait=0.5)
def many_rows(items: list[Item[Row]]) -> None:
    with (
        pool().connection() as conn,
        conn.cursor().copy("COPY bench_rows (job_id, n) FROM STDIN") as copy,
    ):
        for item in items:
            copy.write_row((item.id, item.args["n"]))
