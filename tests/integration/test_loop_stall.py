"""A handler that blocks the event loop does not cost its worker the leases it holds.

Reproduced from outside before the watchdog: an ``async def`` calling ``time.sleep(9)`` under
``--lease 3s`` with two workers started three times (every attempt burned): the blocked worker's
heartbeats stopped, the other worker's reaper took the job back, and a second copy ran while the
first was still running. Now the watchdog thread extends the blocked worker's leases and says
who blocked the loop.
"""

from __future__ import annotations

from pgqueue import PgQueue
from tests.helpers import ledger, scalar, spawn_fleet, stop_workers, wait_for
from tests.integration import worker_app


def test_a_handler_blocking_the_loop_for_three_leases_runs_once(app_dsn, tmp_path):
    pgq = PgQueue(app_dsn)
    job = pgq.enqueue(worker_app.blocks_the_loop, {"seconds": 3.5})
    # Two workers with one-second leases, each running the reaper every half second: without
    # the watchdog the idle one reclaims the job after about a second.
    workers = spawn_fleet(app_dsn, 2, "--lease", "1s", log_dir=tmp_path)
    try:
        wait_for(lambda: ledger(app_dsn, "end"), timeout=60, message="the job finished")
        wait_for(
            lambda: scalar(app_dsn, "SELECT count(*) FROM pgqueue.jobs") == 0,
            timeout=30,
            message="the job was acked",
        )
    finally:
        stop_workers(workers)
        pgq.close()
    starts = ledger(app_dsn, "start")
    assert [(row[0], row[1]) for row in starts] == [(job, 1)], "ran more than once"
    logs = "".join(path.read_text() for path in sorted(tmp_path.glob("w*.log")))
    assert "event loop blocked for" in logs
    assert f"by task blocks_the_loop (job {job})" in logs
    assert "time.sleep(seconds)" in logs  # the stack of the blocked loop
    assert "event loop running again after a stall" in logs
    assert "lease lost" not in logs


def test_a_stall_is_counted_for_the_metrics(app_dsn):
    """In-process: the observer hook (and so the Prometheus counter) sees each stall once."""
    from pgqueue.worker.metrics import WorkerMetrics
    from tests.helpers import ThreadWorker

    pgq = PgQueue(app_dsn)
    pgq.enqueue(worker_app.blocks_the_loop, {"seconds": 1.5})
    pgq.enqueue(worker_app.blocks_the_loop, {"seconds": 1.5})
    metrics = WorkerMetrics()
    worker = ThreadWorker(worker_app.pgq, app_dsn, lease=0.6, concurrency=1)
    worker.worker.observer.observers.append(metrics)
    worker.start()
    try:
        wait_for(lambda: len(ledger(app_dsn, "end")) == 2, timeout=60, message="both ran")
    finally:
        worker.stop()
        pgq.close()
    assert metrics.registry.get_sample_value("pgqueue_event_loop_stalls_total") == 2
    assert worker.worker.stats.loop_stalls == 2
    assert len(ledger(app_dsn, "start")) == 2
