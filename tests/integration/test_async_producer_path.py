"""A single enqueue without ``conn=`` does only the work its statement needs, sync or async.

On the client's pooled connections: no timer armed on the event loop while an async statement
waits for its answer (:mod:`pgqueue.db.async_wait`), no cursor made per statement (a kept one),
and no commit sent on an autocommit connection (psycopg_pool's ``connection()`` sends one, empty,
at every checkout's end). What psycopg's own waiting did is kept: a cancelled task cancels its
statement on the server and the connection goes on working, and a statement larger than the
socket's buffer is sent whole. An application's pool whose connections are not autocommit
still has its transactions committed, or rolled back after an error.
"""

from __future__ import annotations

import asyncio
import time
from typing import Any

import psycopg
import pytest
from psycopg_pool import AsyncConnectionPool

from pgqueue import PgQueue
from tests.helpers import counting, run_closing

CALLS = 20


def _register(pgq: PgQueue) -> None:
    @pgq.task(name="t")
    def t(blob: str = "") -> None: ...


def test_an_async_enqueue_arms_no_timer_while_it_waits(
    dsn: str, pgq: PgQueue, monkeypatch: pytest.MonkeyPatch
) -> None:
    _register(pgq)

    async def work() -> int:
        await pgq.enqueue_async("t", {})  # the pool opened, the statement prepared
        loop = asyncio.get_running_loop()
        with counting(monkeypatch, loop, "call_at") as timers:
            for _ in range(CALLS):
                await pgq.enqueue_async("t", {})
        return timers[0]

    assert run_closing(pgq, work) == 0


def test_a_single_enqueue_makes_no_cursor_and_sends_no_commit(
    dsn: str, pgq: PgQueue, monkeypatch: pytest.MonkeyPatch
) -> None:
    _register(pgq)
    pgq.enqueue("t", {})
    with (
        counting(monkeypatch, psycopg.Connection, "cursor") as cursors,
        counting(monkeypatch, psycopg.Connection, "commit") as commits,
    ):
        for _ in range(CALLS):
            pgq.enqueue("t", {})
    assert (cursors[0], commits[0]) == (0, 0)

    async def work() -> tuple[int, int]:
        await pgq.enqueue_async("t", {})
        with (
            counting(monkeypatch, psycopg.AsyncConnection, "cursor") as cursors,
            counting(monkeypatch, psycopg.AsyncConnection, "commit") as commits,
        ):
            for _ in range(CALLS):
                await pgq.enqueue_async("t", {})
        return cursors[0], commits[0]

    assert run_closing(pgq, work) == (0, 0)
    with psycopg.connect(dsn) as conn:
        assert conn.execute("SELECT count(*) FROM pgqueue.jobs").fetchone() == (2 + 2 * CALLS,)


def _waiting_inserts(conn: psycopg.Connection[Any]) -> int:
    row = conn.execute(
        "SELECT count(*) FROM pg_stat_activity WHERE datname = current_database()"
        " AND state = 'active' AND query LIKE 'INSERT INTO pgqueue.jobs%'"
    ).fetchone()
    assert row is not None
    return int(row[0])


def test_a_cancelled_async_enqueue_cancels_its_statement_and_the_connection_goes_on(
    dsn: str, pgq: PgQueue
) -> None:
    _register(pgq)
    with (
        psycopg.connect(dsn, autocommit=True) as watcher,
        psycopg.connect(dsn) as holder,
    ):

        async def work() -> tuple[int, int]:
            await pgq.enqueue_async("t", {})
            holder.execute("LOCK TABLE pgqueue.jobs IN SHARE MODE")
            blocked = asyncio.create_task(pgq.enqueue_async("t", {"blob": "cancelled"}))
            deadline = time.monotonic() + 10
            while _waiting_inserts(watcher) < 1:
                assert time.monotonic() < deadline, "the insert never waited for the lock"
                await asyncio.sleep(0.01)
            blocked.cancel()
            with pytest.raises(asyncio.CancelledError):
                await blocked
            left = _waiting_inserts(watcher)  # cancelled on the server, not left waiting
            holder.rollback()
            await pgq.enqueue_async("t", {"blob": "after"})
            return left, len(pgq._pools._async_pools)

        left, pools = run_closing(pgq, work)
    assert (left, pools) == (0, 1)
    with psycopg.connect(dsn) as conn:
        blobs = [r[0] for r in conn.execute("SELECT args->>'blob' FROM pgqueue.jobs ORDER BY id")]
    assert blobs == [None, "after"]


