"""Group commit: concurrent ``enqueue`` calls of one client without ``conn=`` (threads, or tasks
on one event loop) that arrive while a commit is in flight are written together, each caller
getting its own id (or its own error) once its row committed.

The first commit is held back by a ``SHARE`` lock on ``pgqueue.jobs`` taken by the test, so the
other callers arrive while it is in flight; the rows' ``xmin`` says how many transactions wrote
them.
"""

from __future__ import annotations

import asyncio
import threading
import time
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from functools import partial
from typing import Any

import psycopg
import pytest

from pgqueue import JobId, PgQueue, QueueFullError

CALLERS = 8


def transactions(conn: psycopg.Connection[Any]) -> int:
    """How many transactions wrote the jobs there are."""
    return conn.execute("SELECT count(DISTINCT xmin::text) FROM pgqueue.jobs").fetchone()[0]


def rows(conn: psycopg.Connection[Any]) -> dict[int, Any]:
    return dict(conn.execute("SELECT id, args FROM pgqueue.jobs").fetchall())


def waiting_on_lock(conn: psycopg.Connection[Any]) -> int:
    return conn.execute(
        "SELECT count(*) FROM pg_stat_activity WHERE wait_event_type = 'Lock'"
        " AND datname = current_database()"
    ).fetchone()[0]


@contextmanager
def held_inserts(dsn: str, watcher: psycopg.Connection[Any], *, blocked: int = 1) -> Iterator[None]:
    """Inserts into pgqueue.jobs wait inside the block; it ends once ``blocked`` statements wait
    for the lock (and a moment more, for the other callers to queue up behind them), checking
    that no more came: the others wait in the client, not each in a statement of its own."""
    with psycopg.connect(dsn) as holder:
        holder.execute("LOCK TABLE pgqueue.jobs IN SHARE MODE")
        yield
        deadline = time.monotonic() + 10
        while waiting_on_lock(watcher) < blocked:
            assert time.monotonic() < deadline, "no insert came to wait for the lock"
            time.sleep(0.01)
        time.sleep(0.3)
        assert waiting_on_lock(watcher) == blocked
        holder.rollback()


def start_threads(calls: Sequence[Callable[[], Any]]) -> Callable[[], list[Any]]:
    """Start the calls in threads of their own, together; the returned function joins them and
    gives what each returned or raised."""
    results: list[Any] = [None] * len(calls)

    def run(index: int) -> None:
        try:
            results[index] = calls[index]()
        except Exception as exc:
            results[index] = exc

    threads = [threading.Thread(target=run, args=(i,)) for i in range(len(calls))]
    for thread in threads:
        thread.start()

    def join() -> list[Any]:
        for thread in threads:
            thread.join(30)
            assert not thread.is_alive()
        return results

    return join


@pytest.fixture
def app(dsn: str) -> Iterator[PgQueue]:
    queue = PgQueue(dsn, check_task_names=False, group_commit=True)
    yield queue
    queue.close()


def threads_enqueue(
    app: PgQueue, dsn: str, conn: psycopg.Connection[Any], calls: Sequence[Callable[[], Any]]
) -> list[Any]:
    with held_inserts(dsn, conn):
        join = start_threads(calls)
    return join()


def test_threads_arriving_together_commit_in_fewer_transactions(app, dsn, conn):
    calls = [lambda n=n: app.enqueue("t", {"n": n}) for n in range(CALLERS)]
    ids = threads_enqueue(app, dsn, conn, calls)
    written = rows(conn)
    assert sorted(written) == sorted(ids)
    # Each caller got its own job's id.
    assert [written[job_id]["n"] for job_id in ids] == list(range(CALLERS))
    assert all(job_id.created for job_id in ids)
    # The first commit alone (held by the lock), the others together behind it.
    assert transactions(conn) == 2


def test_without_group_commit_every_call_is_its_own_transaction(dsn, conn):
    app = PgQueue(dsn, check_task_names=False, group_commit=False)
    try:
        calls = [lambda n=n: app.enqueue("t", {"n": n}) for n in range(CALLERS)]
        with held_inserts(dsn, conn, blocked=CALLERS):
            join = start_threads(calls)
        ids = join()
    finally:
        app.close()
    assert sorted(rows(conn)) == sorted(ids)
    assert transactions(conn) == CALLERS


def test_tasks_arriving_together_commit_in_fewer_transactions(app, dsn, conn):
    async def main() -> list[Any]:
        calls = [app.enqueue_async("t", {"n": n}) for n in range(CALLERS)]
        gathered = asyncio.gather(*calls)
        await asyncio.to_thread(release_when_blocked, dsn, conn, holder)
        return await gathered

    with psycopg.connect(dsn) as holder:
        holder.execute("LOCK TABLE pgqueue.jobs IN SHARE MODE")
        ids = asyncio.run(with_aclose(app, main()))
    written = rows(conn)
    assert [written[job_id]["n"] for job_id in ids] == list(range(CALLERS))
    assert transactions(conn) == 2


