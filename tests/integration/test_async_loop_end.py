"""A client used from several event loops one after the other (``asyncio.run()`` per call,
as a script or a sync framework calling async code does) closes each loop's pool, the
connection it kept, and its results listener when that loop ends: left open, each run kept
its connections to the server, and the loop itself, for the life of the process."""

from __future__ import annotations

import asyncio
import gc
import time

import psycopg
import pytest

from pgqueue import PgQueue, ResultTimeoutError


def _client_backends(dsn: str, expected: int | None = None) -> int:
    """The other client backends of the database (waiting up to 2 s for ``expected``: a
    backend whose connection was closed leaves pg_stat_activity a moment later)."""
    deadline = time.monotonic() + 2
    with psycopg.connect(dsn, autocommit=True) as admin:
        while True:
            row = admin.execute(
                "SELECT count(*) FROM pg_stat_activity WHERE datname = current_database()"
                " AND pid <> pg_backend_pid() AND backend_type = 'client backend'"
            ).fetchone()
            assert row is not None
            if row[0] == expected or expected is None or time.monotonic() > deadline:
                return int(row[0])
            time.sleep(0.05)


def test_each_asyncio_run_leaves_no_connection_open(dsn: str) -> None:
    pgq = PgQueue(dsn)

    @pgq.task(name="loop_end.t")
    def t() -> None: ...

    async def enqueue_and_wait() -> None:
        job = await t.options(result_ttl=60).enqueue_async()
        async with pgq.connection_async() as conn:
            await conn.execute("SELECT 1")
        # No worker: the wait times out, having started the loop's results listener.
        with pytest.raises(ResultTimeoutError):
            await pgq.result_async(job, timeout=0.05)

    before = _client_backends(dsn)
    for _ in range(6):
        asyncio.run(enqueue_and_wait())
    gc.collect()
    assert _client_backends(dsn, before) == before  # 6 left open before: one pool per run
    # The client goes on working on a new loop, and its close leaves nothing behind.
    asyncio.run(enqueue_and_wait())
    pgq.close()
    with psycopg.connect(dsn) as conn:
        row = conn.execute("SELECT count(*) FROM pgqueue.jobs WHERE task = 'loop_end.t'").fetchone()
    assert row == (7,)
    assert _client_backends(dsn, before) == before


def test_aclose_leaves_no_task_on_a_loop_closed_without_cancelling_its_tasks(dsn: str) -> None:
    """Some runners close their loop without cancelling what is left (an application's own
    loop, a test client's portal, after the app's lifespan ran ``aclose()``): the client
    leaves no task of its own there to be dropped pending."""
    pgq = PgQueue(dsn)

    @pgq.task(name="loop_end.u")
    def u() -> None: ...

    loop = asyncio.new_event_loop()

    async def go() -> None:
        await u.enqueue_async()
        await pgq.aclose()

    try:
        loop.run_until_complete(go())
        left = [task.get_name() for task in asyncio.all_tasks(loop)]
    finally:
        loop.close()
    assert not [name for name in left if name.startswith("pgqueue")], left
    pgq.close()
