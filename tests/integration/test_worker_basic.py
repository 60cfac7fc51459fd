"""Worker behaviour with an in-process worker (real Postgres, real LISTEN/NOTIFY)."""

from __future__ import annotations

import time
from datetime import timedelta

import psycopg
import pytest

from pgqueue.db.queries import query
from pgqueue.worker.counts import JobCounts
from tests.helpers import ledger, scalar, thread_worker, wait_for
from tests.integration import worker_app

APP = worker_app.pgq


def live_jobs(dsn: str) -> int:
    return scalar(dsn, "SELECT count(*) FROM pgqueue.jobs")


def test_runs_async_and_sync_jobs_once_and_removes_them(app_dsn, pgq):
    ids = pgq.enqueue_many(
        [pgq.spec("noop", {"n": i}, {}) for i in range(60)]
        + [pgq.spec("sync_noop", {"n": i}, {}) for i in range(40)]
    )
    with thread_worker(APP, app_dsn, concurrency=8, burst=True) as w:
        w.join()
    done = [row[0] for row in ledger(app_dsn, "end")]
    assert sorted(done) == sorted(ids)
    assert live_jobs(app_dsn) == 0
    assert w.worker.stats.succeeded == 100


def test_a_long_prefetch_of_jobs_that_never_suspend(app_dsn, pgq):
    # Two jobs that wait hold the slots while 1,000 that never do are prefetched behind them.
    # On Python 3.12+ each of those finishes inside its own start (an eager task) and starts
    # the next waiting one from there: that must not nest 1,000 calls deep.
    slow = pgq.enqueue_many([pgq.spec("async_sleep", {"seconds": 0.2}, {"priority": -10})] * 2)
    pgq.enqueue_many([pgq.spec("instant", {}, {}) for _ in range(3000)])
    with thread_worker(APP, app_dsn, concurrency=2, prefetch=1000, burst=True) as w:
        w.join()
    assert w.worker.stats.succeeded == 3002
    assert sorted(r[0] for r in ledger(app_dsn, "end")) == sorted(slow)
    assert live_jobs(app_dsn) == 0


def test_context_is_passed_and_available(app_dsn, pgq):
    pgq.enqueue("with_context", {"label": "hello"}, queue="ctxq", max_attempts=3)
    with thread_worker(APP, app_dsn, queues=["ctxq"], burst=True) as w:
        w.join()
    [(_, _, _, _, _, note)] = ledger(app_dsn)
    assert note == "hello:with_context:ctxq:1/3"


def test_worker_only_claims_its_queues_and_known_tasks(app_dsn, pgq):
    other_queue = pgq.enqueue("noop", {}, queue="elsewhere")
    unknown = pgq.enqueue("not.a.registered.task", {})
    mine = pgq.enqueue("noop", {})
    with thread_worker(APP, app_dsn, burst=True) as w:
        w.join()
    assert [row[0] for row in ledger(app_dsn)] == [mine]
    with psycopg.connect(app_dsn) as conn:
        left = {r[0]: r[1] for r in conn.execute("SELECT id, state FROM pgqueue.jobs")}
    assert left == {other_queue: "ready", unknown: "ready"}  # never discarded


def test_retries_with_backoff_until_success(app_dsn, pgq):
    job = pgq.enqueue(worker_app.flaky, {"fail_times": 2})
    with thread_worker(APP, app_dsn, poll_interval=0.2):
        wait_for(lambda: ledger(app_dsn, "end"), message="flaky job to succeed")
    attempts = [row[1] for row in ledger(app_dsn, "start")]
    assert attempts == [1, 2, 3]
    assert live_jobs(app_dsn) == 0
    assert scalar(app_dsn, "SELECT count(*) FROM pgqueue.dead_letters") == 0
    assert job  # succeeded jobs leave no row behind


def test_errors_are_recorded_and_the_job_dead_letters_after_max_attempts(app_dsn, pgq):
    job = pgq.enqueue(worker_app.always_fails, {})
    with thread_worker(APP, app_dsn, poll_interval=0.2):
        wait_for(pgq.admin.dead_letters, message="dead letter")
    [dead] = pgq.admin.dead_letters()
    assert dead["id"] == job and dead["attempts"] == 3 and dead["reason"] == "max attempts reached"
    assert dead["last_error"] == "this job is broken"
    assert [e["attempt"] for e in dead["errors"]] == [1, 2, 3]
    assert all(
        e["error"] == "ValueError" and "Traceback" in e["traceback"] and e["at"]
        for e in dead["errors"]
    )
    assert len(ledger(app_dsn, "start")) == 3


