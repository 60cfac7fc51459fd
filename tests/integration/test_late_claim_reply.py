"""A claim whose rows reach the worker after its jobs' leases may have run out.

The database sets a claimed job's lease to expire ``lease`` seconds after the claim ran. Its
rows can reach the worker much later: a lossy link retransmits them, or a handler blocks the
worker's event loop while they wait in its socket. Before, the worker started those jobs all
the same:

* an idle worker's claim (its transaction commits only once its rows are read) committed
  leases that had already expired, so any reaper could take the jobs from a worker that was
  running them;
* a busy worker's claim (committed at once) had its jobs taken by the reaper meanwhile, and the
  worker then ran them too, under a lease that was no longer theirs: twice in all.

Now rows that come after half a lease are first confirmed (their leases extended under the
claim's token) and only the jobs still this worker's start.

Connections go through the fault-injection proxy (``tests/chaos/proxy.py``), which holds the
claim's reply back for longer than a lease.
"""

from __future__ import annotations

import contextlib
import logging
import threading
import time
from collections.abc import Iterator
from typing import Any

import psycopg
import pytest

from pgqueue import PgQueue
from tests.chaos.proxy import CLAIM_SYNC
from tests.helpers import ThreadWorker, scalar, wait_for, worker_through_proxy

LEASE = 2.0
#: How late the claim's reply comes: well past the lease.
HOLD = 5.0
#: The plain claim's text, sent in full with every claim by a worker that prepares no
#: statements: a trap on it catches the next claim, whatever else the worker sends.
CLAIM_TEXT = b"WITH candidates AS MATERIALIZED"

app = PgQueue()
runs: list[tuple[int, int]] = []  # (job id, attempt) of every handler that started
#: Whether each started job's lease was live when its handler began (read by the handler).
live: dict[int, bool] = {}
release = threading.Event()
database: dict[str, str] = {}


def lease_is_live(job_id: int) -> bool:
    with psycopg.connect(database["dsn"], autocommit=True) as conn:
        row = conn.execute(
            "SELECT state = 'running' AND lease_expires_at > clock_timestamp()"
            " FROM pgqueue.jobs WHERE id = %s",
            (job_id,),
        ).fetchone()
    return bool(row and row[0])


@app.task(name="late.held", queue="late_claims", max_attempts=2, result_ttl=3600)
def held(n: int) -> int:
    from pgqueue import current_job

    ctx = current_job()
    runs.append((ctx.id, ctx.attempt))
    live[ctx.id] = lease_is_live(ctx.id)
    release.wait(30)
    return n


@contextlib.contextmanager
def proxied(dsn: str, **settings: Any) -> Iterator[tuple[ThreadWorker, Any]]:
    database["dsn"] = dsn
    with worker_through_proxy(
        app,
        dsn,
        queues=["late_claims"],
        lease=LEASE,
        prepare=False,
        poll_interval=600,
        reaper_interval=600,  # the test reaps, when it means to
        release=release,  # (a held job ends, so the worker can stop)
        **settings,
    ) as (worker, proxy):
        yield worker, proxy


@pytest.fixture(autouse=True)
def _fresh() -> Iterator[None]:
    runs.clear()
    live.clear()
    release.clear()
    yield
    release.set()


def finished(dsn: str, job: int) -> None:
    wait_for(
        lambda: not scalar(dsn, "SELECT count(*) FROM pgqueue.jobs WHERE id = %s", (job,)),
        timeout=30,
        message=f"job {job} to finish",
    )


def history(dsn: str, job: int) -> str | None:
    return scalar(
        dsn, "SELECT (state, attempts)::text FROM pgqueue.job_history WHERE id = %s", (job,)
    )


def test_an_idle_claims_late_rows_start_under_a_live_lease(pgq, dsn, caplog):
    """An idle worker's claim, its rows a few leases late: the job starts under a lease that
    holds, so no reaper can take it from the worker running it."""
    caplog.set_level(logging.DEBUG, logger="pgqueue")
    with proxied(dsn) as (_worker, proxy):
        wait_for(lambda: proxy.quiet_for() > 0.5, message="the worker to wait for work")
        proxy.trap(CLAIM_TEXT, lose="delay", hold=HOLD)
        job = pgq.enqueue("late.held", {"n": 1}, queue="late_claims", result_ttl=3600)
        wait_for(lambda: live, timeout=HOLD + 20, message="the job to start")
        assert proxy.trapped == 1
        assert live == {job: True}, "the job started under an expired lease"
        assert pgq.admin.reap() == 0
        release.set()
        finished(dsn, job)
    assert runs == [(job, 1)]
    assert history(dsn, job) == "(succeeded,1)"


def test_a_busy_claims_late_rows_taken_meanwhile_do_not_run_twice(pgq, dsn):
    """A busy worker's claim commits at once, its rows come a few leases late, and meanwhile
    the reaper takes the job back: the worker does not run it under the lost lease, only
    under the one it claims next."""
    with proxied(dsn, concurrency=2) as (_worker, proxy):
        busy = pgq.enqueue("late.held", {"n": 0}, queue="late_claims")
        wait_for(lambda: runs, message="the first job to start")
        wait_for(lambda: proxy.quiet_for() > 0.5, message="the worker to wait for work")
        proxy.trap(CLAIM_TEXT, lose="delay", hold=HOLD)
        job = pgq.enqueue("late.held", {"n": 1}, queue="late_claims", result_ttl=3600)
        wait_for(
            lambda: scalar(
                dsn,
                "SELECT lease_expires_at < now() FROM pgqueue.jobs WHERE id = %s",
                (job,),
            ),
            timeout=HOLD,
            message="the claimed job's lease to run out while its rows are held",
        )
        assert proxy.trapped == 1
        # The reaper takes it back (no backoff: the next claim may take it at once).
        assert scalar(dsn, "SELECT pgqueue.reap(backoff_base => 0.0, backoff_cap => 0.0)") == 1
        release.set()
        finished(dsn, job)
        finished(dsn, busy)
    assert [run for run in runs if run[0] == job] == [(job, 2)]
    assert history(dsn, job) == "(succeeded,2)"


def test_an_idle_claims_commit_reply_that_comes_late_keeps_the_lease(pgq, dsn):
    """An idle worker's claim commits, but the reply to its COMMIT comes a few leases late.
    Its job runs meanwhile (early start) and its outcome waits for that reply; its lease
    must hold all the while, or a reaper takes the job from the worker running it."""
    with proxied(dsn) as (_worker, proxy):
        wait_for(lambda: proxy.quiet_for() > 0.5, message="the worker to wait for work")
        proxy.trap(CLAIM_SYNC, whole=True, lose="delay", hold=HOLD)
        job = pgq.enqueue("late.held", {"n": 1}, queue="late_claims", result_ttl=3600)
        wait_for(lambda: runs, message="the job to start")
        assert proxy.trapped == 1
        wait_for(
            lambda: scalar(dsn, "SELECT state = 'running' FROM pgqueue.jobs WHERE id = %s", (job,)),
            message="the claim to commit",
        )
        time.sleep(1.5 * LEASE)  # the reply is still held back
        assert pgq.admin.reap() == 0, "the reaper took the job from the worker running it"
        assert scalar(
            dsn, "SELECT lease_expires_at > now() FROM pgqueue.jobs WHERE id = %s", (job,)
        )
        release.set()
        finished(dsn, job)
    assert runs == [(job, 1)]
    assert history(dsn, job) == "(succeeded,1)"
