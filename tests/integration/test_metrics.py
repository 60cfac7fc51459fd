"""`pgq work --metrics-port`: Prometheus metrics scraped over HTTP from a real worker process."""

from __future__ import annotations

import re
import signal
import urllib.request

from prometheus_client.parser import text_string_to_metric_families

from pgqueue.worker.metrics import MetricsServer
from tests.helpers import spawn_worker, wait_for
from tests.integration import worker_app


def scrape(port: int) -> dict[tuple[str, tuple[tuple[str, str], ...]], float]:
    with urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=10) as response:
        text = response.read().decode()
    return {
        (sample.name, tuple(sorted(sample.labels.items()))): sample.value
        for family in text_string_to_metric_families(text)
        for sample in family.samples
    }


def value(samples, name: str, **labels: str) -> float:
    return samples.get((name, tuple(sorted(labels.items()))), 0.0)


def test_worker_metrics_move_with_the_work(app_dsn, conn, tmp_path):
    # worker_app.pgq knows the tasks' settings (always_fails: 3 attempts). It is shared by the
    # tests of this process, so its jobs go through this test's connection, not its pool (opened
    # on whichever test's database used it first).
    pgq = worker_app.pgq
    log = tmp_path / "worker.log"
    worker = spawn_worker(app_dsn, "--metrics-port", "0", "--metrics-host", "127.0.0.1", log=log)
    try:
        port = int(
            wait_for(
                lambda: re.search(r"metrics served .* port=(\d+)", log.read_text()),
                message="the metrics server",
            ).group(1)
        )
        wait_for(lambda: "worker started" in log.read_text(), message="worker start")
        before = scrape(port)
        assert value(before, "pgqueue_queue_depth_up") == 1
        assert value(before, "pgqueue_jobs_succeeded_total", queue="default", task="noop") == 0

        # Jobs in a queue no worker serves: the depth gauges see them.
        pgq.enqueue("noop", queue="nobody", delay=0, conn=conn)
        pgq.enqueue("noop", queue="nobody", conn=conn)
        pgq.enqueue("noop", queue="nobody", delay=3600, conn=conn)
        for n in range(3):
            pgq.enqueue("noop", {"n": n}, conn=conn)
        pgq.enqueue("always_fails", conn=conn)  # 3 attempts: 2 retried, then dead

        def finished():
            s = scrape(port)
            done = (
                value(s, "pgqueue_jobs_succeeded_total", queue="default", task="noop") == 3
                and value(s, "pgqueue_jobs_dead_total", queue="default", task="always_fails") == 1
                # (queue gauges are re-read at most once a second)
                and value(s, "pgqueue_queue_depth", queue="nobody", state="ready") == 2
            )
            return s if done else None

        after = wait_for(finished, timeout=60, interval=0.3, message="the counters to move")
        task = {"queue": "default", "task": "always_fails"}
        assert value(after, "pgqueue_jobs_claimed_total", queue="default", task="noop") == 3
        assert value(after, "pgqueue_jobs_claimed_total", **task) == 3
        assert value(after, "pgqueue_jobs_failed_total", **task) == 3
        assert value(after, "pgqueue_jobs_retried_total", **task) == 2
        assert value(after, "pgqueue_job_duration_seconds_count", queue="default", task="noop") == 3
        assert value(after, "pgqueue_queue_depth", queue="nobody", state="ready") == 2
        assert value(after, "pgqueue_queue_depth", queue="nobody", state="scheduled") == 1
        assert value(after, "pgqueue_queue_oldest_ready_age_seconds", queue="nobody") > 0
        assert value(after, "pgqueue_queue_depth", queue="default", state="ready") == 0
    finally:
        worker.send_signal(signal.SIGTERM)
        assert worker.wait(30) == 0


def test_queue_gauges_cost_one_query_per_scrape_whatever_the_number_of_queues(dsn, pgq):
    for n in range(6):
        pgq.enqueue("t", queue=f"q{n}")
    server = MetricsServer(dsn, 0, "127.0.0.1")
    try:
        server.depths.max_age = 0.0  # no reuse between scrapes, for the count below
        before = server.depths.queries
        samples = scrape(server.port)
        assert server.depths.queries == before + 1
        for n in range(6):
            assert value(samples, "pgqueue_queue_depth", queue=f"q{n}", state="ready") == 1
        pgq.enqueue("t", queue="q0")
        assert value(scrape(server.port), "pgqueue_queue_depth", queue="q0", state="ready") == 2
        assert server.depths.queries == before + 2
    finally:
        server.close()