def test_fail_dead_letters_at_once(app_dsn, pgq):
    pgq.enqueue(worker_app.fails_for_good, {})
    with thread_worker(APP, app_dsn, burst=True) as w:
        w.join()
    [dead] = pgq.admin.dead_letters()
    assert dead["attempts"] == 1 and "Fail raised" in dead["reason"]
    assert dead["errors"][-1]["error"] == "pgqueue.errors.Fail"


def test_retry_reschedules_without_burning_an_attempt(app_dsn, pgq):
    pgq.enqueue(worker_app.retry_once, {})  # max_attempts=1: a burned attempt would dead-letter it
    with thread_worker(APP, app_dsn, poll_interval=0.2):
        wait_for(lambda: ledger(app_dsn, "end"), message="retried job to finish")
    assert [row[1] for row in ledger(app_dsn, "start")] == [1, 1]
    assert scalar(app_dsn, "SELECT count(*) FROM pgqueue.dead_letters") == 0


@pytest.mark.parametrize("task", [worker_app.async_timeout, worker_app.sync_timeout])
def test_timeout_is_a_failed_attempt(app_dsn, pgq, task):
    pgq.enqueue(task, {})
    with thread_worker(APP, app_dsn, poll_interval=0.2):
        wait_for(pgq.admin.dead_letters, message="timed-out job dead-lettered")
    [dead] = pgq.admin.dead_letters()
    assert dead["errors"][-1]["error"] == "pgqueue.errors.JobTimeout"
    assert "timed out after 0.3s" in dead["last_error"]
    if task.is_async:
        assert [r[5] for r in ledger(app_dsn, "cancelled")] == ["timeout"]
    else:
        time.sleep(1.5)  # the abandoned thread finishes; its result changes nothing
        assert len(ledger(app_dsn, "end")) == 1
        assert len(pgq.admin.dead_letters()) == 1 and live_jobs(app_dsn) == 0


def test_args_that_do_not_fit_the_handler_dead_letter_with_a_clear_error(app_dsn, pgq):
    # `unexpected` alone would be dropped (a job of an older signature); `fail_times` is missing.
    pgq.enqueue("flaky", {"unexpected": 1})
    with thread_worker(APP, app_dsn, burst=True) as w:
        w.join()
    [dead] = pgq.admin.dead_letters()
    assert "missing a required argument: 'fail_times'" in dead["last_error"]
    assert dead["attempts"] == 1


def test_notified_idle_worker_starts_a_job_without_waiting_for_its_poll(app_dsn, pgq):
    with thread_worker(APP, app_dsn, poll_interval=600) as w:
        wait_for(lambda: scalar(app_dsn, "SELECT count(*) FROM pgqueue.workers"), message="reg")
        time.sleep(0.5)  # idle: the fetcher now sleeps for its 10-minute poll interval
        started = time.monotonic()
        pgq.enqueue("noop", {})
        wait_for(lambda: ledger(app_dsn, "end"), timeout=10, message="notified pickup")
        assert time.monotonic() - started < 5
        # (the handler's ledger row is written before the worker records the ack)
        wait_for(lambda: w.worker.stats.succeeded == 1, message="the ack")


def test_delayed_job_runs_when_due_not_at_the_next_poll(app_dsn, pgq):
    with thread_worker(APP, app_dsn, poll_interval=600):
        time.sleep(0.5)
        pgq.enqueue("noop", {}, delay=1.0)
        started = time.monotonic()
        wait_for(lambda: ledger(app_dsn, "end"), timeout=10, message="delayed job")
        assert 0.9 <= time.monotonic() - started < 5


def test_cancel_a_waiting_job(app_dsn, pgq):
    job = pgq.enqueue("noop", {}, delay=3600)
    assert pgq.cancel(job) == "cancelled"
    assert pgq.cancel(job) == "not_found"
    assert scalar(app_dsn, "SELECT state FROM pgqueue.job_history WHERE id = %s", (job,)) == (
        "cancelled"
    )
    assert live_jobs(app_dsn) == 0