def release_when_blocked(
    dsn: str, conn: psycopg.Connection[Any], holder: psycopg.Connection[Any]
) -> None:
    deadline = time.monotonic() + 10
    while waiting_on_lock(conn) < 1:
        assert time.monotonic() < deadline
        time.sleep(0.01)
    time.sleep(0.3)
    assert waiting_on_lock(conn) == 1
    holder.rollback()


async def with_aclose(app: PgQueue, work: Any) -> Any:
    try:
        return await work
    finally:
        await app.aclose()


def test_one_call_alone_commits_at_once(app, conn):
    # Nothing else queued: written at once, by the plain single-job statement.
    job_id = app.enqueue("t", {"n": 1})
    assert rows(conn) == {job_id: {"n": 1}}


def test_a_caller_returns_only_once_its_row_is_visible_elsewhere(app, dsn):
    seen: list[bool] = []

    def call(n: int) -> None:
        job_id = app.enqueue("t", {"n": n})
        with psycopg.connect(dsn, autocommit=True) as other:
            found = other.execute("SELECT 1 FROM pgqueue.jobs WHERE id = %s", [job_id]).fetchone()
        seen.append(found is not None)

    for _ in range(3):
        threads = [threading.Thread(target=call, args=(n,)) for n in range(CALLERS)]
        for thread in threads:
            thread.start()
        for thread in threads:
            thread.join(30)
    assert seen == [True] * (3 * CALLERS)


def test_a_job_the_database_refuses_fails_alone(app, dsn, conn):
    conn.execute(
        """
        CREATE FUNCTION public.refuse_bad() RETURNS trigger LANGUAGE plpgsql AS $$
        BEGIN
            IF NEW.args->>'n' = 'bad' THEN RAISE EXCEPTION 'bad job refused'; END IF;
            RETURN NEW;
        END $$;
        CREATE TRIGGER refuse_bad BEFORE INSERT ON pgqueue.jobs
            FOR EACH ROW EXECUTE FUNCTION public.refuse_bad();
        """
    )
    names: list[Any] = [0, 1, 2, "bad", 4, 5, 6, 7]
    calls = [lambda n=n: app.enqueue("t", {"n": n}) for n in names]
    results = threads_enqueue(app, dsn, conn, calls)
    [refused] = [r for r in results if isinstance(r, Exception)]
    assert isinstance(refused, psycopg.errors.RaiseException)
    assert "bad job refused" in str(refused)
    assert results.index(refused) == names.index("bad")
    written = rows(conn)
    good = [r for r in results if not isinstance(r, Exception)]
    assert sorted(written) == sorted(good)
    assert [written[job_id]["n"] for job_id in good] == [n for n in names if n != "bad"]


def test_a_keyed_job_into_a_full_queue_fails_alone(app, dsn, conn):
    app.flow.configure_queue("small", max_depth=1)
    app.enqueue("t", {"n": "first"}, queue="small")  # the queue is full now
    keys = [f"k{n}" for n in range(CALLERS)]
    calls: list[Callable[[], Any]] = [
        partial(app.enqueue, "t", {"key": key}, idempotency_key=key) for key in keys
    ]
    calls[3] = lambda: app.enqueue("t", {"key": "full"}, idempotency_key="full", queue="small")
    results = threads_enqueue(app, dsn, conn, calls)
    assert isinstance(results[3], QueueFullError)
    good = results[:3] + results[4:]
    assert all(isinstance(r, JobId) and r.created for r in good)
    written = rows(conn)
    assert [written[job_id]["key"] for job_id in good] == keys[:3] + keys[4:]
    assert "full" not in {args.get("key") for args in written.values()}


def test_keyed_jobs_return_what_single_enqueues_return(app, dsn, conn):
    held = app.enqueue("t", {"n": "held"}, idempotency_key="held")
    pending = app.enqueue("t", {"n": "old"}, idempotency_key="debounce", delay=3600)
    calls: list[Callable[[], Any]] = [
        lambda: app.enqueue("t", {"n": "again"}, idempotency_key="held"),
        lambda: app.enqueue("t", {"n": "new"}, idempotency_key="same"),
        lambda: app.enqueue("t", {"n": "new"}, idempotency_key="same"),
        partial(
            app.enqueue,
            "t",
            {"n": "replacing"},
            idempotency_key="debounce",
            on_conflict="replace_args",
        ),
        lambda: app.enqueue("t", {"n": "plain"}),
        lambda: app.enqueue("t", {"n": "keyed"}, concurrency_key="c"),
    ]
    first, same_a, same_b, replacing, plain, keyed = threads_enqueue(app, dsn, conn, calls)
    assert (first, first.created) == (held, False)
    assert same_a == same_b and {same_a.created, same_b.created} == {True, False}
    assert (replacing, replacing.created, replacing.replaced) == (pending, False, True)
    assert plain.created and keyed.created
    written = rows(conn)
    assert written[pending] == {"n": "replacing"}
    assert written[held] == {"n": "held"}
    assert len(written) == 5  # held, debounce, same, plain, keyed


