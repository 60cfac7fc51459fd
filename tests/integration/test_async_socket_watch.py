"""The client's async connections keep their socket watched by the event loop between statements,
and every way a connection ends takes the watch away first.

A single enqueue adds no reader to the loop and removes none (the socket stays registered from
one statement to the next). A descriptor left registered after its connection closed is the
danger: a new connection given the same descriptor number would then never be watched (the loop
believes it already is) and its first statement would wait forever. So after a pool closes a
connection (drained, recycled, the client closed), after the server closes one (found when it is
handed out, or in the middle of a statement), after a cancelled statement, and across event
loops, the loop watches exactly the client's open connections, and the next enqueue completes.
"""

from __future__ import annotations

import asyncio
from collections.abc import Iterator
from typing import Any

import psycopg
import pytest
from psycopg.waiting import Wait

from pgqueue import PgQueue
from pgqueue.db.async_wait import LeanWaits
from tests.helpers import counting, run_closing, terminate_clients

CALLS = 20
# An enqueue that waits longer than this for its answer waits on a socket nobody watches.
PROMPT = 10.0


def _register(pgq: PgQueue) -> None:
    @pgq.task(name="t")
    def t() -> None: ...


def _watched() -> set[int]:
    """The descriptors the running loop's selector watches."""
    loop = asyncio.get_running_loop()
    selector = loop._selector  # type: ignore[attr-defined]
    return set(selector.get_map())


def _watchers() -> dict[int, Any]:
    """The client's connections the running loop watches, by the descriptor it watches."""
    selector = asyncio.get_running_loop()._selector  # type: ignore[attr-defined]
    found = {}
    for fd, key in selector.get_map().items():
        reader = key.data[0]
        owner = getattr(getattr(reader, "_callback", None), "__self__", None)
        if isinstance(owner, LeanWaits):
            found[fd] = owner
    return found


def _stray() -> dict[int, Any]:
    """Registrations of connections that are closed or broken, or whose socket is not the
    descriptor watched: none may be left."""
    return {
        fd: conn
        for fd, conn in _watchers().items()
        if conn.closed or conn.broken or conn.pgconn.socket != fd
    }


async def _use_connections(pgq: PgQueue, count: int) -> set[int]:
    """Take ``count`` of the client's connections at once, a statement on each (each left
    watched by the loop); their sockets."""
    taken = asyncio.Event()
    sockets: set[int] = set()

    async def use() -> None:
        async with pgq.connection_async() as conn:
            await conn.execute("SELECT 1")
            sockets.add(conn.pgconn.socket)
            if len(sockets) == count:
                taken.set()
            await asyncio.wait_for(taken.wait(), PROMPT)

    await asyncio.gather(*(use() for _ in range(count)))
    return sockets


async def _enqueue(pgq: PgQueue) -> int:
    return await asyncio.wait_for(pgq.enqueue_async("t", {}), PROMPT)


def test_a_single_enqueue_adds_and_removes_no_reader(pgq: PgQueue, monkeypatch) -> None:
    _register(pgq)

    async def work() -> tuple[int, int]:
        await _enqueue(pgq)  # the pool opened, the socket watched
        loop = asyncio.get_running_loop()
        with (
            counting(monkeypatch, loop, "add_reader") as added,
            counting(monkeypatch, loop, "remove_reader") as removed,
        ):
            for _ in range(CALLS):
                await _enqueue(pgq)
        return added[0], removed[0]

    assert run_closing(pgq, work) == (0, 0)


def test_closing_the_client_leaves_no_reader(pgq: PgQueue) -> None:
    _register(pgq)

    async def work() -> tuple[set[int], set[int]]:
        before = _watched()
        used = await _use_connections(pgq, 3)
        assert used <= _watched()
        await pgq.aclose()
        return before, _watched()

    before, after = run_closing(pgq, work)
    assert after == before


def test_connections_the_pool_closes_leave_no_reader_and_new_ones_are_watched(
    pgq: PgQueue,
) -> None:
    """``drain()`` closes the idle connections and opens new ones, as ``max_lifetime`` does; a
    new connection often gets the old one's descriptor number."""
    _register(pgq)

    async def work() -> tuple[set[int], dict[int, Any], int]:
        await _enqueue(pgq)
        pool = pgq._pools._async_pools[asyncio.get_running_loop()]
        used: set[int] = set()
        for _ in range(3):
            old = await _use_connections(pgq, 2)
            assert old <= _watched()
            used |= old
            await pool.drain()
            # None closed left behind (new ones not made yet; the one the client keeps for its
            # next call is open: the pool closes it when it comes back).
            assert not _stray()
            await pool.wait(timeout=PROMPT)
            await _enqueue(pgq)
        job = await _enqueue(pgq)
        assert _watchers()  # the connection that wrote it
        return used, _stray(), job

    old, stray, job = run_closing(pgq, work)
    assert old and stray == {} and job > 0


