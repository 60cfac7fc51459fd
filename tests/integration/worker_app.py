"""Tasks for worker tests, importable by real `pgq work` processes:

    pgq work tests.integration.worker_app:pgq

Every handler writes what it does to ``ledger`` (the effects ledger) on its own connection, so
tests can count executions exactly, whatever happened to the worker.
"""

from __future__ import annotations

import asyncio
import os
import threading
import time

import psycopg
from psycopg_pool import ConnectionPool

from pgqueue import ConstantBackoff, Fail, JobContext, PgQueue, Retry, current_job

pgq = PgQueue()

_pools: dict[str, ConnectionPool] = {}
_lock = threading.Lock()


def _pool() -> ConnectionPool:
    dsn = os.environ["PGQUEUE_DSN"]
    with _lock:
        pool = _pools.get(dsn)
        if pool is None:
            pool = ConnectionPool(
                dsn, min_size=1, max_size=8, open=False, kwargs={"autocommit": True}
            )
            pool.open()
            _pools[dsn] = pool
    return pool


def close_ledger() -> None:
    with _lock:
        for pool in _pools.values():
            pool.close()
        _pools.clear()


def record(event: str, ctx: JobContext | None = None, note: str | None = None) -> None:
    ctx = ctx or current_job()
    with _pool().connection() as conn:
        conn.execute(
            "INSERT INTO ledger (job_id, attempt, pid, worker, event, note)"
            " VALUES (%s, %s, %s, %s, %s, %s)",
            (ctx.id, ctx.attempt, os.getpid(), ctx.worker_id, event, note),
        )


async def arecord(event: str, note: str | None = None) -> None:
    ctx = current_job()
    await asyncio.to_thread(record, event, ctx, note)


@pgq.task(name="noop")
async def noop(n: int = 0) -> None:
    await arecord("end")


@pgq.task(name="instant")
async def instant() -> None:
    """Never suspends: on Python 3.12+ its job task (eager) is done inside its own start."""


@pgq.task(name="sync_noop")
def sync_noop(n: int = 0) -> None:
    record("end")


@pgq.task(name="blocks_the_loop")
async def blocks_the_loop(seconds: float) -> None:
    """A careless async handler: it blocks the whole event loop while it sleeps."""
    await arecord("start")
    time.sleep(seconds)  # noqa: ASYNC251 - that is the point
    await arecord("end")


@pgq.task(name="async_sleep")
async def async_sleep(seconds: float) -> None:
    await arecord("start")
    try:
        await asyncio.sleep(seconds)
    except asyncio.CancelledError:
        await arecord("cancelled", current_job().cancel_reason)
        raise
    await arecord("end")


@pgq.task(name="sync_sleep")
def sync_sleep(seconds: float, cooperative: bool = True) -> None:
    """Sleeps; a cooperative one stops as soon as the job is cancelled."""
    ctx = current_job()
    record("start")
    if cooperative:
        if ctx.wait_cancelled(seconds):
            record("cancelled", note=ctx.cancel_reason)
            ctx.raise_if_cancelled()
    else:
        time.sleep(seconds)
    record("end")


@pgq.task(name="flaky", max_attempts=5, backoff=ConstantBackoff(0.1))
def flaky(fail_times: int) -> None:
    record("start")
    if current_job().attempt <= fail_times:
        raise RuntimeError(f"flaky failure on attempt {current_job().attempt}")
    record("end")


@pgq.task(name="always_fails", max_attempts=3, backoff=ConstantBackoff(0.05))
def always_fails() -> None:
    record("start")
    raise ValueError("this job is broken")


@pgq.task(name="fails_for_good", max_attempts=5)
def fails_for_good() -> None:
    record("start")
    raise Fail("bad input: cannot be retried")


@pgq.task(name="retry_once", max_attempts=1)
def retry_once() -> None:
    record("start")
    with psycopg.connect(os.environ["PGQUEUE_DSN"]) as conn:
        seen = conn.execute(
            "SELECT count(*) FROM ledger WHERE job_id = %s", (current_job().id,)
        ).fetchone()
    if seen and seen[0] == 1:
        raise Retry(delay=0.1, reason="not ready yet")
    record("end")


@pgq.task(name="async_timeout", timeout=0.3, max_attempts=1)
async def async_timeout() -> None:
    await arecord("start")
    try:
        await asyncio.sleep(30)
    except asyncio.CancelledError:
        await arecord("cancelled", current_job().cancel_reason)
        raise


@pgq.task(name="sync_timeout", timeout=0.3, max_attempts=1)
def sync_timeout() -> None:
    record("start")
    time.sleep(1.5)
    record("end")


@pgq.task(name="crash", max_attempts=2)
def crash() -> None:
    """A poison pill: kills its worker process every time."""
    record("start")
    with psycopg.connect(os.environ["PGQUEUE_DSN"]) as conn:
        fixed = conn.execute("SELECT count(*) FROM ledger WHERE event = 'fixed'").fetchone()
    if not fixed or not fixed[0]:
        os._exit(1)
    record("end")


@pgq.task(name="with_context", pass_context=True)
def with_context(ctx: JobContext, label: str) -> None:
    record("end", ctx, note=f"{label}:{ctx.task}:{ctx.queue}:{ctx.attempt}/{ctx.max_attempts}")


@pgq.task(name="broken_until_fixed", max_attempts=1)
def broken_until_fixed() -> None:
    """Fails until an operator 'fixes' it (a ledger row with event 'fixed')."""
    record("start")
    with psycopg.connect(os.environ["PGQUEUE_DSN"]) as conn:
        fixed = conn.execute("SELECT count(*) FROM ledger WHERE event = 'fixed'").fetchone()
    if not fixed or not fixed[0]:
        raise RuntimeError("dependency is down")
    record("end")


@pgq.task(name="sync_square")
def sync_square(n: int) -> int:
    """Returns its own job's number squared (checked against ``current_job()``'s args)."""
    assert current_job().args == {"n": n}
    return n * n


#: Holds sync_stuck until a test sets it (in-process workers only).
STUCK_GATE = threading.Event()


@pgq.task(name="sync_stuck", timeout=0.3, max_attempts=1)
def sync_stuck() -> None:
    """Runs past its timeout until released: its thread is abandoned."""
    record("start")
    STUCK_GATE.wait(60)
    record("end")
