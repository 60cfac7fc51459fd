"""A client made before a fork works in the children (gunicorn ``--preload``, a
multiprocessing pool forked from a Django process): each child opens connections of its own on
its first call, and never touches the ones it inherited, which are the parent's (a statement of
a child on such a socket would mix with the parent's, and a close would end the parent's
session)."""

from __future__ import annotations

import asyncio
import os
import threading
import time
import warnings
from collections.abc import Callable

import psycopg

from pgqueue import PgQueue

JOBS = 150


def _fork(child: Callable[[], None]) -> int:
    """Fork (as a pre-forking server does: the process has threads, the pool's); the child
    runs ``child`` and exits 0 when it returned, 1 when it raised."""
    with warnings.catch_warnings():
        # Python 3.12+ warns that forking a multi-threaded process may deadlock the child:
        # what pgqueue must survive (its pool's threads are there).
        warnings.simplefilter("ignore", DeprecationWarning)
        pid = os.fork()
    if pid == 0:  # pragma: no cover - the child
        code = 1
        try:
            child()
            code = 0
        except BaseException as exc:
            print(f"child {os.getpid()}: {exc!r}", flush=True)
        finally:
            os._exit(code)
    return pid


def _wait(pid: int, timeout: float = 60.0) -> int:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        done, status = os.waitpid(pid, os.WNOHANG)
        if done:
            return os.waitstatus_to_exitcode(status)
        time.sleep(0.05)
    os.kill(pid, 9)
    os.waitpid(pid, 0)
    raise AssertionError(f"child {pid} did not end within {timeout} s")


def _backend(pgq: PgQueue) -> int:
    with pgq.connection() as conn:
        row = conn.execute("SELECT pg_backend_pid()").fetchone()
    assert row is not None
    return int(row[0])


def _jobs(dsn: str, queue: str) -> int:
    with psycopg.connect(dsn) as conn:
        row = conn.execute(
            "SELECT count(*) FROM pgqueue.jobs WHERE queue = %s", (queue,)
        ).fetchone()
    assert row is not None
    return int(row[0])


def test_children_forked_after_the_client_connected_use_connections_of_their_own(dsn, tmp_path):
    pgq = PgQueue(dsn)
    try:
        pgq.enqueue("t", {}, queue="parent")  # the parent's pool is open, its threads run
        parent_backend = _backend(pgq)

        def child() -> None:
            (tmp_path / f"{os.getpid()}.backend").write_text(str(_backend(pgq)))
            for _ in range(JOBS):
                pgq.enqueue("t", {}, queue="children")

        children = [_fork(child) for _ in range(2)]

        # The parent goes on enqueueing meanwhile, on its own connections.
        def parent() -> None:
            for _ in range(JOBS):
                pgq.enqueue("t", {}, queue="parent")

        writers = [threading.Thread(target=parent) for _ in range(2)]
        for writer in writers:
            writer.start()
        parent()
        for writer in writers:
            writer.join()
        assert [_wait(pid) for pid in children] == [0, 0]
        backends = {int(p.read_text()) for p in tmp_path.glob("*.backend")}
        assert len(backends) == 2 and parent_backend not in backends
        assert _jobs(dsn, "children") == 2 * JOBS
        assert _backend(pgq) == parent_backend  # the parent's session was not ended
        assert _jobs(dsn, "parent") == 1 + 3 * JOBS
    finally:
        pgq.close()


def test_a_child_forked_after_async_calls_enqueues_in_its_own_event_loop(dsn):
    pgq = PgQueue(dsn)
    try:

        async def parent() -> None:
            await pgq.enqueue_async("t", {}, queue="parent")

        asyncio.run(parent())
        pgq.enqueue("t", {}, queue="parent")

        def child() -> None:
            async def go() -> None:
                for _ in range(JOBS):
                    await pgq.enqueue_async("t", {}, queue="child")

            asyncio.run(go())
            pgq.enqueue("t", {}, queue="child")

        assert _wait(_fork(child)) == 0
        assert _jobs(dsn, "child") == JOBS + 1
        pgq.enqueue("t", {}, queue="parent")
        assert _jobs(dsn, "parent") == 3
    finally:
        pgq.close()


def test_a_child_forked_while_a_group_commit_is_in_flight_writes_its_own(dsn):
    pgq = PgQueue(dsn)
    locker = psycopg.connect(dsn)
    try:
        pgq.enqueue("t", {}, queue="parent")
        # The parent's commit in flight at the fork: a thread's enqueue waits for a table lock.
        locker.execute("LOCK TABLE pgqueue.jobs IN SHARE MODE")
        writer = threading.Thread(target=lambda: pgq.enqueue("t", {}, queue="parent"))
        writer.start()
        deadline = time.monotonic() + 30
        while not _blocked_by(dsn, locker.info.backend_pid):
            assert time.monotonic() < deadline, "the parent's enqueue never waited"
            time.sleep(0.02)

        def child() -> None:
            for _ in range(JOBS):
                pgq.enqueue("t", {}, queue="child")

        forked = _fork(child)
        locker.commit()  # the parent's commit goes on, the child's are its own
        writer.join(timeout=30)
        assert _wait(forked) == 0
        assert _jobs(dsn, "child") == JOBS and _jobs(dsn, "parent") == 2
    finally:
        locker.close()
        pgq.close()


def _blocked_by(dsn: str, pid: int) -> bool:
    with psycopg.connect(dsn, autocommit=True) as conn:
        row = conn.execute(
            "SELECT count(*) FROM pg_stat_activity WHERE %s = ANY(pg_blocking_pids(pid))", (pid,)
        ).fetchone()
    return bool(row and row[0])
