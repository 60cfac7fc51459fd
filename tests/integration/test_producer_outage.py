"""A long-lived producer across a database restart: its pool finds and replaces the connections
the server dropped, so the first enqueue after the server is back succeeds."""

from __future__ import annotations

import asyncio

from pgqueue import PgQueue
from tests.helpers import scalar


def test_enqueue_after_a_restart_succeeds_at_once(own_server):
    pgq = PgQueue(own_server.dsn, pool_size=4)

    @pgq.task(name="outage.noop")
    def noop(n: int) -> None: ...

    # Fill the pool: four connections, all of which the restart will cut.
    import threading

    barrier = threading.Barrier(4)

    def hold() -> None:
        with pgq.connection():
            barrier.wait(timeout=10)

    threads = [threading.Thread(target=hold) for _ in range(4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    noop.enqueue(0)
    own_server.restart("immediate")
    for n in range(1, 9):  # every pooled connection is dead: each must be replaced, none used
        noop.enqueue(n)

    async def async_side() -> None:
        async_pgq = PgQueue(own_server.dsn, pool_size=2)
        await async_pgq.enqueue_async(noop, {"n": 100})
        own_server.restart("immediate")
        for n in range(101, 105):
            await async_pgq.enqueue_async(noop, {"n": n})
        await async_pgq.aclose()

    asyncio.run(async_side())
    assert scalar(own_server.dsn, "SELECT count(*) FROM pgqueue.jobs") == 14
    pgq.close()
