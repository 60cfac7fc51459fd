"""pgqueue inside an application's own connection pools and event loop (FastAPI-style apps):
``PgQueue(pool=...)`` uses the application's pool and never closes it, and ``result_async``
waits through one LISTEN connection per loop instead of a connection per call."""

from __future__ import annotations

import asyncio

import psycopg
from psycopg_pool import AsyncConnectionPool, ConnectionPool

from pgqueue import PgQueue
from tests.helpers import thread_worker
from tests.integration import workflow_app
from tests.integration.workflow_app import add


def backends(dsn: str, application: str) -> int:
    with psycopg.connect(dsn, autocommit=True) as conn:
        return conn.execute(
            "SELECT count(*) FROM pg_stat_activity WHERE datname = current_database()"
            " AND application_name = %s",
            (application,),
        ).fetchone()[0]


def test_many_result_waiters_share_one_listener_and_the_pool(app_dsn):
    """50 requests awaiting results at once: one listener connection, reads through the app's
    pool (4 connections), and every result arrives once a worker runs the jobs."""

    async def main() -> list[int]:
        async with AsyncConnectionPool(
            app_dsn, min_size=1, max_size=4, kwargs={"application_name": "the app"}, open=False
        ) as pool:
            pgq = PgQueue(pool=pool)
            ids = [await pgq.enqueue_async(add, {"x": i, "y": 1}) for i in range(50)]
            waiters = [asyncio.create_task(pgq.result_async(i, timeout=60)) for i in ids]
            await asyncio.sleep(1.0)  # every waiter has read once and is waiting now
            assert not any(w.done() for w in waiters)
            assert await asyncio.to_thread(backends, app_dsn, "pgqueue results listener") == 1
            assert await asyncio.to_thread(backends, app_dsn, "the app") <= 4
            with thread_worker(workflow_app.pgq, app_dsn):
                results = await asyncio.gather(*waiters)
            await pgq.aclose()
            # The application's pool is the application's: still open and usable.
            async with pool.connection() as conn:
                assert (await (await conn.execute("SELECT 1")).fetchone()) == (1,)
            assert await asyncio.to_thread(backends, app_dsn, "pgqueue results listener") == 0
            return results

    assert asyncio.run(main()) == [i + 1 for i in range(50)]


def test_a_shared_sync_pool_is_used_and_left_open(app_dsn):
    """The app's pool hands out non-autocommit connections: enqueue commits its job anyway
    (the pool commits when the connection goes back), and close() leaves the pool open."""
    with ConnectionPool(
        app_dsn, min_size=1, max_size=2, kwargs={"application_name": "the app"}, open=True
    ) as pool:
        pgq = PgQueue(pool=pool)
        assert pgq.dsn == app_dsn  # workers and listeners connect where the pool does
        job = pgq.enqueue(add, {"x": 1, "y": 2})
        many = pgq.enqueue_many([add.s(i, 1) for i in range(100)])
        pgq.close()
        with pool.connection() as conn:
            assert conn.execute("SELECT count(*) FROM pgqueue.jobs").fetchone() == (101,)
        with thread_worker(workflow_app.pgq, app_dsn):
            assert pgq.result(job, timeout=30) == 3
            assert pgq.result(many[-1], timeout=30) == 100


def test_a_pool_that_is_not_a_pool_is_refused(app_dsn):
    import pytest

    from pgqueue import ConfigurationError

    with pytest.raises(ConfigurationError, match="psycopg_pool ConnectionPool"):
        PgQueue(pool=object())  # type: ignore[arg-type]
