"""One client, many tasks on its async pool at once: every call answered once, none left waiting.

The client's async connections keep their socket watched by the loop between statements and
the connection last given back is kept for the next call (:mod:`pgqueue.db.async_wait`,
:mod:`pgqueue.client.kept`). Under many concurrent calls, with tasks cancelled at
random points, with the server ending the pooled connections in the middle of it, on two loops
in two threads, with an application's own connection in between, and with the client closed
while calls are in flight: every id returned is in the table once, no call waits forever (each
wait is bounded, so a hang fails the test), and afterwards the loop watches only the client's
open connections and the next enqueue completes.
"""

from __future__ import annotations

import asyncio
import functools
import random
import threading
from typing import Any

import psycopg
import pytest

from pgqueue import PgQueue
from tests.helpers import run_closing, stray_watches, terminate_clients

# Longer than any of these tests takes when nothing hangs.
PROMPT = 30.0


def _register(pgq: PgQueue) -> None:
    @pgq.task(name="t")
    def t(n: int = 0, blob: str = "") -> None: ...


def _job_ids(dsn: str) -> list[int]:
    with psycopg.connect(dsn) as conn:
        return [int(r[0]) for r in conn.execute("SELECT id FROM pgqueue.jobs").fetchall()]


def _busy_client_backends(dsn: str) -> list[tuple[Any, ...]]:
    """The database's other client backends that are not idle (in the middle of a statement
    or a transaction)."""
    with psycopg.connect(dsn, autocommit=True) as conn:
        return conn.execute(
            "SELECT pid, state, query FROM pg_stat_activity"
            " WHERE datname = current_database() AND pid <> pg_backend_pid()"
            " AND backend_type = 'client backend' AND state <> 'idle'"
        ).fetchall()


def _set(event: threading.Event, _: object) -> None:
    event.set()


@pytest.mark.parametrize("group_commit", [True, False], ids=["group-commit", "one-by-one"])
def test_many_tasks_enqueueing_on_one_client_each_get_their_own_job(
    dsn: str, group_commit: bool
) -> None:
    pgq = PgQueue(dsn, group_commit=group_commit)
    _register(pgq)
    tasks, calls = 200, 50

    async def producer(i: int) -> list[int]:
        return [int(await pgq.enqueue_async("t", {"n": i * calls + k})) for k in range(calls)]

    async def work() -> tuple[list[int], dict[int, Any], int]:
        made = await asyncio.gather(*(producer(i) for i in range(tasks)))
        ids = [job for some in made for job in some]
        return ids, stray_watches(), int(await pgq.enqueue_async("t", {}))

    try:
        ids, stray, last = run_closing(pgq, work)
    finally:
        pgq.close()
    assert len(ids) == len(set(ids)) == tasks * calls
    assert sorted(_job_ids(dsn)) == sorted([*ids, last])
    assert stray == {}


def test_tasks_cancelled_at_random_points_leave_the_client_working(dsn: str, pgq: PgQueue) -> None:
    """A cancelled call may or may not have written its job; a call that returned an id did,
    once; no connection is left in the middle of a statement or a transaction."""
    _register(pgq)
    rng = random.Random(20261206)
    done: list[int] = []

    async def producer(i: int) -> None:
        for k in range(1000):
            done.append(int(await pgq.enqueue_async("t", {"n": i * 1000 + k})))

    async def work() -> tuple[dict[int, Any], list[int]]:
        await pgq.enqueue_async("t", {})
        for _round in range(6):
            running = [asyncio.create_task(producer(i)) for i in range(40)]
            for task in running:
                await asyncio.sleep(rng.random() * 0.004)
                task.cancel()
            results = await asyncio.gather(*running, return_exceptions=True)
            assert all(isinstance(r, asyncio.CancelledError) for r in results), results
        after = [int(await pgq.enqueue_async("t", {})) for _ in range(20)]
        return stray_watches(), after

    stray, after = run_closing(pgq, work)
    assert stray == {}
    in_table = _job_ids(dsn)
    assert len(in_table) == len(set(in_table))
    assert set(done) | set(after) <= set(in_table)
    assert _busy_client_backends(dsn) == []


