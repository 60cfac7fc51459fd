"""The connection the client keeps for its next sync call (:mod:`pgqueue.client.kept`).

A sync single enqueue took a connection from psycopg_pool and gave it back at every call (its
locks, bookkeeping and three logging calls: about a fifth of the call's client CPU). The client
now keeps the connection it last gave back for its next call, as it does for an async pool:
taken at once when nothing arrived on its socket, checked with a round trip otherwise (a
connection the server ended is replaced), given back to the pool after ``KEEP_SECONDS`` (its
``max_lifetime`` applies), to a thread waiting for the pool, and when the client closes.
"""

from __future__ import annotations

import threading
import time
from typing import Any

import psycopg
import pytest
from psycopg_pool import ConnectionPool

from pgqueue import PgQueue
from pgqueue.client import kept, pools
from tests.helpers import counting, terminate_clients

CALLS = 20


def _register(pgq: PgQueue) -> None:
    @pgq.task(name="t")
    def t() -> None: ...


@pytest.mark.parametrize("group_commit", [True, False], ids=["group-commit", "one-by-one"])
def test_a_sync_single_enqueue_goes_through_none_of_the_pools_code(
    dsn: str, monkeypatch: pytest.MonkeyPatch, group_commit: bool
) -> None:
    pgq = PgQueue(dsn, group_commit=group_commit)
    _register(pgq)
    try:
        pgq.enqueue("t", {})
        with (
            counting(monkeypatch, ConnectionPool, "getconn") as taken,
            counting(monkeypatch, ConnectionPool, "putconn") as given,
        ):
            for _ in range(CALLS):
                pgq.enqueue("t", {})
    finally:
        pgq.close()
    assert (taken[0], given[0]) == (0, 0)  # (CALLS each before)


def test_a_kept_sync_connection_goes_back_to_the_pool_after_a_while(
    pgq: PgQueue, monkeypatch: pytest.MonkeyPatch
) -> None:
    """So that the pool's own rules (max_lifetime, drain, shrinking) still apply to it."""
    _register(pgq)
    monkeypatch.setattr(kept, "KEEP_SECONDS", 0.0)
    pgq.enqueue("t", {})
    with counting(monkeypatch, ConnectionPool, "putconn") as given:
        for _ in range(CALLS):
            pgq.enqueue("t", {})
    assert given[0] == CALLS


def test_the_pools_max_lifetime_still_ends_a_kept_connection(
    dsn: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    class ShortLived(ConnectionPool):
        def __init__(self, *args: Any, **kwargs: Any) -> None:
            super().__init__(*args, **kwargs, max_lifetime=0.5)

    monkeypatch.setattr(pools, "ConnectionPool", ShortLived)
    pgq = PgQueue(dsn, pool_size=1)
    _register(pgq)
    try:
        with pgq.connection() as conn:
            first = conn.info.backend_pid
        deadline = time.monotonic() + 2 * (kept.KEEP_SECONDS + 0.5)
        pids = set()
        while time.monotonic() < deadline:  # calls all along: never idle, never a new pool
            pgq.enqueue("t", {})
            with pgq.connection() as conn:
                pids.add(conn.info.backend_pid)
            time.sleep(0.01)
    finally:
        pgq.close()
    assert pids - {first}


@pytest.mark.parametrize("group_commit", [True, False], ids=["group-commit", "one-by-one"])
def test_a_kept_sync_connection_the_server_ended_is_replaced(dsn: str, group_commit: bool) -> None:
    pgq = PgQueue(dsn, pool_size=1, group_commit=group_commit)
    _register(pgq)
    try:
        jobs = [int(pgq.enqueue("t", {}))]
        for _ in range(3):
            assert terminate_clients(dsn) >= 1
            time.sleep(0.1)
            jobs.append(int(pgq.enqueue("t", {})))
    finally:
        pgq.close()
    assert len(set(jobs)) == 4


def test_a_notification_on_the_idle_kept_sync_connection_is_read_by_the_next_call(
    dsn: str, pgq: PgQueue
) -> None:
    _register(pgq)
    with pgq.connection() as conn:
        conn.execute("LISTEN pgq_review")
    for _ in range(3):
        with psycopg.connect(dsn, autocommit=True) as other:
            other.execute("NOTIFY pgq_review")
        time.sleep(0.05)
        assert pgq.enqueue("t", {}) > 0


def test_a_thread_waiting_for_the_pool_gets_the_connection_another_gives_back(
    dsn: str,
) -> None:
    """With every connection out, a thread waiting in the pool's getconn is never left
    waiting while a connection sits kept: it is given back to the pool instead."""
    pgq = PgQueue(dsn, pool_size=1, group_commit=False)
    _register(pgq)
    pgq.enqueue("t", {})
    got: list[float] = []

    def wait_for_the_pool() -> None:
        started = time.monotonic()
        with pgq.connection() as conn:
            conn.execute("SELECT 1")
        got.append(time.monotonic() - started)

    try:
        with pgq.connection() as held:  # the only connection: the thread waits for it
            waiter = threading.Thread(target=wait_for_the_pool)
            waiter.start()
            time.sleep(0.2)
            held.execute("SELECT 1")
        waiter.join(10)
        assert pgq.enqueue("t", {}) > 0
    finally:
        pgq.close()
    assert got and got[0] < 5


def test_closing_the_client_closes_its_kept_connection(dsn: str) -> None:
    pgq = PgQueue(dsn, pool_size=1)
    _register(pgq)
    pgq.enqueue("t", {})
    pool = pgq._pools._pool
    assert pool is not None
    with pgq.connection() as conn:
        last = conn
    pgq.close()
    assert last.closed
    assert pgq.enqueue("t", {}) > 0  # a closed client's next call opens a pool again
    pgq.close()