def test_an_async_enqueue_larger_than_the_socket_buffer_is_written_whole(dsn: str) -> None:
    pgq = PgQueue(dsn, max_payload_bytes=64 * 1024 * 1024)
    _register(pgq)
    blob = "x" * (16 * 1024 * 1024)

    async def work() -> int:
        return await pgq.enqueue_async("t", {"blob": blob})

    job_id = run_closing(pgq, work)
    with psycopg.connect(dsn) as conn:
        row = conn.execute(
            "SELECT length(args->>'blob') FROM pgqueue.jobs WHERE id = %s", (job_id,)
        ).fetchone()
    assert row == (len(blob),)


def test_an_applications_async_pool_not_in_autocommit_commits_and_rolls_back(dsn: str) -> None:
    async def work() -> tuple[int, str]:
        pool = AsyncConnectionPool(dsn, min_size=1, max_size=1, open=False)
        await pool.open(wait=True)
        try:
            pgq = PgQueue(pool=pool)
            _register(pgq)
            await pgq.enqueue_async("t", {})  # committed when the connection is given back
            with pytest.raises(psycopg.errors.DivisionByZero):
                async with pgq.connection_async() as conn:
                    await conn.execute("INSERT INTO pgqueue.jobs (queue, task) VALUES ('q', 't')")
                    await conn.execute("SELECT 1/0")
            async with pool.connection() as conn:
                status = conn.info.transaction_status.name  # rolled back, not left aborted
                count = await (await conn.execute("SELECT count(*) FROM pgqueue.jobs")).fetchone()
            await pgq.aclose()
            assert count is not None
            return int(count[0]), status
        finally:
            await pool.close()

    assert asyncio.run(work()) == (1, "IDLE")


def test_concurrent_first_calls_on_a_loop_open_one_pool_that_aclose_closes(dsn: str) -> None:
    pgq = PgQueue(dsn)
    _register(pgq)

    async def use() -> None:
        async with pgq.connection_async() as conn:
            await conn.execute("SELECT 1")

    async def work() -> tuple[int, int]:
        await asyncio.gather(*(use() for _ in range(4)))
        await pgq.aclose()
        with psycopg.connect(dsn) as watcher:
            row = watcher.execute(
                "SELECT count(*) FROM pg_stat_activity WHERE datname = current_database()"
                " AND backend_type = 'client backend' AND pid <> pg_backend_pid()"
            ).fetchone()
        assert row is not None
        return len(pgq._pools._async_pools), int(row[0])

    assert asyncio.run(work()) == (0, 0)


def test_an_async_single_enqueue_takes_no_connection_from_the_pool(
    pgq: PgQueue, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The client keeps the connection it was last given back, for the next call on the loop
    (psycopg_pool's getconn and putconn take an asyncio.Lock each)."""
    _register(pgq)

    async def work() -> tuple[int, int]:
        await pgq.enqueue_async("t", {})
        with (
            counting(monkeypatch, AsyncConnectionPool, "getconn") as taken,
            counting(monkeypatch, AsyncConnectionPool, "putconn") as given,
        ):
            for _ in range(CALLS):
                await pgq.enqueue_async("t", {})
        return taken[0], given[0]

    assert run_closing(pgq, work) == (0, 0)


def test_a_kept_connection_goes_back_to_the_pool_for_a_waiting_call(dsn: str) -> None:
    """One connection, two calls: the second waits in the pool; the first's connection is
    given to it at once, not kept for a next call that is not coming."""
    pgq = PgQueue(dsn, pool_size=1)
    _register(pgq)

    async def work() -> float:
        await pgq.enqueue_async("t", {})
        started = time.monotonic()
        held = asyncio.Event()

        async def hold() -> None:
            async with pgq.connection_async() as conn:
                held.set()
                await asyncio.sleep(0.1)
                await conn.execute("SELECT 1")

        holder = asyncio.create_task(hold())
        await held.wait()
        await asyncio.wait_for(pgq.enqueue_async("t", {}), 10)
        await holder
        await asyncio.wait_for(pgq.enqueue_async("t", {}), 10)
        return time.monotonic() - started

    assert run_closing(pgq, work) < 5


def test_a_kept_connection_goes_back_to_the_pool_after_a_while(
    pgq: PgQueue, monkeypatch: pytest.MonkeyPatch
) -> None:
    """So that the pool's own rules (max_lifetime, drain, shrinking) still apply to it."""
    from pgqueue.client import kept

    _register(pgq)
    monkeypatch.setattr(kept, "KEEP_SECONDS", 0.0)

    async def work() -> int:
        await pgq.enqueue_async("t", {})
        with counting(monkeypatch, AsyncConnectionPool, "putconn") as given:
            for _ in range(CALLS):
                await pgq.enqueue_async("t", {})
        return given[0]

    assert run_closing(pgq, work) == CALLS
