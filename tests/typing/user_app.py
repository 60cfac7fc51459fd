"""A user's module, written as docs/guide/enqueueing.md shows, that ``mypy --strict`` and pyright
must accept.

Never imported or run: tests/unit/test_typing.py type-checks it as a separate program would
(pgqueue found as an installed package, so its ``py.typed`` marker is what makes it typed).
"""

from __future__ import annotations

import asyncio
from collections.abc import Coroutine
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from typing import Any, TypedDict

import psycopg
from sqlalchemy import create_engine, text
from sqlalchemy.ext.asyncio import AsyncSession, create_async_engine
from sqlalchemy.orm import Session

import pgqueue
from pgqueue import (
    ExponentialBackoff,
    Fail,
    Item,
    JobContext,
    JobId,
    PgQueue,
    RateLimit,
    Retry,
    chain,
    current_job,
    group,
)

pgq = PgQueue("postgresql://app@localhost/app")
engine = create_engine("postgresql+psycopg://app@localhost/app")
async_engine = create_async_engine("postgresql+psycopg://app@localhost/app")


@pgq.task
def add(a: int, b: int) -> int:
    return a + b


@pgq.task(queue="emails", max_attempts=5, priority=0)
def send_email(to: str, subject: str = "Welcome") -> None:
    ctx = current_job()
    if ctx.attempt > 3:
        raise Fail("giving up")


@pgq.task(
    timeout=30,
    max_attempts=8,
    backoff=ExponentialBackoff(base=2, cap=600),
    rate_limit=RateLimit.parse("20/s"),
)
def sync_inventory(sku: str) -> None:
    if not sku:
        raise Retry(delay=60)


@pgq.task(limit_by="account.id", key_limit=2, key_rate_limit="10/s")
def sync_account(account: dict[str, int]) -> None: ...


@pgq.task(result_ttl=3600)
async def resize(image_id: int, width: int = 100) -> dict[str, int]:
    await asyncio.sleep(0)
    return {"image_id": image_id, "width": width}


@pgq.task(pass_context=True)
def audited(ctx: JobContext, action: str) -> str:
    return f"{ctx.task}:{action}"


@pgq.periodic("*/5 * * * *", queue="maintenance")
def cleanup() -> None: ...


def signup(dsn: str, email: str) -> JobId:
    # Untyped enqueue: options and the task's arguments share the keywords.
    send_email.enqueue(email, delay=timedelta(minutes=5))
    with psycopg.connect(dsn) as conn:
        conn.execute("INSERT INTO users (email) VALUES (%s)", [email])
        # Typed enqueue: the options first, then exactly the task's own arguments.
        job_id: JobId = send_email.options(conn=conn, priority=-1).enqueue(email, subject="Hi")
        send_email.options(meta={"tenant": "acme"}, tags=["welcome"]).enqueue(email)
    if not job_id.created:
        raise RuntimeError("an idempotency key matched")
    return job_id


def totals(numbers: list[int]) -> int:
    direct: int = add(1, 2)  # calling the task runs the function here
    job = add.options(queue="math", run_at=datetime.now(UTC)).enqueue(1, b=2)
    ids: list[JobId] = pgq.enqueue_many([add.s(n, n) for n in numbers])
    by_name = pgq.enqueue("billing.charge", {"order": 7}, queue="billing")
    debounced = add.options(unique_by=("a",), unique_among="pending", on_conflict="replace")
    if debounced.enqueue(1, 2).replaced:
        pgq.enqueue("billing.charge", {"order": 7}, idempotency_key="o:7", throttle=60)
    pgq.flow.configure_queue("billing", fair=True)
    sync_account.enqueue({"id": 7})
    result = pgq.result(job, timeout=30)
    return direct + int(result) + len(ids) + int(by_name)


async def thumbnails(aconn: psycopg.AsyncConnection[tuple[object, ...]]) -> list[int]:
    first = await resize.options(conn=aconn, result_ttl=600).enqueue_async(1, width=50)
    second = await resize.enqueue_async(2, conn=aconn)
    info = await pgq.result_async(first, timeout=30)
    return [int(info["width"]), second]


