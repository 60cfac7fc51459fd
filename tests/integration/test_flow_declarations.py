"""Declarations in code (task limits, breakers, schedules) reach the database at worker start,
and the async twins of the new client calls."""

from __future__ import annotations

import asyncio

import psycopg
import pytest

from pgqueue import CircuitBreaker, PgQueue, QueueFullError
from tests.helpers import scalar


def limits(dsn: str) -> list[tuple[object, ...]]:
    with psycopg.connect(dsn) as conn:
        return conn.execute(
            "SELECT task, concurrency_limit, key_limit, rate_limit, from_code"
            " FROM pgqueue.task_limits ORDER BY task"
        ).fetchall()


def test_code_declarations_are_written_and_withdrawn(dsn):
    v1 = PgQueue(dsn)

    @v1.task(name="report", concurrency_limit=3, rate_limit="30/m")
    def report() -> None: ...

    @v1.task(name="charge", circuit_breaker=CircuitBreaker(min_calls=4))
    def charge() -> None: ...

    @v1.periodic("0 * * * *", name="hourly")
    def hourly() -> None: ...

    v1.sync_declarations()
    assert limits(dsn) == [("report", 3, 1, 0.5, True)]
    assert scalar(dsn, "SELECT min_calls FROM pgqueue.circuit_breakers WHERE task = 'charge'") == 4
    first_tick = scalar(dsn, "SELECT next_tick FROM pgqueue.schedules WHERE name = 'hourly'")
    v1.cron.pause("hourly")
    v1.sync_declarations()  # a restart keeps the schedule's position and the operator's pause
    assert scalar(dsn, "SELECT next_tick FROM pgqueue.schedules") == first_tick
    assert scalar(dsn, "SELECT paused FROM pgqueue.schedules")
    v1.close()

    # The next deploy no longer declares them: the code's limits and breaker go; an operator's
    # setting on another task stays.
    v2 = PgQueue(dsn)

    @v2.task(name="report")
    def report2() -> None: ...

    @v2.task(name="charge")
    def charge2() -> None: ...

    v2.flow.configure_task("other", concurrency_limit=7)
    v2.sync_declarations()
    assert limits(dsn) == [("other", 7, 1, None, False), ("report", None, 1, None, False)]
    assert scalar(dsn, "SELECT count(*) FROM pgqueue.circuit_breakers") == 0
    v2.close()


def test_async_publish_and_backpressure(dsn):
    app = PgQueue(dsn)

    @app.task(name="welcome", on="signed_up")
    async def welcome(user: int) -> None: ...

    async def scenario() -> None:
        conn = await psycopg.AsyncConnection.connect(dsn)
        try:
            ids = await app.publish_async("signed_up", {"user": 1}, conn=conn)
            assert len(ids) == 1
            await conn.rollback()
        finally:
            await conn.close()
        assert scalar(dsn, "SELECT count(*) FROM pgqueue.jobs") == 0
        await app.flow.configure_queue_async("default", max_depth=1)
        await app.publish_async("signed_up", {"user": 2})
        with pytest.raises(QueueFullError):
            await app.enqueue_async("welcome", {"user": 3}, wait_if_full=0.3)
        with pytest.raises(QueueFullError):
            await app.enqueue_many_async([welcome.s(4)], wait_if_full=0.2)
        await app.aclose()

    asyncio.run(scenario())
    assert scalar(dsn, "SELECT count(*) FROM pgqueue.jobs") == 1
