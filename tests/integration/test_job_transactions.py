"""``ctx.transaction()``: a handler's writes and its job's completion commit together.

Against real workers: an in-process one (async handlers, sync ones in threads; the application's
Django and SQLAlchemy connections) and ``pgq work --pool process`` (sync handlers in children),
both kept for the whole module on one database (queues ``tx`` and ``tx_proc``). Each job's
effect is a row of ``tx_effects`` written in its transaction: every test checks it is there
exactly once, from the attempt that completed the job. Lost COMMIT replies go through the fault
injection proxy (``tests/chaos/proxy.py``).
"""

from __future__ import annotations

import contextlib
import logging
import os
import uuid
from collections.abc import Iterator
from datetime import timedelta
from pathlib import Path
from threading import Thread
from typing import Any

import psycopg
import pytest

from pgqueue import JobContext, PgQueue
from pgqueue.db import plan as plans
from pgqueue.db.queries import query as named
from pgqueue.handler.job_context import ClaimedJob
from pgqueue.handler.job_transaction import complete
from tests.chaos.proxy import CLAIM_SYNC, TRANSACTION_COMMIT, Proxy
from tests.helpers import (
    ThreadWorker,
    scalar,
    spawn_worker,
    stop_workers,
    wait_for,
    worker_through_proxy,
)
from tests.integration import tx_app
from tests.integration.test_caller_transactions import _django

APP = "tests.integration.tx_app:pgq"
LEASE = 3.0  # a heartbeat every second


@pytest.fixture(scope="module")
def tx_dsn(module_dsn: str) -> Iterator[str]:
    with psycopg.connect(module_dsn, autocommit=True) as conn:
        conn.execute(tx_app.EFFECTS_DDL)
    before = os.environ.get("PGQUEUE_DSN")
    os.environ["PGQUEUE_DSN"] = module_dsn  # the handlers' own connections (SQLAlchemy, ...)
    try:
        yield module_dsn
    finally:
        if before is None:
            os.environ.pop("PGQUEUE_DSN", None)
        else:
            os.environ["PGQUEUE_DSN"] = before


@pytest.fixture(scope="module")
def worker(tx_dsn: str) -> Iterator[ThreadWorker]:
    """Async handlers and sync ones in threads, in this process (Django set up for them)."""
    _django(tx_dsn)
    worker = ThreadWorker(tx_app.pgq, tx_dsn, queues=["tx"], lease=LEASE, concurrency=4)
    worker.start()
    try:
        wait_for(lambda: worker.worker.executor is not None, message="the worker to start")
        yield worker
    finally:
        worker.stop()


@pytest.fixture(scope="module")
def process_worker(tx_dsn: str, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Path]:
    """``pgq work --pool process``: sync handlers in child processes. Yields its log."""
    log = tmp_path_factory.mktemp("tx") / "worker.log"
    proc = spawn_worker(
        tx_dsn, "--pool", "process", "--queue", "tx_proc", "--lease", f"{LEASE:g}s",
        "--concurrency", "2", app=APP, log=log,
    )  # fmt: skip
    try:
        wait_for(lambda: "worker started" in log.read_text(), timeout=60,
                 message="the process worker to start")  # fmt: skip
        yield log
    finally:
        stop_workers([proc])


@pytest.fixture(scope="module")
def pgq(tx_dsn: str) -> Iterator[PgQueue]:
    with PgQueue(tx_dsn) as queue:
        yield queue


def enqueue(pgq: PgQueue, task: str, args: dict[str, Any] | None = None, **options: Any) -> int:
    """As the app's task: its queue and result_ttl apply."""
    return int(pgq.enqueue(tx_app.pgq.tasks[task], args, **options))


def effects(dsn: str, job: int) -> list[tuple[int, str]]:
    """(attempt, via) of every effect the job committed."""
    with psycopg.connect(dsn) as conn:
        return [
            (int(a), str(v))
            for a, v in conn.execute(
                "SELECT attempt, via FROM tx_effects WHERE job_id = %s ORDER BY id", (job,)
            ).fetchall()
        ]


def marks(dsn: str, job: int, event: str) -> list[tuple[int, Any]]:
    with psycopg.connect(dsn) as conn:
        return [
            (int(a), n)
            for a, n in conn.execute(
                "SELECT attempt, note FROM ledger WHERE job_id = %s AND event = %s ORDER BY seq",
                (job, event),
            ).fetchall()
        ]


