"""Sync handlers in the worker's handler threads (pgqueue/worker/threads.py), end to end: a long
handler does not hold up the short jobs queued behind it, and calls handed over and handed back
in batches keep every job's own outcome."""

from __future__ import annotations

import pytest

from tests.helpers import ledger, scalar, thread_worker, wait_for
from tests.integration import worker_app

APP = worker_app.pgq


def test_a_long_sync_job_does_not_hold_up_the_short_ones_behind_it(app_dsn, pgq):
    # Claimed first (priority), and runs until cancelled: the short jobs claimed with it must
    # all run meanwhile on the other threads.
    long_job = pgq.enqueue("sync_sleep", {"seconds": 60}, priority=-10)
    short = pgq.enqueue_many([pgq.spec("sync_noop", {"n": i}, {}) for i in range(200)])
    with thread_worker(APP, app_dsn, concurrency=4, poll_interval=600) as w:
        wait_for(
            lambda: len(ledger(app_dsn, "end")) == len(short),
            timeout=30,
            message="every short job done while the long one runs",
        )
        assert [r[0] for r in ledger(app_dsn, "start")] == [long_job]
        assert sorted(r[0] for r in ledger(app_dsn, "end")) == sorted(short)
        assert scalar(app_dsn, "SELECT state FROM pgqueue.jobs WHERE id = %s", (long_job,)) == (
            "running"
        )
        assert pgq.cancel(long_job) == "cancelling"
        wait_for(
            lambda: w.worker.stats.cancelled == 1 and w.worker.stats.succeeded == len(short),
            message="long job cancelled",
        )
    assert [r[0] for r in ledger(app_dsn, "cancelled")] == [long_job]


def test_the_slot_of_an_abandoned_sync_handler_runs_the_next_jobs(app_dsn, pgq):
    # One slot: the handler past its timeout keeps its thread, the jobs after it get another.
    worker_app.STUCK_GATE.clear()
    stuck = pgq.enqueue(worker_app.sync_stuck, {}, priority=-10)  # its max_attempts=1
    after = pgq.enqueue_many([pgq.spec("sync_noop", {"n": i}, {}) for i in range(5)])
    try:
        with thread_worker(APP, app_dsn, concurrency=1, poll_interval=600) as w:
            wait_for(lambda: len(ledger(app_dsn, "end")) == len(after), message="jobs after it ran")
            assert sorted(r[0] for r in ledger(app_dsn, "end")) == sorted(after)
            [dead] = wait_for(pgq.admin.dead_letters, message="the timeout written")
            assert dead["id"] == stuck and "thread abandoned" in dead["errors"][0]["message"]
            assert w.worker.executor is not None and w.worker.executor.abandoned == 1
            worker_app.STUCK_GATE.set()
            wait_for(lambda: w.worker.executor.abandoned == 0, message="abandoned one finished")
        assert [r[0] for r in ledger(app_dsn, "end")][-1] == stuck  # it did finish, late
        assert len(pgq.admin.dead_letters()) == 1 and w.worker.stats.succeeded == len(after)
    finally:
        worker_app.STUCK_GATE.set()


@pytest.mark.parametrize("concurrency", [1, 8])
def test_batched_sync_jobs_keep_their_own_outcomes(app_dsn, pgq, concurrency):
    squares = [pgq.enqueue("sync_square", {"n": n}, result_ttl=600) for n in range(120)]
    noops = pgq.enqueue_many([pgq.spec("sync_noop", {"n": i}, {}) for i in range(60)])
    broken = pgq.enqueue_many(
        [pgq.spec("always_fails", {}, {"max_attempts": 1}) for _ in range(15)]
    )
    refused = pgq.enqueue_many([pgq.spec("fails_for_good", {}, {}) for _ in range(15)])
    labels = {
        pgq.enqueue("with_context", {"label": f"l{i}"}, max_attempts=2): f"l{i}" for i in range(20)
    }
    with thread_worker(APP, app_dsn, concurrency=concurrency, burst=True) as w:
        w.join()
    assert [pgq.result(job, timeout=10) for job in squares] == [n * n for n in range(120)]
    ends = ledger(app_dsn, "end")
    assert sorted(r[0] for r in ends if r[0] in set(noops)) == sorted(noops)
    notes = {r[0]: r[5] for r in ends if r[0] in labels}
    assert notes == {job: f"{label}:with_context:default:1/2" for job, label in labels.items()}
    dead = {d["id"]: d for d in pgq.admin.dead_letters(limit=100)}
    assert set(dead) == {*broken, *refused}
    assert {e["error"] for j in broken for e in dead[j]["errors"]} == {"ValueError"}
    assert {dead[j]["reason"] for j in broken} == {"max attempts reached"}
    assert {e["error"] for j in refused for e in dead[j]["errors"]} == {"pgqueue.errors.Fail"}
    assert {len(dead[j]["errors"]) for j in (*broken, *refused)} == {1}
    assert w.worker.stats.succeeded == 120 + 60 + 20 and w.worker.stats.dead == 30
    assert scalar(app_dsn, "SELECT count(*) FROM pgqueue.jobs") == 0