@pytest.mark.parametrize("task", ["async_sleep", "sync_sleep"])
def test_cancel_a_running_job(app_dsn, pgq, task):
    job = pgq.enqueue(task, {"seconds": 30})
    with thread_worker(APP, app_dsn) as w:
        wait_for(lambda: ledger(app_dsn, "start"), message="job started")
        assert pgq.cancel(job) == "cancelling"
        wait_for(
            lambda: scalar(app_dsn, "SELECT state FROM pgqueue.job_history WHERE id = %s", (job,)),
            message="job cancelled",
        )
        # Counted once the write's reply is back, a moment after the row is visible.
        wait_for(lambda: w.worker.stats.cancelled == 1, message="cancel counted")
    assert [r[5] for r in ledger(app_dsn, "cancelled")] == ["cancelled"]
    assert not ledger(app_dsn, "end")
    assert live_jobs(app_dsn) == 0 and not pgq.admin.dead_letters()


def test_fencing_a_reaped_lease_cannot_be_acked_heartbeated_or_failed(app_dsn, pgq):
    """The worker's lease is reaped while the handler runs: its handler is cancelled, and every
    write with the old token is a no-op."""
    job = pgq.enqueue("async_sleep", {"seconds": 30})
    with thread_worker(APP, app_dsn, lease=3.0, reaper_interval=600) as w:
        wait_for(lambda: ledger(app_dsn, "start"), message="job started")
        with psycopg.connect(app_dsn, autocommit=True) as conn:
            token = scalar(app_dsn, "SELECT lease_token FROM pgqueue.jobs WHERE id = %s", (job,))
            # Expired and reaped in one transaction: its row lock keeps the worker's heartbeat
            # (one a second) from extending the lease in between.
            with conn.transaction():
                conn.execute(
                    "UPDATE pgqueue.jobs SET lease_expires_at = now() - interval '1s'"
                    " WHERE id = %s",
                    (job,),
                )
                assert conn.execute("SELECT pgqueue.reap()").fetchone()[0] == 1
                # The reaper's backoff can be ~0 s: keep the worker from claiming the job again
                # while the stale writes below are checked against it.
                conn.execute(
                    "UPDATE pgqueue.jobs SET run_at = now() + interval '1 hour' WHERE id = %s",
                    (job,),
                )
            before = conn.execute(
                "SELECT state, attempts, errors FROM pgqueue.jobs WHERE id = %s", (job,)
            ).fetchone()
            stale = {"ids": [job], "tokens": [token]}
            assert conn.execute(query("ack_jobs"), {**stale, "results": [None]}).fetchall() == []
            assert (
                conn.execute(
                    query("heartbeat"),
                    {
                        **stale,
                        "worker_id": w.worker.id,
                        "lease": timedelta(seconds=30),
                        "succeeded": 0,
                        "retried": 0,
                        "dead": 0,
                        "cancelled": 0,
                        "lost": 0,
                        **JobCounts.as_params({}),
                        "concurrency": 10,
                        "progress_ids": None,
                        "progress": None,
                    },
                ).fetchall()
                == []
            )
            assert (
                conn.execute(
                    query("fail_jobs"),
                    {
                        **stale,
                        "kinds": ["fail"],
                        "delays": [0.0],
                        "errors": ['{"message": "x"}'],
                        "wake": None,
                    },
                ).fetchall()
                == []
            )
            assert conn.execute(query("release_jobs"), stale).fetchall() == []
            after = conn.execute(
                "SELECT state, attempts, errors FROM pgqueue.jobs WHERE id = %s", (job,)
            ).fetchone()
            assert after == before and after[0] == "scheduled"
        # The worker's own heartbeat finds the lease gone and cancels the handler.
        wait_for(lambda: ledger(app_dsn, "cancelled"), message="handler cancelled")
        assert [r[5] for r in ledger(app_dsn, "cancelled")] == ["lease lost"]
        assert w.worker.stats.lost == 1


