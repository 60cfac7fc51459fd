"""The operator's views (SQL) and commands (CLI) against real workers and a real database."""

from __future__ import annotations

import asyncio
import json
import os
import socket

import pytest
from typer.testing import CliRunner

from pgqueue import InvalidJobError
from pgqueue.cli import app
from tests.helpers import scalar, thread_worker, wait_for
from tests.integration import worker_app

runner = CliRunner()


def pgq_cli(*args: str, input: str | None = None):
    return runner.invoke(app, list(args), input=input, catch_exceptions=False)


def cli_json(*args: str):
    result = pgq_cli(*args, "--json")
    assert result.exit_code == 0, result.output
    return json.loads(result.output)


def all_finished(dsn: str, dead: int) -> bool:
    """No live job left and ``dead`` dead letters (a --burst worker would not wait for the
    retries' backoff)."""
    return scalar(
        dsn,
        "SELECT (SELECT count(*) FROM pgqueue.jobs) = 0"
        " AND (SELECT count(*) FROM pgqueue.dead_letters) = %s",
        (dead,),
    )


def test_counts_flushed_with_heartbeats_feed_the_throughput_and_failure_views(app_dsn, conn):
    pgq = worker_app.pgq
    for n in range(5):
        pgq.enqueue("noop", {"n": n}, conn=conn)
    broken = pgq.enqueue("always_fails", conn=conn)
    with thread_worker(pgq, app_dsn, concurrency=4) as w:
        wait_for(lambda: all_finished(app_dsn, dead=1), message="the jobs to finish")
    worker_id = w.worker.id
    # One heartbeat statement at shutdown carried the counts: nothing is lost between beats.
    assert conn.execute(
        "SELECT queue, succeeded, retried, dead, cancelled FROM pgqueue.throughput"
    ).fetchall() == [("default", 5, 2, 1, 0)]
    failures = conn.execute(
        "SELECT queue, task, retried, dead, error_class, last_error, failed_at IS NOT NULL"
        " FROM pgqueue.recent_failures"
    ).fetchall()
    assert failures == [("default", "always_fails", 2, 1, "ValueError", "this job is broken", True)]
    dead = conn.execute(
        "SELECT id, error_class, last_error, traceback FROM pgqueue.dead_letter_errors"
    ).fetchone()
    assert dead[:3] == (broken, "ValueError", "this job is broken")
    assert "raise ValueError" in dead[3]
    worker = conn.execute(
        "SELECT host, pid, status, jobs_held, jobs_succeeded, jobs_dead, stopped_at IS NOT NULL"
        " FROM pgqueue.worker_status WHERE id = %s",
        (worker_id,),
    ).fetchone()
    assert worker == (socket.gethostname(), os.getpid(), "stopped", 0, 5, 1, True)
    # The CLI shows the same rows.
    assert cli_json("workers", "--dsn", app_dsn) == []  # stopped workers are hidden...
    shown = cli_json("workers", "--all", "--dsn", app_dsn)  # ...unless asked for
    assert [(r["id"], r["status"], r["jobs_succeeded"]) for r in shown] == [
        (worker_id, "stopped", 5)
    ]


def test_queue_stats_throughput_is_the_average_of_the_last_five_complete_minutes(dsn, conn):
    conn.execute(
        "INSERT INTO pgqueue.job_counts (minute, queue, task, succeeded, retried, dead)"
        " VALUES (date_trunc('minute', now()) - interval '2 minutes', 'q', 'a', 10, 2, 1),"
        "        (date_trunc('minute', now()) - interval '3 minutes', 'q', 'b', 5, 0, 0),"
        # the current (incomplete) minute and minutes older than five are not counted
        "        (date_trunc('minute', now()), 'q', 'a', 1000, 0, 0),"
        "        (date_trunc('minute', now()) - interval '6 minutes', 'q', 'a', 1000, 0, 0)"
    )
    assert conn.execute(
        "SELECT queue, ready, succeeded_per_min, failed_per_min FROM pgqueue.queue_stats"
    ).fetchall() == [("q", 0, 3, 0.6)]
    status = cli_json("status", "--dsn", dsn)
    assert status["queues"][0]["succeeded_per_min"] == 3
    assert status["workers"] == {
        "running": 0,
        "lost": 0,
        "jobs_held": 0,
        "slots": 0,
        "recently_stopped": [],
    }