def test_the_server_ending_the_pooled_connections_while_tasks_enqueue(dsn: str) -> None:
    """Calls in flight when their connection is ended fail with psycopg's error (or succeed on
    a connection opened since); none waits forever, and afterwards every call succeeds."""
    pgq = PgQueue(dsn, pool_size=8)
    _register(pgq)
    stop = asyncio.Event()
    ok: list[int] = []
    failed: list[BaseException] = []

    async def producer(i: int) -> None:
        while not stop.is_set():
            try:
                ok.append(int(await pgq.enqueue_async("t", {"n": i})))
            except psycopg.OperationalError as exc:
                failed.append(exc)
                await asyncio.sleep(0.01)

    async def work() -> tuple[int, dict[int, Any], list[int]]:
        await pgq.enqueue_async("t", {})
        running = [asyncio.create_task(producer(i)) for i in range(30)]
        killed = 0
        for _ in range(4):
            await asyncio.sleep(0.15)
            killed += await asyncio.to_thread(terminate_clients, dsn)
        await asyncio.sleep(0.15)
        stop.set()
        await asyncio.gather(*running)
        # A connection ended while idle in the pool is found when handed out: no error now.
        after = [int(await pgq.enqueue_async("t", {})) for _ in range(20)]
        return killed, stray_watches(), after

    try:
        killed, stray, after = run_closing(pgq, work)
    finally:
        pgq.close()
    assert killed >= 4 and ok and len(after) == 20
    assert stray == {}
    in_table = _job_ids(dsn)
    assert len(in_table) == len(set(in_table)) and set(ok) | set(after) <= set(in_table)


@pytest.mark.parametrize("kind", ["statement", "copy"])
def test_a_connection_ended_while_it_sends_a_large_statement(dsn: str, kind: str) -> None:
    """A 16 MB argument, or a COPY of 50,000 jobs, fills the socket's buffer (the statement is
    handed to psycopg's own wait for a writable socket); its connection ended meanwhile fails
    the call, not the client."""
    pgq = PgQueue(dsn, max_payload_bytes=64 * 1024 * 1024)

    @pgq.task(name="t")
    def t(n: int = 0, blob: str = "") -> None: ...

    blob = "x" * (16 * 1024 * 1024)
    calls = [t.s(n=n, blob="y" * 200) for n in range(50_000)]

    async def large() -> Any:
        if kind == "statement":
            return await pgq.enqueue_async("t", {"blob": blob})
        return await pgq.enqueue_many_async(calls)

    def terminate_copies(done: threading.Event) -> int:
        """End the connection of the COPY in progress, as soon as there is one."""
        with psycopg.connect(dsn, autocommit=True) as admin:
            while not done.is_set():
                row = admin.execute(
                    "SELECT count(pg_terminate_backend(pid)) FROM pg_stat_activity"
                    " WHERE datname = current_database() AND state = 'active'"
                    " AND query LIKE 'COPY %'"
                ).fetchone()
                if row and row[0]:
                    return int(row[0])
        return 0

    async def work() -> tuple[list[BaseException | Any], dict[int, Any], int]:
        await pgq.enqueue_async("t", {})
        outcomes: list[BaseException | Any] = []
        for _ in range(3):
            big = asyncio.create_task(large())
            if kind == "statement":  # ended while it is being written (once: ended again and
                # again, the pool's replacements would be too, and the call wait for one)
                await asyncio.sleep(0.005)
                await asyncio.to_thread(terminate_clients, dsn)
            else:
                done = threading.Event()
                big.add_done_callback(functools.partial(_set, done))
                await asyncio.to_thread(terminate_copies, done)
            try:
                outcomes.append(await big)
            except psycopg.OperationalError as exc:
                outcomes.append(exc)
        job = int(await pgq.enqueue_async("t", {}))
        return outcomes, stray_watches(), job

    try:
        outcomes, stray, job = run_closing(pgq, work)
    finally:
        pgq.close()
    assert len(outcomes) == 3 and job > 0 and stray == {}
    assert any(isinstance(o, psycopg.OperationalError) for o in outcomes)  # ended mid-way


def test_two_loops_in_two_threads_share_a_client_with_a_pool_each(dsn: str, pgq: PgQueue) -> None:
    _register(pgq)
    pools: dict[str, object] = {}
    ids: dict[str, list[int]] = {}
    errors: list[BaseException] = []
    both = threading.Barrier(2)

    def thread(name: str) -> None:
        async def work() -> None:
            await pgq.enqueue_async("t", {})
            pools[name] = pgq._pools._async_pools[asyncio.get_running_loop()]
            both.wait(PROMPT)  # both loops' pools open, in use at the same time

            async def producer() -> list[int]:
                return [int(await pgq.enqueue_async("t", {})) for _ in range(25)]

            made = await asyncio.gather(*(producer() for _ in range(20)))
            ids[name] = [job for some in made for job in some]
            assert stray_watches() == {}

        try:
            run_closing(pgq, work)
        except BaseException as exc:  # the test reads it
            errors.append(exc)

    threads = [threading.Thread(target=thread, args=(name,)) for name in ("a", "b")]
    for t in threads:
        t.start()
    for t in threads:
        t.join(PROMPT + 5)
    assert errors == [] and not any(t.is_alive() for t in threads)
    assert pools["a"] is not pools["b"]
    assert len(ids["a"]) == len(ids["b"]) == 500
    assert set(ids["a"]).isdisjoint(ids["b"])
    assert set(ids["a"]) | set(ids["b"]) <= set(_job_ids(dsn))


