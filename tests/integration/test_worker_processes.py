"""Real `pgq work` processes, real signals."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import time
from collections import Counter

import psycopg
import pytest
from typer.testing import CliRunner

from pgqueue.cli import app as cli_app
from tests.helpers import PGQ, ledger, scalar, spawn_worker, wait_for
from tests.integration import worker_app

pytestmark = pytest.mark.slow


def wait_exit(proc: subprocess.Popen[bytes], timeout: float = 60) -> int:
    try:
        return proc.wait(timeout)
    except subprocess.TimeoutExpired:
        proc.kill()
        raise


def test_many_worker_processes_run_every_job_exactly_once(app_dsn, pgq, tmp_path):
    jobs = 1500
    ids = pgq.enqueue_many(
        [pgq.spec("noop", {"n": i}, {}) for i in range(jobs // 2)]
        + [pgq.spec("sync_noop", {"n": i}, {}) for i in range(jobs // 2)]
    )
    workers = [
        spawn_worker(app_dsn, "--burst", "--concurrency", "16", log=tmp_path / f"w{i}.log")
        for i in range(3)
    ]
    assert [wait_exit(w) for w in workers] == [0, 0, 0]
    runs = Counter(row[0] for row in ledger(app_dsn, "end"))
    assert set(runs) == set(ids)
    assert max(runs.values()) == 1, "a job ran twice"
    assert scalar(app_dsn, "SELECT count(*) FROM pgqueue.jobs") == 0
    # the work was shared
    assert len({row[2] for row in ledger(app_dsn, "end")}) >= 2


def test_sigkill_mid_job_is_recovered_by_another_worker(app_dsn, pgq, tmp_path):
    job = pgq.enqueue("sync_sleep", {"seconds": 2.0, "cooperative": False})
    victim = spawn_worker(app_dsn, "--lease", "2s", "--no-reaper", log=tmp_path / "victim.log")
    try:
        wait_for(lambda: ledger(app_dsn, "start"), message="job started in the victim")
        victim.send_signal(signal.SIGKILL)
        assert wait_exit(victim) == -signal.SIGKILL
    finally:
        victim.kill()
    rescuer = spawn_worker(app_dsn, "--lease", "2s", log=tmp_path / "rescuer.log")
    try:
        wait_for(lambda: ledger(app_dsn, "end"), timeout=60, message="job finished by rescuer")
    finally:
        rescuer.send_signal(signal.SIGTERM)
        assert wait_exit(rescuer) == 0
    starts = ledger(app_dsn, "start")
    [end] = ledger(app_dsn, "end")
    assert [row[1] for row in starts] == [1, 2]
    assert starts[0][2] == victim.pid and end[2] == rescuer.pid and end[1] == 2
    assert scalar(app_dsn, "SELECT count(*) FROM pgqueue.jobs WHERE id = %s", (job,)) == 0


def test_poison_pill_that_kills_its_worker_ends_in_dead_letters_and_replays(app_dsn, pgq, tmp_path):
    job = pgq.enqueue(worker_app.crash, {})  # max_attempts=2
    pgq.enqueue("noop", {})
    spawns = 0
    while not pgq.admin.dead_letters() and spawns < 6:
        spawns += 1
        worker = spawn_worker(
            app_dsn, "--lease", "1s", "--reaper-interval", "0.3s", log=tmp_path / "poison.log"
        )
        try:
            worker.wait(8)  # crashes when it picks the poison pill up
        except subprocess.TimeoutExpired:
            worker.send_signal(signal.SIGTERM)
            wait_exit(worker)
    [dead] = pgq.admin.dead_letters()
    assert dead["id"] == job and dead["attempts"] == 2
    assert dead["reason"] == "lease expired with no attempts left"
    assert dead["errors"][-1]["error"] == "LeaseExpired"
    assert len([r for r in ledger(app_dsn, "start") if r[0] == job]) == 2
    assert any(r[0] != job for r in ledger(app_dsn, "end")), "other jobs still ran"
    # an operator fixes the cause and replays it from the CLI
    with psycopg.connect(app_dsn) as conn:
        conn.execute("INSERT INTO ledger (event) VALUES ('fixed')")
    result = CliRunner().invoke(cli_app, ["dlq", "replay", "--task", "crash", "--dsn", app_dsn])
    assert result.exit_code == 0 and "replayed 1" in result.output
    worker = spawn_worker(app_dsn, "--burst", log=tmp_path / "after.log")
    assert wait_exit(worker) == 0
    assert [r[0] for r in ledger(app_dsn, "end") if r[0] == job] == [job]


def test_sigterm_drains_finishes_short_jobs_then_releases_the_rest(app_dsn, pgq, tmp_path):
    short = pgq.enqueue("sync_sleep", {"seconds": 0.5, "cooperative": False})
    long_sync = pgq.enqueue("sync_sleep", {"seconds": 30, "cooperative": False})
    long_async = pgq.enqueue("async_sleep", {"seconds": 30})
    worker = spawn_worker(
        app_dsn, "--shutdown-grace", "2s", "--concurrency", "4", log=tmp_path / "drain.log"
    )
    wait_for(lambda: len(ledger(app_dsn, "start")) == 3, message="all three started")
    worker.send_signal(signal.SIGTERM)
    started = time.monotonic()
    assert wait_exit(worker, 30) == 0
    assert time.monotonic() - started < 10
    assert [row[0] for row in ledger(app_dsn, "end")] == [short]
    with psycopg.connect(app_dsn) as conn:
        rows = {
            r[0]: r[1:]
            for r in conn.execute(
                "SELECT id, state, attempts, worker_id IS NULL FROM pgqueue.jobs"
            ).fetchall()
        }
    # handed back, attempt not burned, nobody's lease
    assert rows == {long_sync: ("ready", 0, True), long_async: ("ready", 0, True)}
    assert [r[5] for r in ledger(app_dsn, "cancelled")] == ["shutdown"]
    log = (tmp_path / "drain.log").read_text()
    assert "released unfinished jobs count=2" in log


def test_second_signal_exits_at_once(app_dsn, pgq, tmp_path):
    pgq.enqueue("sync_sleep", {"seconds": 30, "cooperative": False})
    worker = spawn_worker(app_dsn, "--shutdown-grace", "60s", log=tmp_path / "twice.log")
    wait_for(lambda: ledger(app_dsn, "start"), message="job started")
    worker.send_signal(signal.SIGTERM)
    time.sleep(0.5)
    assert worker.poll() is None, "still draining after the first signal"
    worker.send_signal(signal.SIGTERM)
    assert wait_exit(worker, 5) == 1


def test_cli_cancel_and_dlq_list(app_dsn, pgq, tmp_path):
    runner = CliRunner()
    waiting = pgq.enqueue("noop", {}, delay=3600)
    running = pgq.enqueue("async_sleep", {"seconds": 30})
    pgq.enqueue(worker_app.fails_for_good, {})
    worker = spawn_worker(app_dsn, "--shutdown-grace", "1s", log=tmp_path / "cli.log")
    try:
        wait_for(lambda: pgq.admin.dead_letters() and ledger(app_dsn, "start"), message="setup")
        result = runner.invoke(cli_app, ["cancel", str(waiting), str(running), "--dsn", app_dsn])
        assert result.exit_code == 0, result.output
        assert f"job {waiting} cancelled" in result.output
        assert f"job {running} is running" in result.output
        wait_for(
            lambda: scalar(app_dsn, "SELECT count(*) FROM pgqueue.job_history") == 2,
            message="both cancelled",
        )
        missing = runner.invoke(cli_app, ["cancel", "999999", "--dsn", app_dsn])
        assert missing.exit_code == 1 and "not found" in missing.output
        listed = runner.invoke(
            cli_app, ["dlq", "list", "--json", "--task", "fails_for_good", "--dsn", app_dsn]
        )
        [row] = json.loads(listed.output)
        assert row["task"] == "fails_for_good" and "cannot be retried" in row["last_error"]
        table = runner.invoke(cli_app, ["dlq", "list", "--traceback", "--dsn", app_dsn])
        assert "fails_for_good" in table.output and "Traceback" in table.output
        dry = runner.invoke(
            cli_app, ["dlq", "replay", "--error", "cannot be", "--dry-run", "--dsn", app_dsn]
        )
        assert "would replay 1" in dry.output
        unscoped = runner.invoke(cli_app, ["dlq", "replay", "--dsn", app_dsn])
        assert unscoped.exit_code == 1 and "--all" in unscoped.output
    finally:
        worker.send_signal(signal.SIGTERM)
        assert wait_exit(worker) == 0


def test_pgq_reaper_process_recovers_expired_leases(app_dsn, pgq, tmp_path):
    job = pgq.enqueue("noop", {})
    with psycopg.connect(app_dsn) as conn:  # a job held by a worker that vanished
        conn.execute(
            "UPDATE pgqueue.jobs SET state = 'running', attempts = 1,"
            " lease_expires_at = now() - interval '1s' WHERE id = %s",
            (job,),
        )
    env = {**os.environ, "PGQUEUE_DSN": app_dsn}
    once = subprocess.run(
        [PGQ, "reaper", "--once"], env=env, capture_output=True, text=True, timeout=60, check=False
    )
    assert once.returncode == 0, once.stderr
    assert once.stdout.strip() == "1"
    assert scalar(app_dsn, "SELECT state FROM pgqueue.jobs WHERE id = %s", (job,)) == "scheduled"


def test_pgq_reaper_runs_until_sigterm_and_stops_cleanly(app_dsn, pgq, tmp_path):
    """The standalone reaper is the worker's reaper service: it recovers every interval,
    names itself in pg_stat_activity, and a SIGTERM stops it with exit status 0."""
    env = {**os.environ, "PGQUEUE_DSN": app_dsn, "PYTHONUNBUFFERED": "1"}
    log = tmp_path / "reaper.log"
    with open(log, "ab") as out:
        reaper = subprocess.Popen(
            [PGQ, "reaper", "--interval", "200ms"], env=env, stdout=out, stderr=subprocess.STDOUT
        )
    try:
        wait_for(lambda: "reaper started" in log.read_text(), message="the reaper to start")
        assert scalar(
            app_dsn,
            "SELECT count(*) FROM pg_stat_activity WHERE application_name = %s",
            (f"pgqueue reaper pid-{reaper.pid}",),
        )
        job = pgq.enqueue("noop", {})
        with psycopg.connect(app_dsn) as conn:  # held by a worker that vanished
            conn.execute(
                "UPDATE pgqueue.jobs SET state = 'running', attempts = 1,"
                " lease_expires_at = now() - interval '1s' WHERE id = %s",
                (job,),
            )
        wait_for(
            lambda: (
                scalar(app_dsn, "SELECT state FROM pgqueue.jobs WHERE id = %s", (job,))
                == "scheduled"
            ),
            message="the reaper to recover the job",
        )
    finally:
        reaper.send_signal(signal.SIGTERM)
        assert wait_exit(reaper) == 0
    text = log.read_text()
    assert "recovered jobs with expired leases count=1" in text
    assert "reaper stopped recovered=1" in text
