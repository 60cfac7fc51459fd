"""Job results: which acks keep them, pgq.result() (sync and async) woken by NOTIFY."""

from __future__ import annotations

import asyncio
import os
import threading
import time

import psycopg
import pytest

from pgqueue import (
    InvalidJobError,
    JobCancelledError,
    JobDeadError,
    JobNotFoundError,
    ResultTimeoutError,
    ResultUnavailableError,
)
from tests.helpers import scalar, thread_worker, wait_for
from tests.integration import workflow_app
from tests.integration.workflow_app import add, async_add, plain, unstorable

APP = workflow_app.pgq


def history_rows(dsn: str) -> int:
    return scalar(dsn, "SELECT count(*) FROM pgqueue.job_history")


def test_result_of_a_task_that_keeps_it(app_dsn, pgq):
    job = pgq.enqueue(add, {"x": 2, "y": 3})
    other = pgq.enqueue(async_add, {"x": 40, "y": 2})
    with thread_worker(APP, app_dsn):
        assert pgq.result(job, timeout=30) == 5
        assert pgq.result(other, timeout=30) == 42
    # kept until keep_until, which is at least the task's result_ttl
    with psycopg.connect(app_dsn) as conn:
        left = conn.execute(
            "SELECT state, result, keep_until - finished_at >= interval '1 hour'"
            " FROM pgqueue.job_history WHERE id = %s",
            (job,),
        ).fetchone()
    assert left == ("succeeded", 5, True)


def test_plain_acks_leave_no_row_and_result_says_so(app_dsn, pgq):
    kept = pgq.enqueue(plain, {"x": 4}, result_ttl=60)  # the call asks for it
    ignored = pgq.enqueue(plain, {"x": 5})
    with pytest.raises(ResultUnavailableError, match="does not keep its result"):
        pgq.result(ignored, timeout=1)
    with thread_worker(APP, app_dsn, burst=True) as w:
        w.join()
    assert pgq.result(kept, timeout=5) == 8
    assert history_rows(app_dsn) == 1  # the plain ack was a DELETE only
    # Gone from the queue, it still did not keep its result (what the README promises), and
    # it was a job: never "not found".
    with pytest.raises(ResultUnavailableError, match="did not keep its result"):
        pgq.result(ignored, timeout=1)


def test_result_of_a_finished_job_that_kept_nothing_sync_and_async(app_dsn, pgq):
    ignored = pgq.enqueue(plain, {"x": 5})
    with thread_worker(APP, app_dsn, burst=True) as w:
        w.join()
    assert scalar(app_dsn, "SELECT count(*) FROM pgqueue.jobs") == 0
    never_issued = ignored + 1000

    async def main() -> None:
        try:
            with pytest.raises(ResultUnavailableError, match="did not keep its result"):
                await pgq.result_async(ignored, timeout=1)
            with pytest.raises(JobNotFoundError, match="never handed out"):
                await pgq.result_async(never_issued, timeout=1)
        finally:
            await pgq.aclose()

    with pytest.raises(ResultUnavailableError, match="did not keep its result") as raised:
        pgq.result(ignored, timeout=1)
    assert "result_ttl" in str(raised.value)  # says how to keep it
    with pytest.raises(JobNotFoundError, match="never handed out"):
        pgq.result(never_issued, timeout=1)
    asyncio.run(main())


def test_result_after_the_kept_result_was_pruned(app_dsn, pgq):
    job = pgq.enqueue(add, {"x": 2, "y": 2})
    with thread_worker(APP, app_dsn, burst=True) as w:
        w.join()
    assert pgq.result(job, timeout=5) == 4
    with psycopg.connect(app_dsn) as conn:  # its hour has passed
        conn.execute(
            "UPDATE pgqueue.job_history SET keep_until = now() - interval '1 second',"
            " finished_at = now() - interval '30 days' WHERE id = %s",
            (job,),
        )
    with pytest.raises(ResultUnavailableError, match="expired"):
        pgq.result(job, timeout=1)
    assert pgq.retention.prune().history >= 1
    assert history_rows(app_dsn) == 0
    with pytest.raises(ResultUnavailableError, match="expired"):
        pgq.result(job, timeout=1)


