"""Calls a type checker must reject: each line marked ``# error: CODE`` must get exactly that
mypy error (and a pyright error), and no other line any (tests/unit/test_typing.py).

Excluded from the project's own mypy run (pyproject.toml), which would fail on purpose here.
"""

from __future__ import annotations

from typing import TypedDict

import psycopg
from sqlalchemy.orm import Session

from pgqueue import Item, PgQueue, current_job

pgq = PgQueue()


@pgq.task(queue="math")
def add(a: int, b: int) -> int:
    return a + b


@pgq.task
async def greet(name: str, *, loud: bool = False) -> str:
    return name.upper() if loud else name


def wrong(conn: psycopg.Connection[tuple[object, ...]]) -> None:
    add.options(queue="math").enqueue(1, "2")  # error: arg-type
    add.options(conn=conn).enqueue(1)  # error: call-arg
    add.options().enqueue(1, 2, 3)  # error: call-arg
    add.options().enqueue(a=1, c=2)  # error: call-arg
    add.options(priorty=1).enqueue(1, 2)  # error: call-arg
    add.options(queue=7).enqueue(1, 2)  # error: arg-type
    add.options(delay="soon").enqueue(1, 2)  # error: arg-type
    total: str = add(1, 2)  # error: assignment
    print(total)


def wrong_options() -> None:
    pgq.task(queu="math")  # error: call-overload
    pgq.task(max_attempts="5")  # error: call-overload
    pgq.task(limit_by=["customer_id"])  # error: call-overload
    pgq.flow.configure_queue("tenants", fair="yes")  # error: arg-type
    pgq.periodic("* * * * *", prority=1)  # error: call-arg
    pgq.enqueue("add", {"a": 1}, priorty=1)  # error: call-arg
    pgq.enqueue("add", {"a": 1}, delay="soon")  # error: arg-type
    pgq.enqueue("add", {"a": 1}, meta=["x"])  # error: arg-type
    pgq.enqueue("add", {"a": 1}, tags=3)  # error: arg-type
    pgq.enqueue("add", {"a": 1}, on_conflict="merge")  # error: arg-type
    add.options(unique_among="running").enqueue(1, 2)  # error: arg-type


class Row(TypedDict):
    n: int


@pgq.task(batch_size=10)
def rows(items: list[Item[Row]]) -> None:
    for item in items:
        print(item.args["m"])  # error: typeddict-item


def wrong_batches() -> None:
    rows.options().enqueue({"n": "1"})  # error: typeddict-item
    rows.options().enqueue(n=1)  # error: call-arg
    pgq.task(batch_size="10")  # error: call-overload
    pgq.task(batch_size=10, pass_context=True)  # error: call-overload


@pgq.task(batch_size=10)  # error: arg-type
def not_a_batch(n: int) -> None: ...


async def wrong_async() -> None:
    await greet.options().enqueue_async("Ann", loud="yes")  # error: arg-type
    await greet.options().enqueue_async(name=1)  # error: arg-type


def wrong_results(session: Session) -> None:
    job = add.enqueue(1, 2)
    text: str = pgq.result(job)  # error: assignment
    print(text)
    with current_job().transaction() as conn:
        conn.execute_sql("SELECT 1")  # error: attr-defined
    with current_job().transaction(conn=session) as db:
        db.cursor()  # error: attr-defined


async def wrong_async_results() -> None:
    job = await greet.enqueue_async("Ann")
    # Through a name: mypy solves an awaited overload from the assignment's type alone.
    greeting = await pgq.result_async(job)
    number: int = greeting  # error: assignment
    print(number)
    async with current_job().transaction() as conn:
        conn.commit_later()  # error: attr-defined