def test_running_jobs_workers_and_status_while_a_job_runs(app_dsn, conn):
    pgq = worker_app.pgq
    job = pgq.enqueue("async_sleep", {"seconds": 30}, conn=conn)
    waiting = pgq.enqueue("noop", queue="elsewhere", conn=conn)
    with thread_worker(pgq, app_dsn, lease=30.0, shutdown_grace=0.1) as w:
        wait_for(lambda: scalar(app_dsn, "SELECT count(*) FROM pgqueue.running_jobs") == 1)
        row = conn.execute(
            "SELECT id, task, attempt, worker_id::text, host, pid,"
            " lease_left > interval '20 seconds' FROM pgqueue.running_jobs"
        ).fetchone()
        assert row == (job, "async_sleep", 1, w.worker.id, socket.gethostname(), os.getpid(), True)
        workers = cli_json("workers", "--dsn", app_dsn)
        assert [(r["id"], r["status"], r["jobs_held"], r["queues"]) for r in workers] == [
            (w.worker.id, "running", 1, ["default"])
        ]
        running = cli_json("jobs", "list", "--state", "running", "--dsn", app_dsn)
        assert [(r["id"], r["worker_id"]) for r in running] == [(job, w.worker.id)]
        assert running[0]["lease_left"] > 20
        everything = cli_json("jobs", "list", "--dsn", app_dsn)
        assert [(r["id"], r["state"]) for r in everything] == [(job, "running"), (waiting, "ready")]
        status = cli_json("status", "--dsn", app_dsn)
        assert status["workers"] == {
            "running": 1,
            "lost": 0,
            "jobs_held": 1,
            "slots": 10,
            "recently_stopped": [],
        }
        by_queue = {q["queue"]: q for q in status["queues"]}
        assert by_queue["default"]["running"] == 1 and by_queue["elsewhere"]["ready"] == 1
        assert by_queue["elsewhere"]["oldest_ready_age"] >= 0
        table = pgq_cli("status", "--dsn", app_dsn)
        assert table.exit_code == 0 and "workers: 1 running (1/10 slots busy)" in table.output


def test_jobs_show_finds_a_job_wherever_it_is(app_dsn, conn):
    pgq = worker_app.pgq
    dead = pgq.enqueue("always_fails", conn=conn)
    with thread_worker(pgq, app_dsn):
        wait_for(lambda: all_finished(app_dsn, dead=1), message="the dead letter")
    live = pgq.enqueue("noop", {"n": 7}, delay=3600, conn=conn)
    shown = cli_json("jobs", "show", str(dead), "--dsn", app_dsn)
    assert shown["place"] == "dead" and shown["task"] == "always_fails"
    assert [e["attempt"] for e in shown["errors"]] == [1, 2, 3]
    assert cli_json("jobs", "show", str(live), "--dsn", app_dsn)["state"] == "scheduled"
    text = pgq_cli("jobs", "show", str(dead), "--dsn", app_dsn)
    assert text.exit_code == 0 and "raise ValueError" in text.output
    missing = pgq_cli("jobs", "show", "999999", "--dsn", app_dsn)
    assert missing.exit_code == 1 and "not found" in missing.output


def test_retry_makes_waiting_jobs_ready_and_replays_dead_letters(dsn, pgq, conn):
    later = pgq.enqueue("t", delay=3600)
    conn.execute(
        "INSERT INTO pgqueue.dead_letters (id, queue, task, args, priority, attempts,"
        " max_attempts, lease_token, created_at, errors, last_error, reason)"
        " VALUES (900, 'default', 't', '{}', 0, 5, 5, 5, now(), '[]', 'boom', 'max attempts')"
    )
    result = pgq_cli("retry", str(later), "900", "12345", "--dsn", dsn, "--json")
    assert result.exit_code == 1  # one id could not be retried
    assert json.loads(result.output) == {"ready": [later], "replayed": [900], "skipped": [12345]}
    assert conn.execute(
        "SELECT id, state, run_at <= now(), attempts FROM pgqueue.jobs ORDER BY id"
    ).fetchall() == [(later, "ready", True, 0), (900, "ready", True, 0)]
    assert scalar(dsn, "SELECT count(*) FROM pgqueue.dead_letters") == 0