def finished(dsn: str, job: int, timeout: float = 30.0) -> None:
    wait_for(
        lambda: not scalar(dsn, "SELECT count(*) FROM pgqueue.jobs WHERE id = %s", (job,)),
        timeout=timeout,
        message=f"job {job} to finish",
    )


def history_state(dsn: str, job: int) -> str | None:
    return scalar(dsn, "SELECT state FROM pgqueue.job_history WHERE id = %s", (job,))


def take_lease(dsn: str, job: int) -> None:
    """What a stalled worker suffers: the lease of the job's first attempt runs out and the
    reaper gives the job back. (On a loaded machine that lease may have run out by itself, its
    heartbeats late by more than LEASE: the worker's reaper took it already, and so it is.)"""
    with psycopg.connect(dsn) as conn:
        expired = conn.execute(
            "UPDATE pgqueue.jobs SET lease_expires_at = now() - interval '1 second'"
            " WHERE id = %s AND state = 'running' AND attempts = 1 RETURNING id",
            (job,),
        ).fetchall()
        assert conn.execute(
            "SELECT pgqueue.reap(backoff_base => 0.0, backoff_cap => 0.0)"
        ).fetchone() == (len(expired),)
    assert (
        scalar(
            dsn,
            "SELECT count(*) FROM pgqueue.jobs WHERE id = %s AND state = 'running'"
            " AND attempts = 1",
            (job,),
        )
        == 0
    )


# -- the worker's own connection --------------------------------------------------------------


@pytest.mark.parametrize(("task", "via"), [("tx.sync", "sync"), ("tx.async", "async")])
def test_the_writes_and_the_completion_commit_together(worker, pgq, tx_dsn, task, via):
    job = enqueue(pgq, task, {"result": {"kept": task}})
    assert pgq.result(job, timeout=30) == {"kept": task}  # set_result, recorded by it
    assert effects(tx_dsn, job) == [(1, via)]
    assert history_state(tx_dsn, job) == "succeeded"  # recorded as the ack would


@pytest.mark.parametrize(
    ("task", "via"),
    [("tx.sync", "sync"), ("tx.async", "async"), ("tx.django", "django"),
     ("tx.sqlalchemy", "sqlalchemy")],
)  # fmt: skip
def test_an_error_in_the_block_rolls_it_back_and_the_job_runs_again(worker, pgq, tx_dsn, task, via):
    job = enqueue(pgq, task, {"raise_in": True})
    finished(tx_dsn, job)
    assert effects(tx_dsn, job) == [(2, via)]  # the first attempt's write was rolled back


def test_after_the_block_the_job_is_complete_whatever_the_handler_does(worker, pgq, tx_dsn):
    stats = worker.worker.stats
    succeeded, stale = stats.succeeded, stats.stale
    raises = enqueue(pgq, "tx.sync", {"raise_after": True})
    twice = enqueue(pgq, "tx.sync", {"again": True})
    returns = enqueue(pgq, "tx.sync", {"returns": "not kept"})
    both = enqueue(pgq, "tx.sync", {"result": "kept", "returns": "not kept"})
    for job in (raises, twice, returns, both):
        finished(tx_dsn, job)
        assert effects(tx_dsn, job) == [(1, "sync")]  # once: no retry, no second block
    assert pgq.result(returns, timeout=5) is None
    assert pgq.result(both, timeout=5) == "kept"
    wait_for(lambda: stats.succeeded == succeeded + 4, message="the successes reported")
    assert stats.stale == stale  # the completer wrote nothing for them


@pytest.mark.parametrize(
    ("task", "args"), [("tx.lost", {}), ("tx.lost", {"orm": True}), ("tx.async_lost", {})]
)
def test_a_lost_lease_rolls_the_whole_transaction_back(worker, pgq, tx_dsn, task, args):
    job = enqueue(pgq, task, args)
    wait_for(lambda: marks(tx_dsn, job, "waiting"), message="the block to be open")
    take_lease(tx_dsn, job)
    finished(tx_dsn, job)
    # The first attempt's write is gone with its transaction; the job ran again and its
    # second attempt's transaction completed it.
    assert [a for a, _ in effects(tx_dsn, job)] == [2]
    # The first attempt may still be on its way out while the second completes the job.
    wait_for(lambda: marks(tx_dsn, job, "raised"), message="the first attempt to end")
    raised = marks(tx_dsn, job, "raised")
    assert raised[0][0] == 1
    # The fence (LeaseLost), or the heartbeat noticing first and cancelling an async handler.
    assert raised[0][1] in ("LeaseLost", "CancelledError")
    if task == "tx.lost":
        assert raised[0][1] == "LeaseLost"