def test_result_of_an_id_on_a_fresh_database(pgq):
    # No job was ever enqueued: the sequence has handed out nothing, every id is unknown.
    with pytest.raises(JobNotFoundError, match="never handed out"):
        pgq.result(1, timeout=1)


def test_result_waits_for_notify_not_polling(app_dsn, pgq, monkeypatch):
    # Without the notification the waiter would sleep for 10 minutes: only NOTIFY can wake it.
    monkeypatch.setattr("pgqueue.db.results.RECHECK_SECONDS", 600.0)
    job = pgq.enqueue(add, {"x": 1, "y": 1})
    got: list[object] = []
    waiter = threading.Thread(target=lambda: got.append(pgq.result(job, timeout=60)))
    waiter.start()
    time.sleep(0.5)  # the waiter is listening and the job is still waiting for a worker
    assert not got
    with thread_worker(APP, app_dsn):
        waiter.join(120)
    assert got == [2]


def test_result_async(app_dsn, pgq):
    job = pgq.enqueue(add, {"x": 20, "y": 1})

    async def main() -> object:
        try:
            return await pgq.result_async(job, timeout=30)
        finally:
            await pgq.aclose()

    with thread_worker(APP, app_dsn):
        assert asyncio.run(main()) == 21


def test_result_raises_the_jobs_error_when_dead_or_cancelled(app_dsn, pgq):
    dead = pgq.enqueue("wf.fail", {"label": "x"}, result_ttl=60)
    waiting = pgq.enqueue(add, {"x": 1}, delay=3600)
    assert pgq.cancel(waiting) == "cancelled"
    with pytest.raises(JobCancelledError) as cancelled:
        pgq.result(waiting, timeout=5)
    assert cancelled.value.state == "cancelled"
    with (
        thread_worker(APP, app_dsn),
        pytest.raises(JobDeadError, match="x cannot work") as died,
    ):
        pgq.result(dead, timeout=30)
    assert died.value.job_id == dead and died.value.state == "dead"


def test_result_times_out(app_dsn, pgq):
    job = pgq.enqueue(add, {"x": 1})
    started = time.monotonic()
    with pytest.raises(ResultTimeoutError, match=r"did not finish within 0\.5s"):
        pgq.result(job, timeout=0.5)
    assert time.monotonic() - started < 30  # gave up, did not wait for ever
    with pytest.raises(JobNotFoundError):
        pgq.result(10**12, timeout=0.1)


def test_result_async_times_out(app_dsn, pgq):
    """The timeout's ResultTimeoutError is a TimeoutError: the wait between two looks, which
    gives up quietly on its own TimeoutError, let it pass and looked again for ever (at full
    speed: every look a query)."""
    job = pgq.enqueue(add, {"x": 1})

    async def main() -> None:
        try:
            started = time.monotonic()
            with pytest.raises(ResultTimeoutError, match=r"did not finish within 0\.5s"):
                await asyncio.wait_for(pgq.result_async(job, timeout=0.5), 20)
            assert time.monotonic() - started < 20
        finally:
            await pgq.aclose()

    asyncio.run(main())


def test_unserialisable_result_fails_the_job_with_a_clear_error(app_dsn, pgq):
    job = pgq.enqueue(unstorable, {})
    with thread_worker(APP, app_dsn):
        with pytest.raises(JobDeadError, match="cannot be stored: result is not JSON-serialisable"):
            pgq.result(job, timeout=30)
        # the worker carried on: the next job runs
        assert pgq.result(pgq.enqueue(add, {"x": 1}), timeout=30) == 1
    with psycopg.connect(app_dsn) as conn:
        [(error, reason)] = conn.execute(
            "SELECT errors -> -1 ->> 'error', reason FROM pgqueue.dead_letters"
        ).fetchall()
    assert error == "pgqueue.errors.InvalidJobError"
    assert "Fail" in reason


def test_history_of_every_succeeded_job_when_switched_on(app_dsn, pgq):
    pgq.retention.set(record_succeeded=True)
    ids = pgq.enqueue_many([plain.s(i) for i in range(20)])
    with thread_worker(APP, app_dsn, burst=True) as w:
        w.join()
    with psycopg.connect(app_dsn) as conn:
        rows = conn.execute(
            "SELECT count(*), count(result), count(keep_until) FROM pgqueue.job_history"
            " WHERE state = 'succeeded' AND id = ANY(%s)",
            (ids,),
        ).fetchone()
    assert rows == (20, 0, 0)  # recorded, but results are kept only when asked for