def test_dead_letters_filters_replay_and_dry_run(app_dsn, pgq):
    for _ in range(3):
        pgq.enqueue(worker_app.fails_for_good, {})
    pgq.enqueue(worker_app.fails_for_good, {}, queue="other")
    with thread_worker(APP, app_dsn, queues=["default", "other"], burst=True) as w:
        w.join()
    assert len(pgq.admin.dead_letters()) == 4
    assert len(pgq.admin.dead_letters(queue="other")) == 1
    assert len(pgq.admin.dead_letters(error="CANNOT BE RETRIED")) == 4
    assert pgq.admin.dead_letters(error="no such text") == []
    assert pgq.admin.dead_letters(task="noop") == []
    assert pgq.admin.replay_dead_letters(queue="default", dry_run=True) == 3
    assert len(pgq.admin.dead_letters()) == 4
    assert pgq.admin.replay_dead_letters(queue="default", batch_size=2) == 3
    with psycopg.connect(app_dsn) as conn:
        rows = conn.execute(
            "SELECT state, attempts, jsonb_array_length(errors) FROM pgqueue.jobs"
        ).fetchall()
    assert rows == [("ready", 0, 1)] * 3  # fresh attempts, history of errors kept
    [left] = pgq.admin.dead_letters()
    assert pgq.admin.replay_dead_letters(ids=[left["id"]]) == 1
    assert pgq.admin.dead_letters() == []


def test_replayed_job_runs_again_and_can_succeed(app_dsn, pgq):
    job = pgq.enqueue(worker_app.broken_until_fixed, {})
    with thread_worker(APP, app_dsn, burst=True) as w:
        w.join()
    assert [d["id"] for d in pgq.admin.dead_letters()] == [job]
    with psycopg.connect(app_dsn) as conn:
        conn.execute("INSERT INTO ledger (event) VALUES ('fixed')")
    pgq.admin.replay_dead_letters(ids=[job])
    with thread_worker(APP, app_dsn, burst=True) as w:
        w.join()
    assert [row[0] for row in ledger(app_dsn, "end")] == [job]
    assert pgq.admin.dead_letters() == [] and live_jobs(app_dsn) == 0


def test_worker_registers_and_reports_totals(app_dsn, pgq):
    pgq.enqueue_many([pgq.spec("noop", {}, {}) for _ in range(5)])
    with thread_worker(APP, app_dsn, burst=True, concurrency=3) as w:
        w.join()
    with psycopg.connect(app_dsn) as conn:
        row = conn.execute(
            "SELECT concurrency, queues, jobs_succeeded, stopped_at IS NOT NULL"
            " FROM pgqueue.workers WHERE id = %s",
            (w.worker.id,),
        ).fetchone()
    assert row == (3, ["default"], 5, True)


def test_paused_queue_is_not_claimed_and_resume_wakes_workers(app_dsn, pgq):
    from typer.testing import CliRunner

    from pgqueue.cli import app as cli_app

    runner = CliRunner()
    assert runner.invoke(cli_app, ["pause", "default", "--dsn", app_dsn]).exit_code == 0
    job = pgq.enqueue("noop", {})
    with thread_worker(APP, app_dsn, poll_interval=600):
        time.sleep(1.0)
        assert scalar(app_dsn, "SELECT state FROM pgqueue.jobs WHERE id = %s", (job,)) == "ready"
        stats = runner.invoke(cli_app, ["stats", "--json", "--dsn", app_dsn]).output
        assert '"paused": true' in stats
        result = runner.invoke(cli_app, ["resume", "default", "--dsn", app_dsn])
        assert result.exit_code == 0 and "resumed" in result.output
        wait_for(lambda: ledger(app_dsn, "end"), timeout=10, message="job after resume")


def test_observers_see_every_step(app_dsn, pgq):
    from pgqueue.worker.observer import WorkerObserver

    class Recorder(WorkerObserver):
        def __init__(self) -> None:
            self.events: list[str] = []

        def job_started(self, job):
            self.events.append(f"started:{job.task}")

        def job_written(self, outcome, written):
            assert outcome.duration >= 0
            self.events.append(f"{written}:{outcome.job.task}")

    recorder = Recorder()
    pgq.enqueue("noop", {})
    pgq.enqueue(worker_app.fails_for_good, {})
    from pgqueue.worker import Worker, WorkerSettings

    worker = Worker(APP, WorkerSettings(burst=True), dsn=app_dsn, observers=[recorder])
    worker.run_sync()
    assert sorted(recorder.events) == [
        "dead:fails_for_good",
        "started:fails_for_good",
        "started:noop",
        "succeeded:noop",
    ]