def test_a_slow_transaction_does_not_hold_up_the_heartbeats(worker, pgq, tx_dsn):
    """The block stays open for longer than the lease: the heartbeats go on extending it (the
    job's row is not locked until the completion, the transaction's last statement), other
    jobs run meanwhile, and nothing deadlocks."""
    deadlocks = "SELECT deadlocks FROM pg_stat_database WHERE datname = current_database()"
    before = scalar(tx_dsn, deadlocks)
    lost = worker.worker.stats.lost
    slow = enqueue(pgq, "tx.sync", {"hold": LEASE + 1.5})
    slow_async = enqueue(pgq, "tx.async", {"hold": LEASE + 1.5})
    wait_for(
        lambda: marks(tx_dsn, slow, "holding") and marks(tx_dsn, slow_async, "holding"),
        message="the blocks to be open",
    )
    lease_of = "SELECT lease_expires_at FROM pgqueue.jobs WHERE id = %s"
    first = scalar(tx_dsn, lease_of, (slow,))
    others = [enqueue(pgq, "tx.sync") for _ in range(10)]
    for job in others:
        finished(tx_dsn, job)
    wait_for(
        lambda: (scalar(tx_dsn, lease_of, (slow,)) or first) > first,
        timeout=LEASE,
        message="a heartbeat to extend the open block's lease",
    )
    for job in (slow, slow_async, *others):
        finished(tx_dsn, job)
        assert len(effects(tx_dsn, job)) == 1
    assert worker.worker.stats.lost == lost
    assert scalar(tx_dsn, deadlocks) == before


@pytest.mark.parametrize("task", ["tx.sync", "tx.async"])
def test_a_heartbeat_after_the_commit_is_no_lost_lease(worker, pgq, tx_dsn, task):
    """The handler goes on for two leases after its block committed: the heartbeats find the
    row gone, and must neither stop the handler nor count a lost lease."""
    lost, stale = worker.worker.stats.lost, worker.worker.stats.stale
    job = enqueue(pgq, task, {"then_sleep": LEASE * 2 / 3 + 0.5})
    wait_for(lambda: marks(tx_dsn, job, "after"), timeout=30, message="the handler to end")
    assert marks(tx_dsn, job, "after") == [(1, "running")]
    assert effects(tx_dsn, job) == [(1, task.removeprefix("tx."))]
    assert (worker.worker.stats.lost, worker.worker.stats.stale) == (lost, stale)


# -- the application's connections -------------------------------------------------------------


@pytest.mark.parametrize(
    ("task", "args", "via"),
    [
        ("tx.django", {}, "django"),
        ("tx.sqlalchemy", {}, "sqlalchemy"),
        ("tx.sqlalchemy", {"core": True}, "sqlalchemy core"),
        ("tx.sqlalchemy_async", {}, "sqlalchemy async"),
        ("tx.sqlalchemy_async", {"core": True}, "sqlalchemy async core"),
        ("tx.psycopg", {}, "psycopg"),
        ("tx.psycopg_async", {}, "psycopg async"),
    ],
)
def test_the_applications_connection_carries_the_transaction(worker, pgq, tx_dsn, task, args, via):
    job = enqueue(pgq, task, args)
    finished(tx_dsn, job)
    assert effects(tx_dsn, job) == [(1, via)]


def test_a_connection_already_in_a_transaction_is_refused(worker, pgq, tx_dsn):
    job = enqueue(pgq, "tx.psycopg", {"in_transaction": True}, max_attempts=1)
    finished(tx_dsn, job)
    error = scalar(tx_dsn, "SELECT last_error FROM pgqueue.dead_letters WHERE id = %s", (job,))
    assert "already in a transaction" in error
    assert effects(tx_dsn, job) == []


def test_a_job_that_took_a_limits_last_place_notifies_when_its_transaction_commits(
    worker, pgq, tx_dsn
):
    pgq.flow.configure_task("tx.limited", concurrency_limit=1)
    try:
        with psycopg.connect(tx_dsn, autocommit=True) as listener:
            listener.execute("LISTEN pgqueue_jobs")
            job = enqueue(pgq, "tx.limited", {"hold": 1.0})
            wait_for(lambda: marks(tx_dsn, job, "holding"), message="the block to be open")
            list(listener.notifies(timeout=0.1))  # the enqueue's
            finished(tx_dsn, job)
            notes = [n.payload for n in listener.notifies(timeout=5, stop_after=1)]
        assert notes == ["tx"]  # sent by its completion, delivered at its commit
        assert effects(tx_dsn, job) == [(1, "limited")]
    finally:
        pgq.flow.configure_task("tx.limited", concurrency_limit=None)


