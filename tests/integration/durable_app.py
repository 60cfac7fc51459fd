"""Tasks for the durable-step tests, run by real ``pgq work`` processes:

    pgq work tests.integration.durable_app:pgq --queue durable

Every step function writes a row to ``ledger`` (on a connection of its own, committed at once),
so a test counts exactly how many times each step's function ran, whatever became of the job.
A transactional step's effect is a row of ``durable_effects`` written on the step's connection.
"""

from __future__ import annotations

import os
import time
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any

import psycopg

from pgqueue import ConstantBackoff, PgQueue, StepRetry, current_job

pgq = PgQueue()
QUICK = ConstantBackoff(0.05)

EFFECTS_DDL = """
CREATE TABLE IF NOT EXISTS public.durable_effects (
    id      bigserial PRIMARY KEY,
    job_id  bigint NOT NULL,
    attempt integer NOT NULL,
    note    text
)
"""


def _dsn() -> str:
    return os.environ["PGQUEUE_DSN"]


def mark(event: str, note: str | None = None) -> None:
    ctx = current_job()
    with psycopg.connect(_dsn(), autocommit=True) as conn:
        conn.execute(
            "INSERT INTO ledger (job_id, attempt, pid, worker, event, note)"
            " VALUES (%s, %s, %s, %s, %s, %s)",
            (ctx.id, ctx.attempt, os.getpid(), ctx.worker_id, event, note),
        )


@dataclass
class Receipt:
    number: int
    at: datetime


def charge(amount: int) -> Receipt:
    mark("charge")
    return Receipt(amount * 10, datetime(2026, 12, 6, 9, 30, tzinfo=UTC))


def reserve(receipt: Receipt) -> str:
    assert isinstance(receipt, Receipt), receipt  # typed on the first run and on replays
    mark("reserve", str(receipt.number))
    return f"r-{receipt.number}"


def ship(reservation: str) -> str:
    mark("ship", reservation)
    return f"shipped {reservation}"


@pgq.task(queue="durable", max_attempts=3, backoff=QUICK, result_ttl=3600)
def order(amount: int) -> str:
    """Three steps; the first attempt fails after the second step."""
    ctx = current_job()
    receipt = ctx.step("charge", charge, amount)
    reservation = ctx.step("reserve", reserve, receipt)
    if ctx.attempt == 1:
        raise RuntimeError("the warehouse API timed out")
    return ctx.step("ship", ship, reservation)


async def ship_async(reservation: str) -> str:
    mark("ship", reservation)
    return f"shipped {reservation}"


@pgq.task(queue="durable", max_attempts=3, backoff=QUICK, result_ttl=3600)
async def order_async(amount: int) -> str:
    """``order`` in an async handler: sync and async step functions."""
    ctx = current_job()
    receipt = await ctx.step_async("charge", charge, amount)
    reservation = await ctx.step_async("reserve", reserve, receipt)
    if ctx.attempt == 1:
        raise RuntimeError("the warehouse API timed out")
    result: str = await ctx.step_async("ship", ship_async, reservation)
    return result


def _effect(conn: psycopg.Connection[Any], note: str) -> int:
    ctx = current_job()
    row = conn.execute(
        "INSERT INTO durable_effects (job_id, attempt, note) VALUES (%s, %s, %s) RETURNING id",
        (ctx.id, ctx.attempt, note),
    ).fetchone()
    assert row is not None
    return int(row[0])


@pgq.task(queue="durable", max_attempts=4, backoff=QUICK, result_ttl=3600)
def transfer(fail_inside: bool) -> None:
    """A transactional step; the first attempt's step fails after writing (rolled back) when
    ``fail_inside``, and every first attempt fails after the step committed."""
    ctx = current_job()

    def book(conn: psycopg.Connection[Any]) -> int:
        effect = _effect(conn, "booked")
        if fail_inside and ctx.attempt == 1:
            raise RuntimeError("failed after writing, inside the step")
        return effect

    ctx.step("book", book, transaction=True)
    if ctx.attempt <= 2:
        raise RuntimeError("failed after the step committed")