def test_result_ttl_option_is_validated(pgq, conn):
    from pgqueue import InvalidJobError

    with pytest.raises(InvalidJobError, match="result_ttl must be positive"):
        pgq.enqueue(plain, {"x": 1}, result_ttl=0)
    with pytest.raises(InvalidJobError, match="result_ttl must be seconds"):
        pgq.enqueue(plain, {"x": 1}, result_ttl="1h")
    assert scalar(pgq.dsn, "SELECT count(*) FROM pgqueue.jobs") == 0


def test_result_ttl_survives_an_idempotent_enqueue_and_a_transaction(app_dsn, pgq):
    with psycopg.connect(app_dsn) as app_conn:
        plain.options(result_ttl=60, idempotency_key="k", conn=app_conn).enqueue(3)
        app_conn.rollback()
    assert scalar(app_dsn, "SELECT count(*) FROM pgqueue.jobs") == 0
    job = pgq.enqueue(plain, {"x": 3}, result_ttl=60, idempotency_key="k")
    again = pgq.enqueue(plain, {"x": 3}, result_ttl=60, idempotency_key="k")
    assert again == job and not again.created
    with thread_worker(APP, app_dsn):
        assert pgq.result(job, timeout=30) == 6
    wait_for(lambda: history_rows(app_dsn) == 1)


def test_result_of_a_finished_job_through_the_worker_and_admin_roles(app_dsn, pgq):
    # The sequence's last value needs only USAGE on it, which `pgq roles` grants them.
    from psycopg import sql
    from psycopg.conninfo import make_conninfo

    from pgqueue import PgQueue
    from pgqueue.db.roles import RoleNames, apply

    n = f"{os.getpid()}_results"
    names = RoleNames(producer=f"rp_{n}", worker=f"rw_{n}", admin=f"ra_{n}")
    apply(app_dsn, names)
    try:
        ignored = pgq.enqueue(plain, {"x": 5})
        with thread_worker(APP, app_dsn, burst=True) as w:
            w.join()
        for role in (names.worker, names.admin):
            client = PgQueue(make_conninfo(app_dsn, user=role))
            try:
                with pytest.raises(ResultUnavailableError, match="did not keep its result"):
                    client.result(ignored, timeout=1)
                with pytest.raises(JobNotFoundError, match="never handed out"):
                    client.result(ignored + 1000, timeout=1)
            finally:
                client.close()
    finally:
        with psycopg.connect(app_dsn, autocommit=True) as conn:
            for _, name in names.items():
                conn.execute(sql.SQL("DROP OWNED BY {}").format(sql.Identifier(name)))
                conn.execute(sql.SQL("DROP ROLE {}").format(sql.Identifier(name)))


def test_a_kept_result_expires_after_its_result_ttl_then_is_pruned(app_dsn, pgq):
    """result_ttl by the database's clock: readable until then, "has expired" after, and gone
    (kept nothing) once the pruner has run."""
    pgq.retention.set(history=0)
    job = pgq.enqueue(plain, {"x": 21}, result_ttl=1)
    with thread_worker(APP, app_dsn, burst=True, prune_interval=None) as w:  # pruned below
        w.join()
    assert pgq.result(job, timeout=1) == 42
    kept_for = scalar(
        app_dsn, "SELECT keep_until - finished_at FROM pgqueue.job_history WHERE id = %s", (job,)
    )
    assert kept_for.total_seconds() == pytest.approx(1.0, abs=0.5)
    wait_for(
        lambda: scalar(
            app_dsn, "SELECT keep_until < now() FROM pgqueue.job_history WHERE id = %s", (job,)
        ),
        timeout=10,
        message="the result's keep_until to pass",
    )
    with pytest.raises(ResultUnavailableError, match="has expired"):
        pgq.result(job, timeout=1)
    assert pgq.retention.prune().history == 1
    with pytest.raises(ResultUnavailableError, match="did not keep its result"):
        pgq.result(job, timeout=1)


