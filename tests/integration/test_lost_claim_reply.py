"""A claim that committed though its reply was lost (the connection cut right after the server
committed it): the worker finds out, on a new connection, before it claims again.

Before, such a claim was taken for failed: its jobs sat claimed by this worker until their
leases expired, and the reaper then counted the attempt against them (a job with one attempt
went to the dead letters without having run). Now the jobs of an early claim (an idle
worker's, started before its COMMIT's reply came) are found to be this worker's and run on;
those of a claim whose rows never came back are handed back at once, the attempt not counted.

The lease is long (60 s): the old behaviour is a wait of a minute, the new one a few seconds.
Connections go through the fault-injection proxy (``tests/chaos/proxy.py``).
"""

from __future__ import annotations

import contextlib
import logging
import threading
from collections.abc import Iterator
from typing import Any

import pytest

from pgqueue import PgQueue
from tests.chaos.proxy import CLAIM_SYNC, Proxy
from tests.helpers import ThreadWorker, scalar, wait_for, worker_through_proxy

LEASE = 60.0
#: The plain claim's text, sent in full with every claim by a worker that prepares no
#: statements: a trap on it catches the next claim, whatever else the worker sends.
CLAIM_TEXT = b"WITH candidates AS MATERIALIZED"

app = PgQueue()
runs: list[tuple[int, int]] = []  # (job id, attempt) of every handler that started
release = threading.Event()


@app.task(name="lost.once", queue="lost_claims", max_attempts=1, result_ttl=3600)
async def once(n: int) -> int:
    from pgqueue import current_job

    ctx = current_job()
    runs.append((ctx.id, ctx.attempt))
    return n


@app.task(name="lost.held", queue="lost_claims", max_attempts=1, result_ttl=3600)
def held(n: int) -> int:
    from pgqueue import current_job

    ctx = current_job()
    runs.append((ctx.id, ctx.attempt))
    release.wait(30)
    return n


@contextlib.contextmanager
def proxied(dsn: str, **settings: Any) -> Iterator[tuple[ThreadWorker, Proxy]]:
    with worker_through_proxy(
        app,
        dsn,
        queues=["lost_claims"],
        lease=LEASE,
        poll_interval=600,
        reaper_interval=600,  # the jobs come back without the reaper's help
        release=release,  # (a held job ends, so the worker can stop)
        **settings,
    ) as (worker, proxy):
        yield worker, proxy


@pytest.fixture(autouse=True)
def _fresh() -> Iterator[None]:
    runs.clear()
    release.clear()
    yield
    release.set()


def history(dsn: str, job: int) -> str | None:
    return scalar(
        dsn, "SELECT (state, attempts)::text FROM pgqueue.job_history WHERE id = %s", (job,)
    )


def finished(dsn: str, job: int) -> None:
    wait_for(
        lambda: not scalar(dsn, "SELECT count(*) FROM pgqueue.jobs WHERE id = %s", (job,)),
        timeout=20,
        message=f"job {job} to finish well before its {LEASE:g} s lease ran out",
    )


def test_an_early_claim_that_committed_runs_its_job_on(pgq, dsn, caplog):
    """An idle worker's claim commits, its COMMIT's reply is lost: the job runs once, on."""
    caplog.set_level(logging.INFO, logger="pgqueue.worker")
    with proxied(dsn) as (worker, proxy):
        # Done with its start-up's last claim (which found nothing): the next claim is the
        # one the enqueue below wakes.
        wait_for(lambda: proxy.quiet_for() > 0.5, message="the worker to wait for work")
        proxy.trap(CLAIM_SYNC, whole=True)
        job = pgq.enqueue(
            "lost.once", {"n": 1}, queue="lost_claims", max_attempts=1, result_ttl=3600
        )
        finished(dsn, job)
        assert proxy.trapped == 1
        wait_for(lambda: worker.worker.stats.succeeded, message="the worker to report it")
    assert history(dsn, job) == "(succeeded,1)"
    assert runs == [(job, 1)]
    (settled,) = [r for r in caplog.records if r.getMessage().startswith("claim committed")]
    assert settled.job_ids == str(job)
    assert "claim did not commit" not in caplog.text


def test_a_claim_whose_rows_never_came_gives_its_jobs_back_at_once(pgq, dsn, caplog):
    """A busy worker's claim (one statement) commits, its reply is lost: the worker never saw
    the job. It hands it back before it claims again, the attempt not counted, and runs it."""
    caplog.set_level(logging.INFO, logger="pgqueue.worker")
    with proxied(dsn, prepare=False, concurrency=2) as (_worker, proxy):
        busy = pgq.enqueue("lost.held", {"n": 0}, queue="lost_claims")
        wait_for(lambda: runs, message="the first job to start")
        # Done with what followed that claim (its next claim found nothing): the next claim is
        # the one the enqueue below wakes.
        wait_for(lambda: proxy.quiet_for() > 0.5, message="the worker to wait for work")
        proxy.trap(CLAIM_TEXT)
        job = pgq.enqueue(
            "lost.once", {"n": 1}, queue="lost_claims", max_attempts=1, result_ttl=3600
        )
        finished(dsn, job)
        assert proxy.trapped == 1
        release.set()
        finished(dsn, busy)
    assert history(dsn, job) == "(succeeded,1)"
    assert runs == [(busy, 1), (job, 1)]
    (given_back,) = [r for r in caplog.records if r.getMessage().startswith("claimed jobs")]
    assert given_back.job_ids == str(job)
