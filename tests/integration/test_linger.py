"""A worker that sees work arriving fast polls for a while instead of registering for a NOTIFY
(``pgqueue/worker/linger.py``): producers do not notify meanwhile, and once the lingering ends
the worker registers and a job wakes it by NOTIFY again."""

from __future__ import annotations

import psycopg
import pytest

from pgqueue.worker.linger import Linger
from tests.helpers import ledger, scalar, thread_worker, wait_for
from tests.integration import worker_app

APP = worker_app.pgq


@pytest.fixture
def listener(dsn):
    with psycopg.connect(dsn, autocommit=True) as conn:
        conn.execute("LISTEN pgqueue_jobs")
        yield conn


def notifications(listener: psycopg.Connection[tuple[object, ...]], timeout: float) -> int:
    return sum(1 for _ in listener.notifies(timeout=timeout))


def idle_workers(dsn: str) -> int:
    return int(scalar(dsn, "SELECT count(*) FROM pgqueue.idle_workers"))


def ended(dsn: str) -> set[int]:
    return {row[0] for row in ledger(dsn, "end")}


def test_a_worker_lingers_after_a_backlog_then_registers(app_dsn, pgq, listener, monkeypatch):
    monkeypatch.setattr(Linger, "window", 3600.0)  # it lingers until the test ends it
    # poll_interval 600: a job that runs within seconds was found by lingering or a NOTIFY.
    with thread_worker(APP, app_dsn, concurrency=2, poll_interval=600):
        wait_for(lambda: idle_workers(app_dsn) == 1, message="the idle worker to register")
        backlog = pgq.enqueue_many([pgq.spec("noop", {"n": n}, {}) for n in range(10)])
        wait_for(lambda: ended(app_dsn) >= set(backlog), message="the backlog to run")
        notifications(listener, timeout=0.2)  # the backlog's own
        assert idle_workers(app_dsn) == 0  # a claim came back full: lingering since

        during = pgq.enqueue("noop", {"n": 10})
        wait_for(lambda: during in ended(app_dsn), timeout=10, message="the job to be found")
        # Nobody was registered, so the producer did not notify: a poll found the job.
        assert notifications(listener, timeout=0.2) == 0
        assert idle_workers(app_dsn) == 0

        monkeypatch.setattr(Linger, "window", 0.05)
        wait_for(lambda: idle_workers(app_dsn) == 1, message="the worker to register")
        after = pgq.enqueue("noop", {"n": 11})
        assert notifications(listener, timeout=5) == 1
        wait_for(lambda: after in ended(app_dsn), timeout=10, message="the NOTIFY to wake it")


def test_notifications_from_several_producers_make_a_worker_linger(app_dsn, pgq, monkeypatch):
    monkeypatch.setattr(Linger, "window", 3600.0)
    monkeypatch.setattr(Linger, "notify_rate", 0.01)  # any notify_count notifications are fast
    # 50 slots: no claim comes back full, so only the notifications can start a linger.
    with thread_worker(APP, app_dsn, concurrency=50, poll_interval=600):
        wait_for(lambda: idle_workers(app_dsn) == 1, message="the idle worker to register")
        with psycopg.connect(app_dsn, autocommit=True) as producer:
            alone = [
                pgq.enqueue("noop", {"n": n}, conn=producer) for n in range(Linger.notify_count + 5)
            ]
        wait_for(lambda: ended(app_dsn) >= set(alone), message="the first jobs to run")
        # One producer never waits for another's notifying commit: the worker still waits
        # for its NOTIFYs (a linger would have unregistered it for the whole hour).
        assert idle_workers(app_dsn) == 1

        with (
            psycopg.connect(app_dsn, autocommit=True) as first,
            psycopg.connect(app_dsn, autocommit=True) as second,
        ):
            pair = [
                pgq.enqueue("noop", {"n": n}, conn=(first, second)[n % 2])
                for n in range(Linger.notify_count)
            ]
        wait_for(lambda: idle_workers(app_dsn) == 0, message="the worker to stop registering")
        wait_for(lambda: ended(app_dsn) >= set(pair), message="the second jobs to run")
