"""The database goes away under a running worker: it waits, reconnects and carries on."""

from __future__ import annotations

import signal
import time

import pytest

from pgqueue import PgQueue
from tests.helpers import ledger, scalar, spawn_worker, wait_for

pytestmark = pytest.mark.slow


def test_worker_survives_postgres_being_stopped_and_started(own_server, tmp_path):
    pgq = PgQueue(own_server.dsn)
    jobs = 300
    ids = pgq.enqueue_many([pgq.spec("async_sleep", {"seconds": 0.02}, {}) for _ in range(jobs)])
    pgq.close()
    log = tmp_path / "worker.log"
    worker = spawn_worker(own_server.dsn, "--concurrency", "4", "--lease", "5s", log=log)
    try:
        wait_for(lambda: len(ledger(own_server.dsn, "end")) >= 40, message="some progress")
        own_server.stop("fast")
        time.sleep(3)
        assert worker.poll() is None, "the worker exited while the database was down"
        own_server.start()
        wait_for(
            lambda: {r[0] for r in ledger(own_server.dsn, "end")} >= set(ids),
            timeout=90,
            message="every job completed after the outage",
        )
        assert worker.poll() is None
        wait_for(
            lambda: scalar(own_server.dsn, "SELECT count(*) FROM pgqueue.jobs") == 0,
            timeout=30,
            message="hot table drained",
        )
        assert scalar(own_server.dsn, "SELECT count(*) FROM pgqueue.dead_letters") == 0
    finally:
        worker.send_signal(signal.SIGTERM)
        assert worker.wait(30) == 0
    text = log.read_text()
    assert "database unavailable" in text
