"""Tasks the benchmarks run: `pgq work benchmarks.bench_tasks:pgq`."""

from __future__ import annotations

import os
import time

import psycopg

from benchmarks.drivers.protocol import STATS
from pgqueue import PgQueue, current_job

pgq = PgQueue()
# One connection per worker process, opened by the first latency job.
_conns: list[psycopg.AsyncConnection[tuple[object, ...]]] = []


@pgq.task(name="bench.noop")
async def noop() -> None:
    return None


@pgq.task(name="bench.sync_noop")
def sync_noop() -> None:
    return None


# No-op handlers that note the first and last job they ran (benchmarks.drivers.protocol):
# drains timed from inside, so worker start-up and exit do not count.
@pgq.task(name="bench.counted")
async def counted() -> None:
    STATS.job()


@pgq.task(name="bench.sync_counted")
def sync_counted() -> None:
    STATS.job()


@pgq.task(name="bench.latency")
async def latency(sent: float) -> None:
    """Records how long after ``sent`` (the producer's clock, same machine) it started."""
    started = time.time()
    if not _conns:
        _conns.append(
            await psycopg.AsyncConnection.connect(os.environ["PGQUEUE_DSN"], autocommit=True)
        )
    await _conns[0].execute(
        "INSERT INTO bench_latency (job_id, delay) VALUES (%s, %s)",
        (current_job().id, started - sent),
    )
