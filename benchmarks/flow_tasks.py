"""Tasks the flow-control benchmark runs: `pgq work benchmarks.flow_tasks:pgq`.

Each writes an event row (database clock) to ``bench_events`` on one connection per process.
"""

from __future__ import annotations

import asyncio
import os

import psycopg

from pgqueue import CircuitBreaker, PgQueue, RateLimit, current_job

pgq = PgQueue()
_conns: list[psycopg.AsyncConnection[tuple[object, ...]]] = []
_lock = asyncio.Lock()

EVENTS_DDL = """
CREATE TABLE IF NOT EXISTS bench_events (
    job_id bigint, task text, event text, note text, pid integer,
    at timestamptz NOT NULL DEFAULT clock_timestamp())
"""


async def event(name: str, note: str | None = None) -> None:
    ctx = current_job()
    async with _lock:
        if not _conns:
            _conns.append(
                await psycopg.AsyncConnection.connect(os.environ["PGQUEUE_DSN"], autocommit=True)
            )
        await _conns[0].execute(
            "INSERT INTO bench_events (job_id, task, event, note, pid) VALUES (%s, %s, %s, %s, %s)",
            (ctx.id, ctx.task, name, note, os.getpid()),
        )


@pgq.task(name="flow.capped", concurrency_limit=3)
async def capped(seconds: float = 0.05) -> None:
    await event("start")
    await asyncio.sleep(seconds)


@pgq.task(name="flow.keyed")
async def keyed(seconds: float = 0.05) -> None:
    await event("start", current_job().queue)
    await asyncio.sleep(seconds)


@pgq.task(name="flow.rated", rate_limit=RateLimit(20, burst=40))
async def rated() -> None:
    await event("start")


@pgq.task(name="flow.hold")
async def hold(seconds: float = 0.02) -> None:
    await event("start", current_job().queue)
    await asyncio.sleep(seconds)


@pgq.task(name="flow.delayed")
async def delayed() -> None:
    await event("start", current_job().run_at.isoformat())


@pgq.task(name="flow.tick")
async def tick(schedule: str) -> None:
    await event("start", f"{schedule}|{current_job().run_at.isoformat()}")


@pgq.task(
    name="flow.fragile",
    max_attempts=1,
    circuit_breaker=CircuitBreaker(failure_threshold=0.5, min_calls=5, window=60, cooldown=2),
)
async def fragile() -> None:
    """Always fails: the breaker trips, then probes every cooldown."""
    await event("start")
    raise ConnectionError("dependency down")
