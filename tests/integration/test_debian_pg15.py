"""Against Debian's PostgreSQL 15 (installed by .ci/run): the reaper scheduled by pg_cron, and
enqueue/claim through PgBouncer in transaction pooling mode."""

from __future__ import annotations

import signal
import threading
from collections.abc import Iterator

import psycopg
import pytest
from typer.testing import CliRunner

from pgqueue import PgQueue
from pgqueue.cli import app
from tests.debian_pg import Cluster, pg15_cluster, pgbouncer
from tests.helpers import ledger, scalar, spawn_worker, wait_for
from tests.integration import worker_app

OPS_APP = "tests.integration.ops_app:pgq"


@pytest.fixture(scope="module")
def pg15() -> Iterator[Cluster]:
    with pg15_cluster() as cluster:
        yield cluster


@pytest.fixture
def pg15_dsn(pg15: Cluster, monkeypatch: pytest.MonkeyPatch) -> Iterator[str]:
    dsn = pg15.create_pgqueue_database("pgqueue_app")
    monkeypatch.setenv("PGQUEUE_DSN", dsn)
    yield dsn
    worker_app.close_ledger()


def test_pg_cron_reclaims_a_killed_workers_job_and_another_worker_completes_it(pg15_dsn, tmp_path):
    runner = CliRunner()
    installed = runner.invoke(app, ["pg-cron", "install-reaper", "--dsn", pg15_dsn, "--json"])
    assert installed.exit_code == 0, installed.output
    # pg_cron lives in the `postgres` database; the job runs in pgqueue's.
    with psycopg.connect(pg15_dsn.replace("dbname=pgqueue_app", "dbname=postgres")) as conn:
        jobs = conn.execute("SELECT jobname, schedule, command, database FROM cron.job").fetchall()
    # pg_cron 1.4 (Debian 12) schedules by the minute; 1.5+ would get '5 seconds'.
    assert jobs == [
        ("pgqueue-reaper-pgqueue_app", "* * * * *", "SELECT pgqueue.reap()", "pgqueue_app")
    ]
    # The old spelling (under pgqueue's own cron schedules) still works, and says the new one.
    again = runner.invoke(app, ["cron", "install-reaper", "--dsn", pg15_dsn])
    assert again.exit_code == 0 and "pgqueue-reaper-pgqueue_app" in again.stdout
    assert "deprecated: use pgq pg-cron install-reaper" in again.stderr

    pgq = PgQueue(pg15_dsn)
    try:
        job = pgq.enqueue("slow_first_attempt", {"seconds": 600}, max_attempts=3)
    finally:
        pgq.close()
    # No worker runs the reaper: only pg_cron can recover the job.
    first = spawn_worker(
        pg15_dsn, "--no-reaper", "--lease", "2s", app=OPS_APP, log=tmp_path / "first.log"
    )
    try:
        wait_for(lambda: ledger(pg15_dsn, "start"), timeout=60, message="the first attempt")
    finally:
        first.send_signal(signal.SIGKILL)
        first.wait(10)
    second = spawn_worker(
        pg15_dsn, "--no-reaper", "--lease", "2s", app=OPS_APP, log=tmp_path / "second.log"
    )
    try:
        # pg_cron fires at the next minute boundary, then the job's backoff (<= 2 s) runs out.
        done = wait_for(
            lambda: ledger(pg15_dsn, "end"),
            timeout=150,
            interval=0.5,
            message="pg_cron to reclaim the job and the second worker to finish it",
        )
    finally:
        second.send_signal(signal.SIGTERM)
        assert second.wait(30) == 0
    [(job_id, attempt, pid, *_)] = done
    assert (job_id, attempt, pid) == (job, 2, second.pid)
    assert scalar(pg15_dsn, "SELECT count(*) FROM pgqueue.jobs") == 0
    with psycopg.connect(pg15_dsn.replace("dbname=pgqueue_app", "dbname=postgres")) as conn:
        runs = conn.execute(
            "SELECT status, return_message FROM cron.job_run_details"
            " WHERE command = 'SELECT pgqueue.reap()' AND status = 'succeeded'"
        ).fetchall()
    assert runs  # pg_cron ran it
    removed = runner.invoke(app, ["pg-cron", "uninstall-reaper", "--dsn", pg15_dsn])
    assert removed.exit_code == 0 and "removed" in removed.output


def test_install_reaper_explains_what_is_missing(dsn):
    # The session's embedded server has no pg_cron loaded.
    result = CliRunner().invoke(app, ["pg-cron", "install-reaper", "--dsn", dsn])
    assert result.exit_code == 1
    assert "shared_preload_libraries" in result.output


def test_enqueue_and_claim_through_pgbouncer_in_transaction_pooling_mode(pg15, pg15_dsn, tmp_path):
    with pgbouncer(pg15, "pgqueue_app", pool_mode="transaction") as bouncer:
        # PgBouncer 1.18 (Debian 12) cannot keep prepared statements in transaction mode.
        pgq = PgQueue(bouncer, prepare=False)

        def enqueue(start: int, count: int) -> None:
            threads = [
                threading.Thread(
                    target=lambda k=k: [
                        pgq.enqueue("noop", {"n": n})
                        for n in range(start + k * count // 4, start + (k + 1) * count // 4)
                    ]
                )
                for k in range(4)
            ]
            for thread in threads:
                thread.start()
            for thread in threads:
                thread.join()

        def finished(count: int) -> bool:
            return scalar(pg15_dsn, "SELECT count(*) FROM ledger WHERE event = 'end'") == count

        try:
            # A worker whose only DSN is the pooler: it notices LISTEN cannot work and polls.
            log = tmp_path / "polling.log"
            polling = spawn_worker(pg15_dsn, "--dsn", bouncer, "--no-prepare", log=log)
            try:
                wait_for(
                    lambda: "falling back to polling" in log.read_text(),
                    timeout=60,
                    message="the worker to notice LISTEN does not work",
                )
                enqueue(0, 100)
                pgq.enqueue_many([worker_app.noop.s(n) for n in range(100, 150)])
                wait_for(lambda: finished(150), timeout=90, message="150 jobs")
            finally:
                polling.send_signal(signal.SIGTERM)
                assert polling.wait(30) == 0
            assert "listening for notifications" not in log.read_text()

            # With --listen-dsn (a direct connection) it LISTENs and still claims via PgBouncer.
            log = tmp_path / "listening.log"
            listening = spawn_worker(
                pg15_dsn, "--dsn", bouncer, "--no-prepare", "--listen-dsn", pg15_dsn, log=log
            )
            try:
                wait_for(
                    lambda: "listening for notifications" in log.read_text(),
                    timeout=60,
                    message="the worker to listen",
                )
                enqueue(1000, 100)
                wait_for(lambda: finished(250), timeout=90, message="250 jobs")
            finally:
                listening.send_signal(signal.SIGTERM)
                assert listening.wait(30) == 0
            assert "falling back to polling" not in log.read_text()
        finally:
            pgq.close()
        # Every job ran exactly once; the CLI works through the pooler too.
        assert scalar(pg15_dsn, "SELECT count(DISTINCT job_id) FROM ledger") == 250
        assert scalar(pg15_dsn, "SELECT count(*) FROM pgqueue.jobs") == 0
        status = CliRunner().invoke(app, ["status", "--json", "--dsn", bouncer])
        assert status.exit_code == 0, status.output