def test_result_of_a_finished_job_is_one_read_on_a_pooled_connection(app_dsn, pgq, monkeypatch):
    # A job that has ended needs no listening connection: pgq.result() reads it through the
    # pool, where it used to open a connection of its own, LISTEN, then read. A job still live
    # is waited for as before, on a connection of its own that LISTENs.
    job = pgq.enqueue(add, {"x": 3, "y": 4})
    with thread_worker(APP, app_dsn, burst=True) as w:
        w.join()
    assert pgq.result(job, timeout=5) == 7  # the pool is open
    opened: list[str] = []
    connect = psycopg.Connection.connect

    def counted(*args: object, **kwargs: object) -> psycopg.Connection:
        opened.append("connect")
        return connect(*args, **kwargs)  # type: ignore[arg-type]

    monkeypatch.setattr(psycopg, "connect", counted)
    assert [pgq.result(job, timeout=5) for _ in range(3)] == [7, 7, 7]
    assert opened == []
    waiting = pgq.enqueue(add, {"x": 1, "y": 1})
    with pytest.raises(ResultTimeoutError):
        pgq.result(waiting, timeout=0.2)
    assert opened == ["connect"]
    with pytest.raises(ValueError, match="must not be negative"):
        pgq.result(job, timeout=-1)


@pytest.mark.parametrize("timeout", [float("nan"), "5", True])
def test_a_timeout_that_is_not_a_number_of_seconds_is_refused_sync_and_async(pgq, timeout):
    """NaN compares false with everything: it passed the negative check and both forms waited
    for ever; a string failed on a raw comparison error."""
    job = pgq.enqueue(add, {"x": 1})
    with pytest.raises(ValueError, match=r"timeout must be a number of seconds .*, got"):
        pgq.result(job, timeout=timeout)

    async def main() -> None:
        try:
            with pytest.raises(ValueError, match=r"timeout must be a number of seconds .*, got"):
                await asyncio.wait_for(pgq.result_async(job, timeout=timeout), 10)
        finally:
            await pgq.aclose()

    asyncio.run(main())


def test_result_of_an_id_below_the_first_is_not_found_sync_and_async(pgq):
    """An id under 1 is no job's (the sequence starts at 1), yet once some job was enqueued it
    was below the sequence's last value, so "no longer in the queue": a wrong answer."""
    pgq.enqueue(add, {"x": 1})
    with pytest.raises(JobNotFoundError, match="never handed out"):
        pgq.result(0, timeout=1)

    async def main() -> None:
        try:
            with pytest.raises(JobNotFoundError, match="never handed out"):
                await asyncio.wait_for(pgq.result_async(-5, timeout=1), 10)
        finally:
            await pgq.aclose()

    asyncio.run(main())


@pytest.mark.parametrize("job_id", [1.5, 2.0, "1.5", True, None, 2**70])
def test_result_of_what_is_not_a_job_id_is_refused_sync_and_async(pgq, job_id):
    """``int()`` read 1.5 as job 1 (and 2.0 as job 2): the result of another job, or a wait
    for one that may never come; 2**70 reached the database as an out-of-range error."""
    pgq.enqueue(add, {"x": 1})
    with pytest.raises(InvalidJobError, match="a job id must be an integer"):
        pgq.result(job_id, timeout=1)

    async def main() -> None:
        try:
            with pytest.raises(InvalidJobError, match="a job id must be an integer"):
                await asyncio.wait_for(pgq.result_async(job_id, timeout=1), 10)
        finally:
            await pgq.aclose()

    asyncio.run(main())


def test_result_takes_an_id_as_its_decimal_string_sync_and_async(app_dsn, pgq):
    """An id read from a URL or a form, as ``cancel`` and ``progress`` take it."""
    job = pgq.enqueue(add, {"x": 1, "y": 2})
    with thread_worker(APP, app_dsn, burst=True) as w:
        w.join()
    assert pgq.result(str(int(job)), timeout=5) == 3

    async def main() -> int:
        try:
            return int(await asyncio.wait_for(pgq.result_async(f" {int(job)} ", timeout=5), 10))
        finally:
            await pgq.aclose()

    assert asyncio.run(main()) == 3
