"""The connection the client keeps for its next async call (:mod:`pgqueue.client.kept`)
is checked as the pool checks what it hands out, and is never lost to the pool.

Something arriving on the kept connection's socket while it is idle (a notification for a
LISTEN the application ran on it, the server ending it) makes the next call check it with a
round trip first. A call cancelled during that check gives the connection back (psycopg_pool's
``getconn`` does the same for its own check): a lost connection is a slot the pool never gets
back, and with all slots lost every call waits for one until its timeout. A kept connection the
server ended is found by that check and replaced: the next call succeeds.
"""

from __future__ import annotations

import asyncio
import time

import psycopg
import pytest

from pgqueue import PgQueue
from tests.helpers import run_closing, terminate_clients

# An enqueue that takes longer than this waits for a connection nobody gives back.
PROMPT = 3.0


def _register(pgq: PgQueue) -> None:
    @pgq.task(name="t")
    def t() -> None: ...


@pytest.mark.parametrize("group_commit", [True, False], ids=["group-commit", "one-by-one"])
def test_a_call_cancelled_while_the_kept_connection_is_checked_gives_it_back(
    dsn: str, group_commit: bool
) -> None:
    pgq = PgQueue(dsn, pool_size=1, group_commit=group_commit)
    _register(pgq)

    async def work() -> list[int]:
        async with pgq.connection_async() as conn:  # kept for the next call afterwards
            await conn.execute("LISTEN pgq_review")
        jobs = []
        for _ in range(3):
            with psycopg.connect(dsn, autocommit=True) as other:
                other.execute("NOTIFY pgq_review")
            await asyncio.sleep(0.05)  # on the kept connection's socket: checked when taken
            call = asyncio.create_task(pgq.enqueue_async("t", {}))
            await asyncio.sleep(0)  # the call waits for the check's answer
            call.cancel()
            with pytest.raises(asyncio.CancelledError):
                await call
            # The pool's only connection is back: the next call gets it.
            jobs.append(int(await asyncio.wait_for(pgq.enqueue_async("t", {}), PROMPT)))
        return jobs

    try:
        jobs = run_closing(pgq, work)
    finally:
        pgq.close()
    assert len(jobs) == 3


@pytest.mark.parametrize("loop_turns", [False, True], ids=["at-once", "after-a-turn"])
def test_a_kept_connection_the_server_ended_is_replaced_for_the_next_call(
    dsn: str, pgq: PgQueue, loop_turns: bool
) -> None:
    """Ended while idle, found when the next call takes it (whether or not the loop turned and
    saw the socket close meanwhile): the call succeeds on a new connection."""
    _register(pgq)

    async def work() -> list[int]:
        jobs = [int(await pgq.enqueue_async("t", {}))]
        for _ in range(3):
            assert terminate_clients(dsn) >= 1
            if loop_turns:
                await asyncio.sleep(0.1)
            else:
                time.sleep(0.1)  # noqa: ASYNC251 (the loop must not turn: nothing reads the socket)
            jobs.append(int(await asyncio.wait_for(pgq.enqueue_async("t", {}), PROMPT)))
        return jobs

    assert len(run_closing(pgq, work)) == 4


def test_a_notification_on_the_idle_kept_connection_is_read_by_the_next_call(
    dsn: str, pgq: PgQueue
) -> None:
    """The loop stops watching an idle socket something arrived on (it would call back at
    every turn otherwise); the next call watches it again and gets its answer."""
    _register(pgq)

    async def work() -> list[int]:
        async with pgq.connection_async() as conn:
            await conn.execute("LISTEN pgq_review")
        jobs = []
        for _ in range(5):
            with psycopg.connect(dsn, autocommit=True) as other:
                other.execute("NOTIFY pgq_review")
            await asyncio.sleep(0.05)
            jobs.append(int(await asyncio.wait_for(pgq.enqueue_async("t", {}), PROMPT)))
        return jobs

    assert len(run_closing(pgq, work)) == 5
