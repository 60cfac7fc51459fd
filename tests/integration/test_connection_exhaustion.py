"""PostgreSQL refusing connections (a role's CONNECTION LIMIT reached, max_connections): workers
and producers wait with backoff, say why in one line, never crash and lose no job.

Against a private server: a least-privilege worker role (``pgq roles``) with a CONNECTION LIMIT,
whose slots other sessions take."""

from __future__ import annotations

import logging
import subprocess
import threading
import time
from collections.abc import Iterator

import psycopg
import pytest
from psycopg.conninfo import make_conninfo

from pgqueue import PgQueue
from pgqueue.db.refusals import refusal
from tests.helpers import PGQ, ROOT, spawn_worker, wait_for

LIMIT = 8  # the worker needs fewer (pool, listener, watchdog...), hogs take them all


@pytest.fixture
def limited(own_server) -> Iterator[str]:
    """The DSN of a worker role limited to LIMIT connections."""
    subprocess.run(
        [PGQ, "roles", "--apply", "--dsn", own_server.dsn,
         "--producer", "lim_producer", "--worker", "lim_worker", "--admin", "lim_admin"],
        cwd=ROOT, check=True, capture_output=True,
    )  # fmt: skip
    with psycopg.connect(own_server.dsn, autocommit=True) as conn:
        conn.execute(f"ALTER ROLE lim_worker CONNECTION LIMIT {LIMIT}")
        # The test tasks' effects ledger.
        conn.execute("GRANT ALL ON ALL TABLES IN SCHEMA public TO lim_worker")
        conn.execute("GRANT ALL ON ALL SEQUENCES IN SCHEMA public TO lim_worker")
    yield make_conninfo(own_server.dsn, user="lim_worker")


def hog(dsn: str, count: int = LIMIT) -> list[psycopg.Connection]:
    """Take ``count`` of the role's connection slots (waiting for ones to free up). An attempt
    the server leaves unanswered (seen once on a loaded machine, while the test was cutting
    the worker's connections) is given up after a few seconds and made again, not waited on
    for ever."""
    taken: list[psycopg.Connection] = []
    while len(taken) < count:
        try:
            taken.append(psycopg.connect(dsn, connect_timeout=5))
        except psycopg.OperationalError:
            time.sleep(0.05)
    return taken


def release(conns: list[psycopg.Connection]) -> None:
    for conn in conns:
        conn.close()


def done(dsn: str) -> int:
    with psycopg.connect(dsn) as conn:
        return int(conn.execute("SELECT count(*) FROM pgqueue.jobs").fetchone()[0])


def test_a_worker_started_while_no_slot_is_free_waits_and_says_why(own_server, limited, tmp_path):
    with PgQueue(own_server.dsn) as pgq:
        for n in range(20):
            pgq.enqueue("noop", {"n": n})
    hogs = hog(limited)
    log = tmp_path / "worker.log"
    worker = spawn_worker(limited, "--dsn", limited, log=log)
    try:
        wait_for(lambda: "too many connections for role" in log.read_text(), timeout=60,
                 message="the worker to say why it waits")  # fmt: skip
        time.sleep(5)  # a while of refusals: still one line about them, and alive
        assert worker.poll() is None
        text = log.read_text()
        assert text.count("too many connections for role") <= 2, text
        assert "Traceback" not in text
        release(hogs)
        wait_for(lambda: done(own_server.dsn) == 0, timeout=60, message="the jobs to run")
    finally:
        worker.terminate()
        assert worker.wait(60) == 0


def test_a_running_worker_survives_its_connections_cut_and_refused(own_server, limited, tmp_path):
    log = tmp_path / "worker.log"
    worker = spawn_worker(limited, "--dsn", limited, log=log)
    try:
        wait_for(lambda: "worker started" in log.read_text(), message="the worker to start")
        with psycopg.connect(own_server.dsn, autocommit=True) as admin:
            # Cut every connection of the worker's, and take the slots before it reconnects.
            hogs: list[psycopg.Connection] = []
            while len(hogs) < LIMIT:
                admin.execute(
                    "SELECT pg_terminate_backend(pid) FROM pg_stat_activity"
                    " WHERE usename = 'lim_worker' AND application_name LIKE 'pgqueue %'"
                )
                # One try: when the reconnecting worker takes the freed slots first, cut again
                # (waiting for a slot here waited for ever once the worker held them all).
                try:
                    hogs.append(psycopg.connect(limited, connect_timeout=5))
                except psycopg.OperationalError:
                    time.sleep(0.05)
            with PgQueue(own_server.dsn) as pgq:
                for n in range(30):
                    pgq.enqueue("noop", {"n": n})
            time.sleep(5)
            assert worker.poll() is None
            assert done(own_server.dsn) == 30  # nobody could claim them
            release(hogs)
        wait_for(lambda: done(own_server.dsn) == 0, timeout=60, message="the jobs to run")
        text = log.read_text()
        assert "refuses new connections" in text, [
            line for line in text.splitlines() if "unavailable" in line
        ]
        assert "Traceback" not in text
    finally:
        worker.terminate()
        assert worker.wait(60) == 0


def test_a_producer_waits_for_a_free_slot_with_one_line(own_server, limited, caplog):
    hogs = hog(limited)
    threading.Timer(3.0, release, (hogs,)).start()
    caplog.set_level(logging.INFO, logger="pgqueue.db")
    with PgQueue(limited) as pgq:
        started = time.monotonic()
        job = pgq.enqueue("noop", {"n": 1})  # the worker role may enqueue too
        waited = time.monotonic() - started
    assert waited >= 2.5, "the enqueue did not wait for the refusal to pass"
    warnings = [r for r in caplog.records if r.levelno == logging.WARNING]
    assert len(warnings) == 1, [r.getMessage() for r in warnings]
    assert "too many connections for role" in warnings[0].getMessage()
    assert "the role's CONNECTION LIMIT is reached" in warnings[0].getMessage()
    assert any("accepts connections again" in r.getMessage() for r in caplog.records)
    with psycopg.connect(own_server.dsn) as conn:
        found = conn.execute("SELECT count(*) FROM pgqueue.jobs WHERE id = %s", (job,))
        assert found.fetchone()[0] == 1


@pytest.mark.parametrize(
    ("message", "cause"),
    [
        ('connection failed: FATAL:  too many connections for role "app"',
         "the role's CONNECTION LIMIT is reached"),
        ("connection failed: FATAL:  sorry, too many clients already",
         "max_connections is reached"),
        ("FATAL:  remaining connection slots are reserved for non-replication superuser "
         "connections", "max_connections is reached"),
        ("FATAL:  the database system is starting up", "the server is starting up"),
    ],
)  # fmt: skip
def test_refusals_are_named(message, cause):
    explained = refusal(psycopg.OperationalError(message))
    assert explained is not None and cause in explained
    assert refusal(psycopg.OperationalError("password authentication failed")) is None