# -- child processes (--pool process) ----------------------------------------------------------


def test_a_childs_transaction_completes_its_job(process_worker, pgq, tx_dsn):
    job = enqueue(pgq, "tx.proc", {"result": [1, 2]})
    assert pgq.result(job, timeout=60) == [1, 2]
    [(attempt, via)] = effects(tx_dsn, job)
    assert (attempt, via) == (1, "process")
    pid = scalar(tx_dsn, "SELECT pid FROM tx_effects WHERE job_id = %s", (job,))
    assert pid != os.getpid()


def test_a_childs_lost_lease_rolls_its_transaction_back(process_worker, pgq, tx_dsn):
    job = enqueue(pgq, "tx.proc", {"lose": True})
    wait_for(lambda: marks(tx_dsn, job, "waiting"), timeout=60, message="the block to be open")
    take_lease(tx_dsn, job)
    finished(tx_dsn, job)
    assert effects(tx_dsn, job) == [(2, "process")]
    wait_for(lambda: "the job's transaction was rolled back" in process_worker.read_text(),
             message="the worker to log the lost lease")  # fmt: skip


def test_a_child_goes_on_after_its_commit_unharmed(process_worker, pgq, tx_dsn):
    job = enqueue(pgq, "tx.proc", {"then_sleep": LEASE * 2 / 3 + 0.5})
    wait_for(lambda: marks(tx_dsn, job, "after"), timeout=60, message="the handler to end")
    assert marks(tx_dsn, job, "after") == [(1, "running")]
    assert effects(tx_dsn, job) == [(1, "process")]
    about = [line for line in process_worker.read_text().splitlines() if f"job_id={job} " in line]
    assert about and not [line for line in about if "lease lost" in line]


# -- a claim whose COMMIT is still on its way --------------------------------------------------


def _claim(conn: psycopg.Connection[Any], worker_id: str) -> JobContext:
    """Claim the one job of queue ``tx_unclaimed`` (no worker serves it) on ``conn``."""
    row = conn.execute(
        named("claim_jobs"),
        {
            "queues": ["tx_unclaimed"],
            "tasks": ["tx.sync"],
            "lease": timedelta(seconds=30),
            "worker_id": worker_id,
            "limit": 1,
            "after_priority": [None],
            "after_run_at": [None],
            "after_id": [None],
        },
    ).fetchone()
    assert row is not None
    return JobContext(ClaimedJob.from_row(row), worker_id)


def _complete_in_thread(dsn: str, ctx: JobContext) -> tuple[Thread, dict[str, Any]]:
    done: dict[str, Any] = {}

    def run() -> None:
        with psycopg.connect(dsn) as conn, conn.transaction():
            done["row"] = plans.run(complete(ctx, None, unsettled=True), conn)

    thread = Thread(target=run)
    thread.start()
    return thread, done


@pytest.mark.parametrize("claim", ["commits", "rolls back"])
def test_a_completion_waits_for_a_claim_still_committing(pgq, tx_dsn, claim):
    """An idle worker starts a job while its claim's COMMIT is on its way: a completion sent
    meanwhile would see the row as it was before the claim and find nothing. Told the claim is
    unsettled, it waits for it (the claim's row lock), then completes, or finds the job not its
    own."""
    worker_id = str(uuid.uuid4())
    job = enqueue(pgq, "tx.sync", queue="tx_unclaimed")
    with psycopg.connect(tx_dsn) as claimer:  # the claim's transaction stays open
        ctx = _claim(claimer, worker_id)
        with psycopg.connect(tx_dsn) as conn, conn.transaction():
            assert plans.run(complete(ctx, None), conn) is None  # without waiting: nothing
        thread, done = _complete_in_thread(tx_dsn, ctx)
        wait_for(
            lambda: scalar(
                tx_dsn,
                "SELECT count(*) FROM pg_stat_activity WHERE wait_event_type = 'Lock'"
                " AND datname = current_database()",
            ),
            message="the completion to wait for the claim",
        )
        claimer.commit() if claim == "commits" else claimer.rollback()
        thread.join(10)
    if claim == "commits":
        assert done["row"] is not None and done["row"].id == job
        finished(tx_dsn, job)
    else:
        assert done["row"] is None
        assert scalar(tx_dsn, "SELECT state FROM pgqueue.jobs WHERE id = %s", (job,)) == "ready"
        pgq.cancel(job)


