"""Tasks for the durable sleep and wait tests, run by real ``pgq work`` processes:

    pgq work tests.integration.parking_app:pgq --queue parking --concurrency 1

Step functions write a row to ``ledger`` (committed at once, see ``durable_app.mark``), so a
test counts how many times each ran.
"""

from __future__ import annotations

import time
from typing import Any

import psycopg

from pgqueue import EventTimeout, PgQueue, current_job
from tests.integration.durable_app import _dsn, mark

pgq = PgQueue()


def _mark(event: str) -> str:
    mark(event)
    return event


@pgq.task(queue="parking", max_attempts=3, result_ttl=3600)
def three_steps(pause: float) -> int:
    """Step 1, a durable sleep, steps 2 and 3; returns the attempt that finished."""
    ctx = current_job()
    ctx.step("one", _mark, "one")
    ctx.sleep(pause)
    ctx.step("two", _mark, "two")
    ctx.step("three", _mark, "three")
    return ctx.attempt


@pgq.task(queue="parking", max_attempts=3, result_ttl=3600)
async def three_steps_async(pause: float) -> int:
    """``three_steps`` in an async handler."""
    ctx = current_job()
    await ctx.step_async("one", _mark, "one")
    await ctx.sleep_async(pause)
    await ctx.step_async("two", _mark, "two")
    await ctx.step_async("three", _mark, "three")
    return ctx.attempt


@pgq.task(queue="parking", max_attempts=1, result_ttl=3600)
def quick() -> str:
    mark("quick")
    return "quick"


@pgq.task(queue="parking", max_attempts=3, result_ttl=3600)
async def waiter(event: str, timeout: float | None = None) -> Any:
    """Waits for ``event``; returns its payload, or ``"timed out"``."""
    ctx = current_job()
    await ctx.step_async("before", _mark, "before")
    try:
        payload = await ctx.wait_for_event_async(event, timeout=timeout)
    except EventTimeout:
        mark("timeout")
        return "timed out"
    mark("woken")
    return payload


def _gate() -> None:
    """Mark ``gated``, then wait (a minute at most) until the test marks ``open`` for this job."""
    ctx = current_job()
    mark("gated")
    deadline = time.monotonic() + 60
    with psycopg.connect(_dsn(), autocommit=True) as conn:
        while time.monotonic() < deadline:
            opened = conn.execute(
                "SELECT 1 FROM ledger WHERE job_id = %s AND event = 'open'", (ctx.id,)
            ).fetchone()
            if opened:
                return
            time.sleep(0.05)


@pgq.task(queue="parking", max_attempts=1, result_ttl=3600)
def gated_sleep() -> None:
    """Sleeps for an hour once the test opens its gate (see ``_gate``)."""
    _gate()
    current_job().sleep(3600)
    mark("after")


@pgq.task(queue="parking", max_attempts=1, result_ttl=3600)
def gated_wait() -> None:
    """Waits for an event never emitted once the test opens its gate (see ``_gate``)."""
    _gate()
    current_job().wait_for_event("never-emitted-gated")
    mark("after")


@pgq.task(queue="parking", max_attempts=1, result_ttl=3600)
def follow(value: int) -> str:
    """A chain's next job after a durable one: gets its result."""
    mark("follow")
    return f"followed {value}"