def pipeline(ids: list[int]) -> object:
    run = chain(add.s(1, 2), add.s(b=3)).enqueue()
    both = group(add.s(i, i) for i in ids).enqueue()
    audited.options(queue="audit").enqueue(action="export")
    return (run.result(timeout=60), both.id, pgqueue.__version__)


class Order(TypedDict):
    order_id: int
    total: float


@pgq.task(batch_size=100, batch_wait=1.0, queue="orders")
def record_orders(items: list[Item[Order]]) -> None:
    for item in items:
        if item.args["total"] < 0:
            item.fail(Fail(f"order {item.args['order_id']}: negative total"))
        elif item.attempt < 2 and item.cancelled:
            item.fail(Retry(delay=30))


@dataclass
class Thumbnail:
    image_id: int
    width: int = 100


@pgq.task(batch_size=50, result_ttl=3600)
async def thumbnails_batch(items: list[Item[Thumbnail]]) -> list[str]:
    await asyncio.sleep(0)
    return [f"{item.id}:{item.args.image_id}x{item.args.width}" for item in items]


@pgq.task(batch_size=10, batch_wait=timedelta(milliseconds=200))
def audit_events(items: list[Item[dict[str, Any]]]) -> None:
    print([item.args for item in items])


def batches(dsn: str) -> list[JobId]:
    with psycopg.connect(dsn) as conn:
        # Untyped: one job's arguments as keywords, options beside them.
        first = record_orders.enqueue(order_id=1, total=9.5, conn=conn)
        # Typed: one value of the task's argument type.
        second = record_orders.options(conn=conn, priority=1).enqueue({"order_id": 2, "total": 3.0})
    third = thumbnails_batch.options(result_ttl=60).enqueue(Thumbnail(7))
    audit_events.options().enqueue({"action": "login"})
    many = pgq.enqueue_many([thumbnails_batch.s(image_id=i) for i in range(3)])
    return [first, second, third, *many]


def typed_results() -> int:
    # A task's enqueue returns a JobId that knows the task's return type; result() returns it.
    job: JobId[int] = add.enqueue(1, 2)
    total: int = pgq.result(job, timeout=30)
    typed = add.options(priority=1).enqueue(1, 2)
    again: int = pgq.result(typed)
    # By task name or a bare id: the result is Any, as before.
    by_name: JobId = pgq.enqueue("add", {"a": 1, "b": 2})
    anything: Any = pgq.result(by_name)
    return total + again + int(anything) + int(pgq.result(7))


async def typed_results_async() -> int:
    # An async task's JobId knows its coroutine; the result is what the coroutine returns.
    first: JobId[Coroutine[Any, Any, dict[str, int]]] = await resize.enqueue_async(1)
    info: dict[str, int] = await pgq.result_async(first, timeout=30)
    second = await resize.options(priority=1).enqueue_async(2, width=10)
    again: dict[str, int] = await pgq.result_async(second)
    return info["width"] + again["width"]


@pgq.task(pass_context=True)
def book(ctx: JobContext, order_id: int) -> None:
    # No conn=: the block gets a psycopg connection of the worker's.
    with ctx.transaction() as conn:
        worker_conn: psycopg.Connection[Any] = conn
        worker_conn.execute("UPDATE orders SET booked = true WHERE id = %s", [order_id])
    # conn=: the block gets what was passed, with its own type.
    with Session(engine) as session, ctx.transaction(conn=session) as db:
        same: Session = db
        same.execute(text("UPDATE orders SET booked = true"))


@pgq.task
async def book_async(order_id: int) -> None:
    ctx = current_job()
    async with ctx.transaction() as conn:
        worker_conn: psycopg.AsyncConnection[Any] = conn
        await worker_conn.execute("UPDATE orders SET booked = true WHERE id = %s", [order_id])
    async with AsyncSession(async_engine) as session, ctx.transaction(conn=session) as db:
        same: AsyncSession = db
        await same.execute(text("UPDATE orders SET booked = true"))