def test_a_token_handed_out_again_to_another_worker_is_not_completed(pgq, tx_dsn):
    """A claim the server lost (a crash before its WAL flush) can hand the same lease token to
    another worker: the unsettled completion checks the row is this worker's."""
    job = enqueue(pgq, "tx.sync", queue="tx_unclaimed")
    with psycopg.connect(tx_dsn) as claimer:
        ctx = _claim(claimer, str(uuid.uuid4()))
        claimer.execute(
            "UPDATE pgqueue.jobs SET worker_id = %s WHERE id = %s", (str(uuid.uuid4()), job)
        )
    with psycopg.connect(tx_dsn) as conn, conn.transaction():
        assert plans.run(complete(ctx, None, unsettled=True), conn) is None
    pgq.cancel(job)


# -- a COMMIT without a reply ------------------------------------------------------------------


@pytest.fixture
def proxied_worker(tx_dsn: str) -> Iterator[tuple[ThreadWorker, Proxy]]:
    with proxied(tx_dsn) as both:
        yield both


def proxied(
    tx_dsn: str, **settings: Any
) -> contextlib.AbstractContextManager[tuple[ThreadWorker, Proxy]]:
    """A worker whose connections go through the fault-injection proxy (its own queue)."""
    return worker_through_proxy(tx_app.pgq, tx_dsn, queues=["tx_proxied"], lease=LEASE, **settings)


@pytest.mark.parametrize("lose", ["reply", "request"])
@pytest.mark.parametrize("task", ["tx.sync", "tx.async"])
def test_a_commit_whose_reply_is_lost_is_settled_once(
    proxied_worker, pgq, tx_dsn, task, lose, caplog
):
    """``reply``: the server committed, the reply never came: the block finds out and the job is
    complete. ``request``: the COMMIT never arrived and the server holds the transaction open:
    its backend is ended, the transaction did not commit, and the job runs again."""
    worker, proxy = proxied_worker
    caplog.set_level(logging.INFO, logger="pgqueue.transaction")
    proxy.trap(TRANSACTION_COMMIT, lose=lose)
    job = enqueue(pgq, task, queue="tx_proxied")
    finished(tx_dsn, job)
    wait_for(lambda: worker.worker.stats.succeeded, message="the worker to report the job")
    assert proxy.trapped == 1
    via = task.removeprefix("tx.")
    if lose == "reply":
        assert effects(tx_dsn, job) == [(1, via)]
        assert "COMMIT reply was lost; it committed" in caplog.text
    else:
        assert effects(tx_dsn, job) == [(2, via)]
        assert "got no reply and did not commit" in caplog.text
    assert (worker.worker.stats.succeeded, worker.worker.stats.stale) == (1, 0)


def test_a_claim_whose_commit_reply_was_lost_is_proven_by_the_jobs_transaction(pgq, tx_dsn, caplog):
    """An idle worker's claim commits but its COMMIT's reply is lost: the handler runs on
    until the worker has asked the database, and its transaction completes the job (its
    completion found the row running under this lease, so the claim committed). The job is
    complete once, and the worker reports it as such rather than dropping its outcome."""
    caplog.set_level(logging.WARNING, logger="pgqueue.worker")
    # No polling: the only claim after the trap is the one the enqueue's notification wakes.
    with proxied(tx_dsn, poll_interval=600, reaper_interval=600) as (worker, proxy):
        # Done with its start-up's last claim (which found nothing): the next claim is the
        # one the enqueue below wakes.
        wait_for(lambda: proxy.quiet_for() > 0.5, message="the worker to wait for work")
        proxy.trap(CLAIM_SYNC, whole=True)
        job = enqueue(pgq, "tx.sync", queue="tx_proxied")
        finished(tx_dsn, job)
        wait_for(lambda: worker.worker.stats.succeeded, message="the worker to report the job")
        assert proxy.trapped == 1
    assert effects(tx_dsn, job) == [(1, "sync")]
    (settled,) = [r for r in caplog.records if r.getMessage().startswith("claim committed")]
    assert settled.job_ids == str(job)
    assert "claim did not commit" not in caplog.text
    assert "outcome not written" not in caplog.text
    assert (worker.worker.stats.succeeded, worker.worker.stats.stale) == (1, 0)
