"""Operators' reads from a streaming replica (``--read-dsn`` / ``$PGQUEUE_READ_DSN``): `pgq stats`,
`pgq status`, `pgq jobs list/show`, `pgq workers`, the dashboard and the metrics exporter read
the standby; writes (the dashboard's actions) still go to the primary.

Against Debian's PostgreSQL 15: a primary and a hot standby streaming from it. To prove where a
read went, the standby's replay is paused: jobs enqueued afterwards exist on the primary only.
"""

from __future__ import annotations

import json
import os
import re
import subprocess
from collections.abc import Iterator

import psycopg
import pytest

from pgqueue import PgQueue
from tests.dashboard_helpers import dashboard
from tests.debian_pg import Pair, replicated_pair
from tests.helpers import PGQ, ROOT, spawn_worker, wait_for
from tests.integration.test_dashboard import csrf_of, post
from tests.integration.test_metrics import scrape, value


@pytest.fixture(scope="module")
def pair() -> Iterator[Pair]:
    with replicated_pair(synchronous=False) as pair:
        yield pair


@pytest.fixture
def dsns(pair: Pair) -> Iterator[tuple[str, str]]:
    """(primary, standby) DSNs of a fresh pgqueue database: 3 jobs on both, then replay paused
    and 2 more jobs on the primary only."""
    primary = pair.primary.create_pgqueue_database("replica_reads")
    standby = pair.standby.dsn("replica_reads")
    with PgQueue(primary) as pgq:
        for n in range(3):
            pgq.enqueue("replica.task", {"n": n}, queue="reads")
        with psycopg.connect(primary, autocommit=True) as conn:
            lsn = conn.execute("SELECT pg_current_wal_lsn()").fetchone()[0]
        # The standby's own maintenance database: the new one exists there only once the
        # standby replayed its creation, which this waits for.
        with psycopg.connect(pair.standby.dsn("postgres"), autocommit=True) as conn:
            wait_for(
                lambda: conn.execute(
                    "SELECT pg_last_wal_replay_lsn() >= %s::pg_lsn", (lsn,)
                ).fetchone()[0],
                message="the standby to replay the first jobs",
            )
            conn.execute("SELECT pg_wal_replay_pause()")
        for n in range(3, 5):
            pgq.enqueue("replica.task", {"n": n}, queue="reads")
    try:
        yield primary, standby
    finally:
        with psycopg.connect(pair.standby.dsn("postgres"), autocommit=True) as conn:
            conn.execute("SELECT pg_wal_replay_resume()")


def pgq_cli(*args: str, env: dict[str, str] | None = None) -> subprocess.CompletedProcess[str]:
    environ = {k: v for k, v in os.environ.items() if not k.startswith("PGQUEUE_")}
    environ.update(env or {})
    return subprocess.run(
        [PGQ, *args], check=False, cwd=ROOT, env=environ, capture_output=True, text=True, timeout=60
    )


def ready_in(output: str) -> int:
    rows = json.loads(output)
    return next(row["ready"] for row in rows if row["queue"] == "reads")


def test_stats_jobs_and_status_read_the_replica(dsns):
    primary, standby = dsns
    assert ready_in(pgq_cli("stats", "--dsn", primary, "--json").stdout) == 5
    replica = pgq_cli("stats", "--dsn", primary, "--read-dsn", standby, "--json")
    assert replica.returncode == 0, replica.stderr
    assert ready_in(replica.stdout) == 3
    # The environment variable, as deployments set it.
    env = {"PGQUEUE_DSN": primary, "PGQUEUE_READ_DSN": standby}
    assert ready_in(pgq_cli("stats", "--json", env=env).stdout) == 3

    listed = pgq_cli("jobs", "list", "--queue", "reads", "--json", env=env)
    assert len(json.loads(listed.stdout)) == 3
    newest = max(
        row["id"] for row in json.loads(pgq_cli("jobs", "list", "--json", "--dsn", primary).stdout)
    )
    assert pgq_cli("jobs", "show", str(newest), "--json", "--dsn", primary).returncode == 0
    missing = pgq_cli("jobs", "show", str(newest), "--json", env=env)
    assert missing.returncode == 1 and "not found" in missing.stderr

    status = pgq_cli("status", "--json", env=env)
    assert status.returncode == 0, status.stderr
    assert (
        next(q for q in json.loads(status.stdout)["queues"] if q["queue"] == "reads")["ready"] == 3
    )
    assert pgq_cli("workers", "--json", env=env).returncode == 0


def test_a_bad_read_dsn_is_one_clear_line(dsns):
    primary, _ = dsns
    result = pgq_cli("stats", "--dsn", primary, "--read-dsn", "mysql://nope")
    assert result.returncode == 1
    assert "--read-dsn" in result.stderr and "Traceback" not in result.stderr


def test_dashboard_reads_the_replica_and_writes_the_primary(dsns, tmp_path):
    primary, standby = dsns
    with dashboard(primary, "--read-dsn", standby, log=tmp_path / "dashboard.log") as board:
        status, _, body = board.request("/api/state")
        assert status == 200
        state = json.loads(body)
        assert next(q for q in state["queues"] if q["queue"] == "reads")["ready"] == 3
        # An action writes to the primary (the standby would refuse: read-only).
        with psycopg.connect(primary, autocommit=True) as conn:
            job_id = conn.execute(
                "SELECT min(id) FROM pgqueue.jobs WHERE queue = 'reads'"
            ).fetchone()[0]
            token = csrf_of(board)
            status, _, body = post(board, "cancel", {"id": job_id}, token)
            assert status == 200, body
            assert (
                conn.execute(
                    "SELECT count(*) FROM pgqueue.jobs WHERE id = %s", (job_id,)
                ).fetchone()[0]
                == 0
            )
            assert (
                conn.execute(
                    "SELECT state FROM pgqueue.job_history WHERE id = %s", (job_id,)
                ).fetchone()[0]
                == "cancelled"
            )


def test_worker_metrics_read_queue_depths_from_the_replica(dsns, tmp_path):
    primary, standby = dsns
    log = tmp_path / "worker.log"
    # The worker serves another queue: the 'reads' jobs stay where they are.
    worker = spawn_worker(
        primary,
        "--queue", "elsewhere",
        "--metrics-port", "0",
        "--metrics-host", "127.0.0.1",
        "--read-dsn", standby,
        log=log,
    )  # fmt: skip
    try:
        port = int(
            wait_for(
                lambda: re.search(r"metrics served .* port=(\d+)", log.read_text()),
                message="the metrics server",
            ).group(1)
        )
        wait_for(lambda: "worker started" in log.read_text(), message="worker start")
        samples = scrape(port)
        assert value(samples, "pgqueue_queue_depth_up") == 1
        assert value(samples, "pgqueue_queue_depth", queue="reads", state="ready") == 3
    finally:
        worker.terminate()
        worker.wait(30)