@pgq.task(queue="durable", max_attempts=4, backoff=QUICK, result_ttl=3600)
async def transfer_async(fail_inside: bool) -> None:
    """``transfer`` in an async handler: the step gets an async connection."""
    ctx = current_job()

    async def book(conn: psycopg.AsyncConnection[Any]) -> int:
        cur = await conn.execute(
            "INSERT INTO durable_effects (job_id, attempt, note) VALUES (%s, %s, 'booked')"
            " RETURNING id",
            (ctx.id, ctx.attempt),
        )
        row = await cur.fetchone()
        if fail_inside and ctx.attempt == 1:
            raise RuntimeError("failed after writing, inside the step")
        assert row is not None
        return int(row[0])

    await ctx.step_async("book", book, transaction=True)
    if ctx.attempt <= 2:
        raise RuntimeError("failed after the step committed")


@pgq.task(queue="durable", max_attempts=1)
def duplicate() -> None:
    ctx = current_job()
    ctx.step("fetch", mark, "fetch")
    ctx.step("fetch", mark, "fetch")


@pgq.task(queue="durable", max_attempts=2, backoff=QUICK)
def drifting() -> None:
    """The second run calls another step where the first recorded 'reserve'."""
    ctx = current_job()
    ctx.step("charge", mark, "charge")
    if ctx.attempt == 1:
        ctx.step("reserve", mark, "reserve")
        raise RuntimeError("first attempt fails after two steps")
    ctx.step("refund", mark, "refund")


@pgq.task(queue="durable", max_attempts=2, backoff=QUICK, result_ttl=3600)
def pages(count: int) -> list[int]:
    """A step in a loop (repeat=True), and a flaky step retried in place."""
    ctx = current_job()
    got = [ctx.step("page", _page, i, repeat=True) for i in range(count)]
    ctx.step("flaky", _flaky, retry=StepRetry(attempts=3, policy=pgq_retry()))
    if ctx.attempt == 1:
        raise RuntimeError("fail once after the loop")
    return got


def _page(i: int) -> int:
    mark("page", str(i))
    return i * i


def _flaky() -> str:
    mark("flaky")
    ctx = current_job()
    with psycopg.connect(_dsn(), autocommit=True) as conn:
        row = conn.execute(
            "SELECT count(*) FROM ledger WHERE job_id = %s AND event = 'flaky'", (ctx.id,)
        ).fetchone()
    if row is not None and row[0] < 3:
        raise ConnectionError("flaky API")
    return "ok"


def pgq_retry() -> Any:
    from pgqueue import RetryPolicy

    return RetryPolicy(backoff=ConstantBackoff(0.01))


def _held() -> bool:
    ctx = current_job()
    with psycopg.connect(_dsn(), autocommit=True) as conn:
        row = conn.execute(
            "SELECT state = 'running' AND lease_token = %s FROM pgqueue.jobs WHERE id = %s",
            (ctx.job.lease_token, ctx.id),
        ).fetchone()
    return bool(row and row[0])


def _until_taken() -> int:
    """Runs until the test took the job away (the first attempt), then returns its attempt."""
    ctx = current_job()
    mark("slow", str(ctx.attempt))
    if ctx.attempt == 1:
        deadline = time.monotonic() + 30
        while _held() and time.monotonic() < deadline:
            time.sleep(0.05)
    return ctx.attempt


@pgq.task(queue="durable", max_attempts=3, backoff=QUICK, result_ttl=3600)
def slow_step() -> int:
    """A step whose first attempt's lease is lost while it runs."""
    ctx = current_job()
    try:
        result: int = ctx.step("slow", _until_taken)
    except Exception as exc:
        mark("step_raised", type(exc).__name__)
        raise
    return result
