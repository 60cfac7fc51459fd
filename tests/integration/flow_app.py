"""Tasks for the flow-control tests, importable by real `pgq work` processes:

    pgq work tests.integration.flow_app:pgq

Handlers write to the effects ledger (see worker_app): 'start' and 'end' rows with the
database clock, so tests can measure overlaps, rates and order exactly.
"""

from __future__ import annotations

import asyncio
import os

import psycopg

from pgqueue import CircuitBreaker, PgQueue, RateLimit, current_job
from tests.integration.worker_app import arecord, record

pgq = PgQueue()


async def _hold(seconds: float) -> None:
    await arecord("start", current_job().queue)
    await asyncio.sleep(seconds)
    await arecord("end", current_job().queue)


@pgq.task(name="capped", concurrency_limit=3)
async def capped(seconds: float = 0.2) -> None:
    """At most three of these run at once, fleet-wide."""
    await _hold(seconds)


@pgq.task(name="hold")
async def hold(seconds: float = 0.0) -> None:
    """No limits of its own (queue limits, keys, fairness, autoscaling)."""
    await _hold(seconds)


@pgq.task(name="per_key", key_limit=2)
async def per_key(seconds: float = 0.2) -> None:
    await _hold(seconds)


@pgq.task(name="rated", rate_limit=RateLimit(10, burst=5))
async def rated() -> None:
    """Ten starts per second on average, bursts of five."""
    await arecord("start")


def _fixed() -> bool:
    with psycopg.connect(os.environ["PGQUEUE_DSN"]) as conn:
        row = conn.execute("SELECT count(*) FROM ledger WHERE event = 'fixed'").fetchone()
    return bool(row and row[0])


@pgq.task(
    name="fragile",
    max_attempts=1,
    circuit_breaker=CircuitBreaker(failure_threshold=0.5, min_calls=3, window=60, cooldown=1.5),
)
def fragile() -> None:
    """Fails until an operator 'fixes' its dependency (a ledger row 'fixed')."""
    record("start")
    if not _fixed():
        raise ConnectionError("dependency is down")
    record("end")


_ERRORS: dict[str, type[Exception]] = {
    "connection": ConnectionError,
    "permission": PermissionError,
    "value": ValueError,
}


@pgq.task(
    name="picky",
    max_attempts=4,
    retry_on=(OSError,),
    no_retry_on=(PermissionError,),
    backoff=lambda attempt, error: 0.05 * attempt,
)
def picky(error: str) -> None:
    """Retries OSErrors except PermissionError; anything else is final."""
    record("start", note=error)
    raise _ERRORS[error](f"{error} failure")


@pgq.task(name="welcome_email", on="user.signed_up")
def welcome_email(user_id: int, plan: str = "free") -> None:
    record("end", note=f"welcome:{user_id}:{plan}")


@pgq.task(name="crm_sync", on=("user.signed_up", "user.upgraded"))
async def crm_sync(user_id: int, plan: str = "free") -> None:
    await arecord("end", f"crm:{user_id}:{plan}")


@pgq.task(name="one_per_key", key_limit=1)
async def one_per_key(seconds: float = 0.2) -> None:
    """One running job per concurrency key."""
    await _hold(seconds)
