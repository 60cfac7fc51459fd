"""Job progress: ``ctx.progress(...)`` from async, thread and process handlers, written with the
heartbeats, shown by ``pgqueue.running_jobs``, ``pgq jobs show``, the dashboard's state and
``pgq.progress()``. Real `pgq work` processes, leases of 3 s (a heartbeat every second)."""

from __future__ import annotations

import asyncio
import json
import subprocess
from collections.abc import Iterator

import psycopg
import pytest

from pgqueue import PgQueue
from pgqueue.db import views
from pgqueue.rules.progress import encode
from tests.helpers import PGQ, ROOT, spawn_worker, stop_workers, wait_for

APP = "tests.integration.progress_app:pgq"


@pytest.fixture(scope="module", params=["thread", "process"])
def worker(request, module_dsn, tmp_path_factory) -> Iterator[str]:
    """A worker (sync handlers in threads, or in child processes) on the module's database,
    shared by its tests (each enqueues and watches jobs of its own)."""
    log = tmp_path_factory.mktemp("progress") / "worker.log"
    proc = spawn_worker(
        module_dsn, "--lease", "3s", "--pool", request.param, "--concurrency", "4",
        log=log, app=APP,
    )  # fmt: skip
    try:
        wait_for(lambda: "worker started" in log.read_text(), message="the worker to start")
        yield request.param
    finally:
        stop_workers([proc])


def running_row(dsn: str, job_id: int) -> tuple[object, object] | None:
    with psycopg.connect(dsn) as conn:
        return conn.execute(
            "SELECT progress, progress_at FROM pgqueue.running_jobs WHERE id = %s", (job_id,)
        ).fetchone()


@pytest.mark.parametrize("task", ["progress.async_steps", "progress.sync_steps"])
def test_progress_shows_while_the_job_runs(worker, module_dsn, task):
    with PgQueue(module_dsn) as pgq:
        # Held until cancelled below (a minute at most): `pgq jobs show` starting slowly on a busy
        # machine must still find it running.
        job = pgq.enqueue(task, {"steps": [0.25, {"done": 40, "of": 100}], "hold": 60.0})
        wait_for(lambda: pgq.progress(job) == {"done": 40, "of": 100}, timeout=30,
                 message="the progress to be written")  # fmt: skip
        row = running_row(module_dsn, job)
        assert row is not None and row[0] == {"done": 40, "of": 100} and row[1] is not None
        shown = subprocess.run(
            [PGQ, "jobs", "show", str(job), "--json", "--dsn", module_dsn],
            cwd=ROOT, capture_output=True, text=True, check=False,
        )  # fmt: skip
        assert shown.returncode == 0, shown.stderr
        assert json.loads(shown.stdout)["progress"] == {"done": 40, "of": 100}
        running = [r for r in views.running_jobs(pgq) if r["id"] == job]
        assert running and running[0]["progress"] == {"done": 40, "of": 100}
        pgq.cancel(job)  # seen: no need to wait out the hold
        wait_for(lambda: running_row(module_dsn, job) is None, timeout=30, message="the job to end")
        assert pgq.progress(job) is None  # finished: nothing running to report


def test_reporting_often_costs_no_statement_per_call(worker, module_dsn):
    with psycopg.connect(module_dsn, autocommit=True) as conn, PgQueue(module_dsn) as pgq:

        def updates() -> int:
            conn.execute("SELECT pg_stat_force_next_flush()")
            return int(conn.execute(
                "SELECT n_tup_upd FROM pg_stat_user_tables"
                " WHERE schemaname = 'pgqueue' AND relname = 'jobs'"
            ).fetchone()[0])  # fmt: skip

        before = updates()
        job = pgq.enqueue("progress.many", {"calls": 20_000, "hold": 2.0})
        wait_for(lambda: pgq.progress(job) == {"done": 20_000, "of": 20_000}, timeout=30,
                 message="the last progress")  # fmt: skip
        wait_for(lambda: running_row(module_dsn, job) is None, timeout=30, message="the job to end")
        # 20,000 reports; the job's row was updated by the claim and a few heartbeats only.
        assert updates() - before < 40


def test_an_earlier_attempts_progress_is_not_shown(worker, module_dsn):
    with PgQueue(module_dsn) as pgq:
        job = pgq.enqueue("progress.then_retry", {"hold": 3.0})
        wait_for(lambda: pgq.progress(job) == 0.9, timeout=30, message="attempt 1's progress")

        def second_attempt_running() -> bool:
            with psycopg.connect(module_dsn) as conn:
                row = conn.execute(
                    "SELECT attempt FROM pgqueue.running_jobs WHERE id = %s", (job,)
                ).fetchone()
            return row is not None and row[0] == 2

        wait_for(second_attempt_running, timeout=30, message="attempt 2")
        assert pgq.progress(job) is None
        assert running_row(module_dsn, job) == (None, None)


@pytest.mark.parametrize(
    ("kind", "message"),
    [
        ("too_big", "progress as a number is the fraction done, 0 to 1; got 2.0"),
        ("text", "progress must be a fraction from 0 to 1 or a dict, got str"),
        ("huge", "more than 4096"),
    ],
)
def test_bad_progress_fails_the_job_with_a_clear_error(worker, module_dsn, kind, message):
    with PgQueue(module_dsn) as pgq:
        # By name from a client that does not register the task: the task's max_attempts=1
        # is passed along, or the job would be retried with backoff first.
        job = pgq.enqueue("progress.bad", {"kind": kind}, max_attempts=1)

        def dead() -> list[dict[str, object]]:
            return [d for d in pgq.admin.dead_letters() if d["id"] == job]

        rows = wait_for(dead, timeout=30, message="the job to be dead-lettered")
        assert message in str(rows[0]["last_error"])


def test_progress_values_are_checked_before_anything_is_kept():
    assert encode(0) == "0.0" and encode(1) == "1.0"
    assert json.loads(encode({"done": 1, "of": 2, "stage": "résumé"})) == {
        "done": 1, "of": 2, "stage": "résumé"
    }  # fmt: skip
    for bad in (True, -0.1, float("nan"), {1: "a"}, {"x": object()}, {"x": float("inf")}, [1]):
        with pytest.raises(ValueError, match="progress"):
            encode(bad)


def test_progress_async_reads_the_same(app_dsn):
    with psycopg.connect(app_dsn, autocommit=True) as conn:
        job_id = conn.execute(
            "INSERT INTO pgqueue.jobs (queue, task, args, state, attempts, lease_token,"
            " lease_expires_at, worker_id, started_at, progress, progress_at)"
            " VALUES ('default', 't', '{}', 'running', 1, 1, now() + interval '1 hour',"
            " gen_random_uuid(), now() - interval '1 second', '0.5', now()) RETURNING id"
        ).fetchone()[0]

    async def read() -> object:
        async with PgQueue(app_dsn) as pgq:
            return await pgq.progress_async(job_id)

    assert asyncio.run(read()) == 0.5