def test_purge_asks_first_and_deletes_only_waiting_jobs_of_the_queue(dsn, pgq, conn):
    for _ in range(3):
        pgq.enqueue("t", queue="q1")
    pgq.enqueue("t", queue="q1", delay=60)
    pgq.enqueue("t", queue="q2")
    conn.execute(
        "UPDATE pgqueue.jobs SET state = 'running',"
        " lease_expires_at = now() + interval '1 minute' WHERE id = 1"
    )  # left alone
    declined = pgq_cli("purge", "--queue", "q1", "--dsn", dsn, input="n\n")
    assert declined.exit_code == 1 and "Delete 3 waiting job(s) in queue 'q1'?" in declined.output
    assert scalar(dsn, "SELECT count(*) FROM pgqueue.jobs") == 5
    no_answer = pgq_cli("purge", "--queue", "q1", "--dsn", dsn, input="")
    assert no_answer.exit_code == 1
    assert cli_json("purge", "--queue", "q1", "--dry-run", "--dsn", dsn) == {
        "deleted": 0,
        "would_delete": 3,
    }
    accepted = pgq_cli("purge", "--queue", "q1", "--dsn", dsn, input="y\n")
    assert accepted.exit_code == 0 and "deleted 3 waiting job(s)" in accepted.output
    assert conn.execute("SELECT queue, state FROM pgqueue.jobs ORDER BY id").fetchall() == [
        ("q1", "running"),
        ("q2", "ready"),
    ]
    nothing = pgq_cli("purge", "--dsn", dsn, "--yes")
    assert nothing.exit_code == 1 and "say what to purge" in nothing.output
    conn.execute(
        "INSERT INTO pgqueue.dead_letters (id, queue, task, args, priority, attempts,"
        " max_attempts, lease_token, created_at, errors, reason)"
        " SELECT g, 'q2', 't', '{}', 0, 1, 1, 1, now(), '[]', 'x' FROM generate_series(100, 103) g"
    )
    assert cli_json("purge", "--dead", "--all", "--yes", "--dsn", dsn) == {
        "deleted": 4,
        "would_delete": None,
    }
    assert scalar(dsn, "SELECT count(*) FROM pgqueue.jobs") == 2


def test_dead_workers_show_as_lost_then_are_pruned_by_the_reaper(dsn, pgq, conn):
    conn.execute(
        "INSERT INTO pgqueue.workers (id, host, pid, queues, concurrency, version, last_seen)"
        " VALUES ('00000000-0000-0000-0000-000000000001', 'a', 1, '{q}', 1, 'x', now()),"
        "        ('00000000-0000-0000-0000-000000000002', 'b', 2, '{q}', 1, 'x',"
        "         now() - interval '5 minutes'),"
        "        ('00000000-0000-0000-0000-000000000003', 'c', 3, '{q}', 1, 'x',"
        "         now() - interval '2 hours')"
    )
    assert conn.execute(
        "SELECT host, status FROM pgqueue.worker_status ORDER BY host"
    ).fetchall() == [("a", "running"), ("b", "lost"), ("c", "lost")]
    status = cli_json("status", "--dsn", dsn)
    assert status["workers"]["running"] == 1 and status["workers"]["lost"] == 2
    pgq.admin.reap()  # forgets workers not seen for an hour
    assert conn.execute("SELECT host FROM pgqueue.workers ORDER BY host").fetchall() == [
        ("a",),
        ("b",),
    ]


def test_reap_refuses_a_bad_max_jobs_before_any_query_sync_and_async(pgq):
    """A negative one reached the database as a raw "LIMIT must not be negative" error."""
    with pytest.raises(InvalidJobError, match="max_jobs must be between 1 and"):
        pgq.admin.reap(-1)

    async def main() -> None:
        try:
            with pytest.raises(InvalidJobError, match="max_jobs must be an integer"):
                await asyncio.wait_for(pgq.admin.reap_async("10"), 10)
        finally:
            await pgq.aclose()

    asyncio.run(main())
    assert pgq.admin.reap(5) == 0
