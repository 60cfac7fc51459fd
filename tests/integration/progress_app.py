"""Tasks that report progress, for real `pgq work` processes (tests/integration/test_progress.py):

pgq work tests.integration.progress_app:pgq [--pool process]
"""

from __future__ import annotations

import asyncio
import time
from typing import Any

from pgqueue import ConstantBackoff, PgQueue, current_job

pgq = PgQueue()


@pgq.task(name="progress.async_steps")
async def async_steps(steps: list[Any], hold: float) -> None:
    for step in steps:
        current_job().progress(step)
    await asyncio.sleep(hold)


@pgq.task(name="progress.sync_steps")
def sync_steps(steps: list[Any], hold: float) -> None:
    ctx = current_job()
    for step in steps:
        ctx.progress(step)
    ctx.wait_cancelled(hold)  # the test cancels the job once it has seen the progress


@pgq.task(name="progress.many")
def many(calls: int, hold: float) -> None:
    """Reports far more often than heartbeats go out."""
    ctx = current_job()
    for i in range(calls):
        ctx.progress({"done": i + 1, "of": calls})
    time.sleep(hold)


@pgq.task(name="progress.bad", max_attempts=1)
def bad(kind: str) -> None:
    values: dict[str, Any] = {"too_big": 2.0, "text": "half", "huge": {"x": "y" * 10_000}}
    current_job().progress(values[kind])


@pgq.task(name="progress.then_retry", max_attempts=2, backoff=ConstantBackoff(0.1))
def then_retry(hold: float) -> None:
    """Attempt 1 reports, then fails; attempt 2 reports nothing and holds."""
    ctx = current_job()
    if ctx.attempt == 1:
        ctx.progress(0.9)
        time.sleep(hold)
        raise RuntimeError("attempt 1 fails")
    time.sleep(hold)