def test_prefetched_jobs_are_held_heartbeated_and_handed_back_unstarted(app_dsn, pgq):
    ids = pgq.enqueue_many([pgq.spec("async_sleep", {"seconds": 30}, {}) for _ in range(6)])
    with thread_worker(
        APP, app_dsn, concurrency=1, prefetch=5, lease=2.0, shutdown_grace=0.5, reaper_interval=0.5
    ):
        wait_for(lambda: ledger(app_dsn, "start"), message="first job started")
        time.sleep(3.0)  # past the lease: heartbeats must keep every claimed job's lease
        with psycopg.connect(app_dsn) as conn:
            running = conn.execute(
                "SELECT count(*) FROM pgqueue.jobs WHERE state = 'running'"
                " AND lease_expires_at > now()"
            ).fetchone()[0]
        assert running == 6  # one runs, five wait here for a slot
        assert len(ledger(app_dsn, "start")) == 1
    with psycopg.connect(app_dsn) as conn:
        rows = conn.execute("SELECT state, attempts FROM pgqueue.jobs").fetchall()
    assert sorted(rows) == [("ready", 0)] * 6  # all handed back, no attempt burned
    assert {r[0] for r in ledger(app_dsn, "start")} <= set(ids)


def test_claim_after_a_key_takes_the_jobs_after_it_and_those_of_higher_priorities(app_dsn, pgq):
    ids = pgq.enqueue_many([pgq.spec("noop", {"n": i}, {}) for i in range(6)])
    urgent = pgq.enqueue("noop", {"n": 99}, priority=-1)
    params = {
        "queues": ["default"],
        "tasks": ["noop"],
        "lease": timedelta(seconds=30),
        "worker_id": "00000000-0000-0000-0000-000000000001",
        "limit": 2,
        "running": [0],
    }
    with psycopg.connect(app_dsn, autocommit=True) as conn:
        key = conn.execute(
            "SELECT priority, run_at, id FROM pgqueue.jobs WHERE id = %s", (ids[2],)
        ).fetchone()
        after = {"after_priority": [key[0]], "after_run_at": [key[1]], "after_id": [key[2]]}
        claimed = conn.execute(query("claim_jobs"), {**params, **after}).fetchall()
        # The higher priority first (walked from the top of its priority), then after the key;
        # not the jobs of the key's priority that sort before it.
        assert sorted(r[0] for r in claimed) == sorted([urgent, ids[3]])
        claimed = conn.execute(query("claim_jobs"), {**params, **after}).fetchall()
        assert sorted(r[0] for r in claimed) == ids[4:6]
        top = {"after_priority": [None], "after_run_at": [None], "after_id": [None]}
        claimed = conn.execute(query("claim_jobs"), {**params, **top}).fetchall()
        assert sorted(r[0] for r in claimed) == ids[0:2]


def test_a_higher_priority_job_overtakes_a_draining_backlog(app_dsn, pgq):
    """The claim continues after its last key while a backlog drains, but walks from the top
    again within a quarter second, so a job enqueued ahead of the backlog does not wait for it."""
    backlog = pgq.enqueue_many([pgq.spec("async_sleep", {"seconds": 0.02}, {}) for _ in range(400)])
    with thread_worker(APP, app_dsn, concurrency=4):
        wait_for(lambda: len(ledger(app_dsn, "start")) >= 40, message="the drain to get going")
        urgent = pgq.enqueue("async_sleep", {"seconds": 0}, priority=-10)
        started_before = len(ledger(app_dsn, "start"))
        wait_for(lambda: urgent in {r[0] for r in ledger(app_dsn, "start")}, message="urgent job")
        order = [r[0] for r in ledger(app_dsn, "start")]
    overtaken = len(backlog) - (order.index(urgent) - 1)
    assert started_before < 150
    assert overtaken > 150, f"the urgent job started after {order.index(urgent)} others"


def test_stopping_mid_drain_leaves_no_job_claimed(app_dsn, pgq):
    """Both claim lanes are busy while a backlog of short jobs drains; stopping hands every
    claimed-but-unfinished job back (none stays running until its lease expires)."""
    pgq.enqueue_many([pgq.spec("async_sleep", {"seconds": 0.005}, {}) for _ in range(3000)])
    for _ in range(3):
        with thread_worker(APP, app_dsn, concurrency=16, lease=60.0):
            wait_for(lambda: len(ledger(app_dsn, "end")) >= 200, message="the drain to get going")
        assert scalar(app_dsn, "SELECT count(*) FROM pgqueue.jobs WHERE state = 'running'") == 0
        with psycopg.connect(app_dsn, autocommit=True) as conn:
            conn.execute("DELETE FROM ledger")
