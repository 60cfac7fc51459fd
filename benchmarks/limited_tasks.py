"""Tasks the limited-task benchmark runs: `pgq work benchmarks.limited_tasks:pgq`.

Each writes 'start' and 'end' rows (database clock) to ``bench_limited`` on one connection per
process, so the benchmark measures how much of each limit was in use.
"""

from __future__ import annotations

import asyncio
import os

import psycopg

from pgqueue import PgQueue, RateLimit, current_job

pgq = PgQueue()
_conns: list[psycopg.AsyncConnection[tuple[object, ...]]] = []
_lock = asyncio.Lock()

EVENTS_DDL = """
CREATE TABLE IF NOT EXISTS bench_limited (
    job_id bigint, task text, event text, pid integer,
    at timestamptz NOT NULL DEFAULT clock_timestamp())
"""

CONCURRENCY_LIMIT = 3
KEY_LIMIT = 1
RATE = RateLimit(50, burst=5)


async def event(name: str) -> None:
    ctx = current_job()
    async with _lock:
        if not _conns:
            # The measuring must not slow down what it measures: no WAL flush per event row
            # (a commit waits ~4 ms for it here, longer than an ack or a claim takes).
            _conns.append(
                await psycopg.AsyncConnection.connect(
                    os.environ["PGQUEUE_DSN"], autocommit=True, options="-c synchronous_commit=off"
                )
            )
        await _conns[0].execute(
            "INSERT INTO bench_limited (job_id, task, event, pid) VALUES (%s, %s, %s, %s)",
            (ctx.id, ctx.task, name, os.getpid()),
        )


async def hold(seconds: float) -> None:
    await event("start")
    await asyncio.sleep(seconds)
    await event("end")


@pgq.task(name="limited.capped", concurrency_limit=CONCURRENCY_LIMIT)
async def capped(seconds: float = 0.2) -> None:
    await hold(seconds)


@pgq.task(name="limited.keyed", key_limit=KEY_LIMIT)
async def keyed(seconds: float = 0.2) -> None:
    await hold(seconds)


@pgq.task(name="limited.rated", rate_limit=RATE)
async def rated() -> None:
    await event("start")
