"""Producers notify only while some worker waits for a notification (migration 0008)."""

from __future__ import annotations

import time

import psycopg
import pytest

from tests.helpers import ledger, scalar, thread_worker, wait_for
from tests.integration import worker_app

APP = worker_app.pgq


def notified(listener: psycopg.Connection[tuple[object, ...]], timeout: float = 0.3) -> list[str]:
    return [n.payload for n in listener.notifies(timeout=timeout, stop_after=1)]


@pytest.fixture
def listener(dsn):
    with psycopg.connect(dsn, autocommit=True) as conn:
        conn.execute("LISTEN pgqueue_jobs")
        yield conn


def idle_workers(dsn: str) -> int:
    return scalar(dsn, "SELECT count(*) FROM pgqueue.idle_workers")


def test_enqueue_notifies_only_while_a_worker_is_registered_idle(dsn, pgq, listener):
    pgq.enqueue("noop", {}, queue="q1")
    assert notified(listener) == []  # nobody waits: no NOTIFY, no commit lock
    with psycopg.connect(dsn, autocommit=True) as conn:
        conn.execute(
            "INSERT INTO pgqueue.idle_workers (worker_id)"
            " VALUES ('00000000-0000-0000-0000-0000000000aa')"
        )
    pgq.enqueue("noop", {}, queue="q2")
    assert notified(listener, timeout=5) == ["q2"]


def test_a_producer_that_is_not_read_committed_always_notifies(dsn, pgq, listener):
    with psycopg.connect(dsn) as conn:
        conn.isolation_level = psycopg.IsolationLevel.REPEATABLE_READ
        pgq.enqueue("noop", {}, queue="rr", conn=conn)
        conn.commit()
    assert notified(listener, timeout=5) == ["rr"]


def test_workers_register_while_idle_and_not_while_busy(app_dsn, pgq):
    with thread_worker(APP, app_dsn, concurrency=2, poll_interval=0.2):
        wait_for(lambda: idle_workers(app_dsn) == 1, message="the idle worker to register")
        pgq.enqueue_many([pgq.spec("async_sleep", {"seconds": 1.0}, {}) for _ in range(12)])
        wait_for(lambda: idle_workers(app_dsn) == 0, message="the busy worker to unregister")
        wait_for(lambda: idle_workers(app_dsn) == 1, timeout=30, message="idle again")
    assert idle_workers(app_dsn) == 0  # a stopped worker unregisters


def test_a_job_committed_while_the_worker_goes_idle_is_not_missed(app_dsn, pgq):
    """The producer read idle_workers (empty: no NOTIFY) and has not committed when the worker
    registers and claims once more; the handshake holds the worker to short polls until that
    transaction ends, so the job starts at once, not at the next 10-minute poll."""
    with psycopg.connect(app_dsn) as producer:
        job = pgq.enqueue("noop", {"n": 1}, conn=producer)  # transaction left open
        with thread_worker(APP, app_dsn, poll_interval=600):
            wait_for(lambda: idle_workers(app_dsn) == 1, message="the worker to register")
            time.sleep(0.5)  # the worker is idle now, polling for the handshake
            assert ledger(app_dsn, "end") == []
            producer.commit()
            committed = time.monotonic()
            wait_for(lambda: ledger(app_dsn, "end"), timeout=5, message="the job to run")
            assert time.monotonic() - committed < 2.0
    assert [row[0] for row in ledger(app_dsn, "end")] == [job]


def test_heartbeats_sweep_the_rows_of_workers_that_died_idle(app_dsn):
    dead = "00000000-0000-0000-0000-0000000000dd"
    with psycopg.connect(app_dsn, autocommit=True) as conn:
        conn.execute("INSERT INTO pgqueue.idle_workers (worker_id) VALUES (%s)", (dead,))
    with thread_worker(APP, app_dsn, lease=1.5):
        wait_for(
            lambda: (
                not scalar(
                    app_dsn,
                    "SELECT count(*) FROM pgqueue.idle_workers WHERE worker_id = %s",
                    (dead,),
                )
            ),
            message="the dead worker's row to be swept",
        )
        wait_for(lambda: idle_workers(app_dsn) == 1, message="the live worker stays registered")