def test_connections_the_server_closed_leave_no_reader_and_are_replaced(
    dsn: str, pgq: PgQueue
) -> None:
    _register(pgq)

    async def work() -> tuple[int, dict[int, Any], int]:
        assert await _use_connections(pgq, 3) <= _watched()
        killed = terminate_clients(dsn)
        await asyncio.sleep(0.2)  # the loop sees the sockets close while nothing waits on them
        for _ in range(4):
            await _enqueue(pgq)  # found dead when handed out, replaced
        job = await _enqueue(pgq)
        return killed, _stray(), job

    killed, stray, job = run_closing(pgq, work)
    assert killed >= 1 and stray == {} and job > 0


def test_a_connection_broken_in_the_middle_of_a_statement_leaves_no_reader(
    dsn: str, pgq: PgQueue
) -> None:
    _register(pgq)
    with psycopg.connect(dsn) as holder:

        async def work() -> tuple[type[BaseException], dict[int, Any], int]:
            await _enqueue(pgq)
            holder.execute("LOCK TABLE pgqueue.jobs IN SHARE MODE")
            blocked = asyncio.create_task(pgq.enqueue_async("t", {}))
            await asyncio.sleep(0.3)  # the insert waits for the lock
            with psycopg.connect(dsn, autocommit=True) as admin:
                admin.execute(
                    "SELECT pg_terminate_backend(pid) FROM pg_stat_activity"
                    " WHERE datname = current_database() AND state = 'active'"
                    " AND query LIKE 'INSERT INTO pgqueue.jobs%'"
                )
            failed = await asyncio.wait_for(asyncio.gather(blocked, return_exceptions=True), PROMPT)
            holder.rollback()
            job = await _enqueue(pgq)
            assert isinstance(failed[0], BaseException)
            return type(failed[0]), _stray(), job

        failure, stray, job = run_closing(pgq, work)
    assert issubclass(failure, psycopg.OperationalError)
    assert stray == {} and job > 0


def test_a_cancelled_statement_leaves_the_connection_watched_once(dsn: str, pgq: PgQueue) -> None:
    _register(pgq)
    with psycopg.connect(dsn) as holder:

        async def work() -> tuple[dict[int, Any], int]:
            await _enqueue(pgq)
            holder.execute("LOCK TABLE pgqueue.jobs IN SHARE MODE")
            blocked = asyncio.create_task(pgq.enqueue_async("t", {}))
            await asyncio.sleep(0.3)
            blocked.cancel()
            with pytest.raises(asyncio.CancelledError):
                await blocked
            holder.rollback()
            job = await _enqueue(pgq)
            return _stray(), job

        stray, job = run_closing(pgq, work)
    assert stray == {} and job > 0


def test_a_client_used_on_one_loop_after_another(pgq: PgQueue) -> None:
    """The first loop closes with the client's connections still watched by it (no
    ``aclose``): the loop's selector goes with it; the next loop has a pool and watches of its
    own."""
    _register(pgq)

    async def first() -> int:
        return await _enqueue(pgq)

    asyncio.run(first())

    async def second() -> tuple[dict[int, Any], int]:
        job = await _enqueue(pgq)
        return _stray(), job

    stray, job = run_closing(pgq, second)
    assert stray == {} and job > 0


@pytest.mark.parametrize("when", ["in the reader's turn", "right after it"])
def test_a_task_interrupted_after_the_reader_read_part_of_its_answer_finishes_it(
    dsn: str, when: str
) -> None:
    """The reader drives a statement until it needs something other than a readable socket
    (a pipeline's flush wants a writable one) and hands it to its task; a task cancelled at
    that moment hands the statement to psycopg's wait, which ends it before the cancellation
    goes on: the connection is not left in the middle of a statement."""
    steps: list[str] = []

    def statement(conn: LeanWaits, task: list[asyncio.Task[Any]]) -> Iterator[Wait]:
        pgconn = conn.pgconn
        pgconn.send_query(b"SELECT pg_sleep(0.05)")
        while pgconn.flush():
            yield Wait.W
        yield Wait.R
        steps.append("read")
        # Interrupted while the reader holds the statement, or once it handed it over.
        if when == "right after it":
            asyncio.get_running_loop().call_soon(task[0].cancel)
        else:
            task[0].cancel()
        yield Wait.W
        steps.append("wrote")
        while True:
            pgconn.consume_input()
            if not pgconn.is_busy():
                break
            yield Wait.R
        while pgconn.get_result() is not None:
            pass
        steps.append("done")

    async def work() -> tuple[bool, int]:
        conn = await LeanWaits.connect(dsn, autocommit=True)
        try:
            task: list[asyncio.Task[Any]] = []
            task.append(asyncio.create_task(conn.wait(statement(conn, task))))  # type: ignore[arg-type]
            try:
                await asyncio.wait_for(task[0], PROMPT)
                cancelled = False
            except asyncio.CancelledError:
                cancelled = True
            row = await (await conn.execute("SELECT 1")).fetchone()
            assert row is not None
            return cancelled, int(row[0])
        finally:
            await conn.close()

    assert asyncio.run(work()) == (True, 1)
    assert steps == ["read", "wrote", "done"]
