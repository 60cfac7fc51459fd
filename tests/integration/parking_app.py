"""Tasks for the durable sleep and wait tests, run by real ``pgq work`` processes:

    pgq work tests.integration.parking_app:pgq --queue parking --concurrency 1

Step functions write a row to ``ledger`` (committed at once, see ``durable_app.mark``), so a
test counts how many times each ran.
"""

from __future__ import annotations

from typing import Any

from pgqueue import EventTimeout, PgQueue, current_job
from tests.integration.durable_app import mark

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