def test_a_cancelled_task_loses_or_duplicates_no_other_job(app, dsn, conn):
    async def main() -> list[Any]:
        tasks = [asyncio.ensure_future(app.enqueue_async("t", {"n": n})) for n in range(CALLERS)]
        await asyncio.to_thread(wait_blocked, conn)
        await asyncio.sleep(0.2)  # the others queue behind the first
        assert waiting_on_lock(conn) == 1
        for index in (0, 3, 5):  # the first (in its statement) and two waiting ones
            tasks[index].cancel()
        await asyncio.sleep(0.05)
        holder.rollback()
        return await asyncio.gather(*tasks, return_exceptions=True)

    with psycopg.connect(dsn) as holder:
        holder.execute("LOCK TABLE pgqueue.jobs IN SHARE MODE")
        results = asyncio.run(with_aclose(app, main()))
    cancelled = [n for n, r in enumerate(results) if isinstance(r, asyncio.CancelledError)]
    assert cancelled == [0, 3, 5]
    ns = sorted(args["n"] for args in rows(conn).values())
    written = rows(conn)
    for n, job_id in enumerate(results):
        if n not in cancelled:
            assert written[job_id] == {"n": n}
    # Every other job exactly once; the cancelled waiting ones never written.
    assert [n for n in ns if n not in (0,)] == [1, 2, 4, 6, 7]


def wait_blocked(conn: psycopg.Connection[Any]) -> None:
    deadline = time.monotonic() + 10
    while waiting_on_lock(conn) < 1:
        assert time.monotonic() < deadline
        time.sleep(0.01)


def test_group_commit_is_on_by_default(dsn):
    with PgQueue(dsn) as queue:
        assert queue.group_commit


def test_producers_in_a_loop_each_get_their_own_jobs(app, conn):
    # Callers that come back together after each commit (the leader gathers them).
    def producer(n: int) -> list[Any]:
        return [(n, k, app.enqueue("t", {"n": n, "k": k})) for k in range(5)]

    threads = start_threads([partial(producer, n) for n in range(CALLERS)])()

    async def tasks() -> list[Any]:
        async def producer_async(n: int) -> list[Any]:
            return [(n, k, await app.enqueue_async("t", {"n": n, "k": k})) for k in range(5, 10)]

        return await asyncio.gather(*(producer_async(n) for n in range(CALLERS)))

    made = [*threads, *asyncio.run(with_aclose(app, tasks()))]
    written = rows(conn)
    returned = [job for jobs in made for job in jobs]
    assert len(written) == len(returned) == 2 * 5 * CALLERS
    assert all(written[job_id] == {"n": n, "k": k} for n, k, job_id in returned)
    assert transactions(conn) < len(written)


def test_a_connection_lost_under_a_group_fails_its_callers_and_writes_nothing_twice(app, dsn, conn):
    # The statement's outcome is unknown when its connection goes: its callers get that
    # error (as a single enqueue's caller would) and nothing is written again behind them.
    def terminate_the_waiting_one() -> None:
        deadline = time.monotonic() + 10
        while waiting_on_lock(conn) < 1:
            assert time.monotonic() < deadline
            time.sleep(0.01)
        time.sleep(0.3)  # the others queue behind it
        conn.execute(
            "SELECT pg_terminate_backend(pid) FROM pg_stat_activity"
            " WHERE wait_event_type = 'Lock' AND datname = current_database()"
        )

    with psycopg.connect(dsn) as holder:
        holder.execute("LOCK TABLE pgqueue.jobs IN SHARE MODE")
        join = start_threads([partial(app.enqueue, "t", {"n": n}) for n in range(CALLERS)])
        terminate_the_waiting_one()  # the first call, alone
        terminate_the_waiting_one()  # the batch of the seven queued behind it
        results = join()
        holder.rollback()
    assert all(isinstance(r, psycopg.OperationalError) for r in results), results
    assert rows(conn) == {}
    assert app.enqueue("t", {"n": "after"})  # the group goes on