def test_an_applications_transaction_between_pooled_calls(dsn: str, pgq: PgQueue) -> None:
    """Enqueues in the application's own transaction (``conn=``) go with it; calls without
    ``conn=`` on the same loop at the same time commit on their own."""
    _register(pgq)

    async def work() -> tuple[list[int], list[int], list[int]]:
        pooled: list[int] = []

        async def alone() -> None:
            for _ in range(30):
                pooled.append(int(await pgq.enqueue_async("t", {})))

        async with await psycopg.AsyncConnection.connect(dsn) as app:
            others = asyncio.create_task(alone())
            kept: list[int] = []
            async with app.transaction():
                for _ in range(15):
                    kept.append(int(await pgq.enqueue_async("t", {}, conn=app)))
                    await asyncio.sleep(0)
            dropped: list[int] = []
            async with app.transaction(force_rollback=True):
                for _ in range(15):
                    dropped.append(int(await pgq.enqueue_async("t", {}, conn=app)))
                    await asyncio.sleep(0)
            await others
        assert stray_watches() == {}
        return pooled, kept, dropped

    pooled, kept, dropped = run_closing(pgq, work)
    in_table = set(_job_ids(dsn))
    assert set(pooled) | set(kept) <= in_table
    assert in_table.isdisjoint(dropped)


def test_closing_the_client_while_calls_are_in_flight(dsn: str, pgq: PgQueue) -> None:
    """Calls in flight when the client closes finish or fail with an error (none waits
    forever); the client opens a new pool for the next call and leaves no registration."""
    _register(pgq)

    async def work() -> tuple[list[BaseException | int], dict[int, Any], int]:
        await pgq.enqueue_async("t", {})
        running = [asyncio.create_task(pgq.enqueue_async("t", {})) for _ in range(50)]
        await asyncio.sleep(0)
        await pgq.aclose()
        outcomes = await asyncio.gather(*running, return_exceptions=True)
        job = int(await pgq.enqueue_async("t", {}))
        return (
            [o if isinstance(o, BaseException) else int(o) for o in outcomes],
            stray_watches(),
            job,
        )

    outcomes, stray, job = run_closing(pgq, work)
    assert len(outcomes) == 50 and job > 0 and stray == {}
    errors = [o for o in outcomes if isinstance(o, BaseException)]
    assert all(isinstance(e, psycopg.Error) for e in errors), errors


def test_notices_raised_by_an_applications_trigger_during_enqueues(dsn: str, pgq: PgQueue) -> None:
    """A notice arrives in the middle of each statement's answer (read by the loop's reader,
    handed to psycopg's notice handlers): every call still gets its own id."""
    _register(pgq)
    with psycopg.connect(dsn, autocommit=True) as admin:
        admin.execute(
            "CREATE FUNCTION public.pgq_review_notice() RETURNS trigger LANGUAGE plpgsql AS"
            " $$ BEGIN RAISE NOTICE 'job %', NEW.id; RETURN NEW; END $$"
        )
        admin.execute(
            "CREATE TRIGGER pgq_review_notice AFTER INSERT ON pgqueue.jobs"
            " FOR EACH ROW EXECUTE FUNCTION public.pgq_review_notice()"
        )
    heard: list[str] = []

    async def producer() -> list[int]:
        return [int(await pgq.enqueue_async("t", {})) for _ in range(20)]

    async def work() -> tuple[list[int], dict[int, Any]]:
        async with pgq.connection_async() as conn:  # the connection kept for the next call
            conn.add_notice_handler(lambda diag: heard.append(str(diag.message_primary)))
        made = await asyncio.gather(*(producer() for _ in range(20)))
        return [job for some in made for job in some], stray_watches()

    ids, stray = run_closing(pgq, work)
    assert len(set(ids)) == 400 and stray == {}
    assert heard and all(h.startswith("job ") for h in heard)
    assert set(ids) == set(_job_ids(dsn))
