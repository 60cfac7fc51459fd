"""Durable steps under ``pgqueue.testing`` (``drain`` / ``run_job``), on the queue's pool and in
a test's own transaction; the handler-side API of durable sleeps and waits (the signal the
worker will catch); retention of checkpoints and events."""

from __future__ import annotations

import asyncio
import math
from datetime import UTC, datetime, timedelta
from typing import Any

import psycopg
import pytest

from pgqueue import (
    ConstantBackoff,
    DuplicateStepError,
    EventTimeout,
    Fail,
    InvalidJobError,
    Item,
    JobContext,
    PgQueue,
    StepError,
    Task,
    current_job,
)
from pgqueue.db import durable
from pgqueue.db import plan as plans
from pgqueue.handler.job_context import ClaimedJob
from pgqueue.handler.job_transaction import TransactionHost
from pgqueue.handler.parking import JobParked
from pgqueue.testing import JobsFailed, drain, run_job
from tests.helpers import scalar


def _flow(pgq: PgQueue, calls: list[str]) -> tuple[Task[..., str], Task[..., None]]:
    def fetch(n: int) -> datetime:
        calls.append(f"fetch {n}")
        return datetime(2026, 1, n, tzinfo=UTC)

    def save(conn: psycopg.Connection[Any], when: datetime) -> int:
        calls.append("save")
        conn.execute("INSERT INTO ledger (event, note) VALUES ('saved', %s)", (when.isoformat(),))
        return 1

    @pgq.task(max_attempts=3, backoff=ConstantBackoff(0))
    def flow(n: int) -> str:
        ctx = current_job()
        when = ctx.step("fetch", fetch, n)
        assert isinstance(when, datetime)  # typed by fetch's annotation, replayed too
        ctx.step("save", save, when, transaction=True)
        if ctx.attempt == 1:
            raise RuntimeError("fails once after its steps")
        return when.isoformat()

    @pgq.task(max_attempts=1)
    def twice() -> None:
        ctx = current_job()
        ctx.step("a", calls.append, "a")
        ctx.step("a", calls.append, "a")

    return flow, twice


def test_drain_replays_completed_steps_on_the_retry(pgq, dsn):
    calls: list[str] = []
    flow, _ = _flow(pgq, calls)
    job = flow.enqueue(n=3)
    summary = drain(pgq)
    assert [run.outcome for run in summary.runs] == ["retried", "succeeded"]
    assert calls == ["fetch 3", "save"]
    assert scalar(dsn, "SELECT count(*) FROM ledger WHERE event = 'saved'") == 1
    assert scalar(dsn, "SELECT count(*) FROM pgqueue.job_steps WHERE job_id = %s", (job,)) == 2


def test_run_job_in_the_tests_own_transaction(pgq, conn):
    calls: list[str] = []
    flow, _ = _flow(pgq, calls)
    job = flow.enqueue(n=4, conn=conn)
    first = run_job(pgq, job, conn=conn, raise_on_failure=False)
    assert first.outcome == "retried"
    second = run_job(pgq, job, conn=conn)
    assert second.outcome == "succeeded"
    assert calls == ["fetch 4", "save"]
    saved = conn.execute("SELECT count(*) FROM ledger WHERE event = 'saved'").fetchone()
    assert saved == (1,)


def test_a_duplicate_step_name_fails_the_drained_job(pgq):
    calls: list[str] = []
    _, twice = _flow(pgq, calls)
    twice.enqueue()
    with pytest.raises(JobsFailed) as failed:
        drain(pgq)
    assert isinstance(failed.value.failures[0].exception, DuplicateStepError)
    assert calls == ["a"]


# -- sleeps and waits: the handler's side ---------------------------------------------------


class Parking(TransactionHost):
    """A host whose worker parks jobs (what phase 2's worker will say), on the test's DSN."""

    parks_jobs = True

    def __init__(self, dsn: str) -> None:
        super().__init__(dsn, application_name=None, max_result_bytes=1000)

    def connection(self) -> Any:
        return psycopg.connect(self.dsn, autocommit=True)


#: The worker that _context's claims name.
WORKER = "5b0c2e7d-8a41-4f3e-b6d9-1c7e3a2f4b60"


def _context(pgq: PgQueue, dsn: str, host: TransactionHost) -> JobContext:
    job = pgq.enqueue("some.task", {})
    with psycopg.connect(dsn) as conn:
        row = conn.execute(
            "UPDATE pgqueue.jobs SET state = 'running', attempts = 1, lease_token = 1,"
            " lease_expires_at = now() + interval '1 minute', worker_id = %s WHERE id = %s"
            " RETURNING id, queue, task, args, attempts, max_attempts, lease_token, priority,"
            " created_at, run_at",
            (WORKER, job),
        ).fetchone()
    assert row is not None
    ctx = JobContext(ClaimedJob(*row), WORKER)
    ctx.transactions = host
    return ctx


def test_sleep_and_wait_are_refused_by_a_worker_that_does_not_park(pgq, dsn):
    ctx = _context(pgq, dsn, TransactionHost(dsn, application_name=None, max_result_bytes=1))
    for call in (
        lambda: ctx.sleep(5),
        lambda: ctx.sleep_until(datetime.now(UTC)),
        lambda: ctx.wait_for_event("paid"),
    ):
        with pytest.raises(StepError, match="does not park jobs"):
            call()
    assert scalar(dsn, "SELECT count(*) FROM pgqueue.job_steps") == 0


def test_a_sleep_raises_the_parking_signal_and_replays_as_over(pgq, dsn):
    host = Parking(dsn)
    ctx = _context(pgq, dsn, host)
    ctx.step("before", lambda: 1)
    with pytest.raises(JobParked) as parked:
        ctx.sleep(timedelta(days=2))
    signal = parked.value
    assert (signal.kind, signal.seq, signal.name, signal.delay) == ("sleep", 2, "sleep#1", 172800)
    assert not isinstance(signal, Exception)  # a handler's `except Exception` lets it through
    # What the completer will run with it:
    park = durable.park_sleep(ctx.id, signal.lease_token, seq=signal.seq, name=signal.name,
                              delay=signal.delay)  # fmt: skip
    with psycopg.connect(dsn, autocommit=True) as conn:
        assert plans.run(park, conn) is not None
    # The run that resumes: the step replays, the sleep is over, the next one parks.
    resumed = _context_again(ctx, dsn)
    assert resumed.step("before", lambda: 2) == 1
    resumed.sleep(timedelta(days=2))
    with pytest.raises(JobParked) as again:
        resumed.sleep(60)
    assert (again.value.seq, again.value.name) == (3, "sleep#2")


def _context_again(ctx: JobContext, dsn: str) -> JobContext:
    """The job claimed again (a new lease token)."""
    with psycopg.connect(dsn) as conn:
        token = conn.execute(
            "UPDATE pgqueue.jobs SET state = 'running', attempts = attempts + 1,"
            " lease_token = lease_token + 1, lease_expires_at = now() + interval '1 minute'"
            " WHERE id = %s RETURNING lease_token",
            (ctx.id,),
        ).fetchone()
    assert token is not None
    again = JobContext(ctx.job._replace(lease_token=token[0]), WORKER)
    again.transactions = ctx.transactions
    return again


def test_a_wait_returns_the_payload_or_raises_event_timeout_on_replay(pgq, dsn):
    ctx = _context(pgq, dsn, Parking(dsn))
    with pytest.raises(JobParked) as parked:
        ctx.wait_for_event("paid", timeout=timedelta(hours=1))
    signal = parked.value
    assert (signal.kind, signal.event, signal.timeout, signal.name) == (
        "wait", "paid", 3600.0, "wait:paid#1",
    )  # fmt: skip
    park = durable.park_for_event(ctx.id, signal.lease_token, seq=1, name=signal.name,
                                  event="paid", timeout=signal.timeout)  # fmt: skip
    with psycopg.connect(dsn, autocommit=True) as conn:
        assert plans.run(park, conn).state == "parked"
    pgq.emit_event("paid", {"amount": 5})
    resumed = _context_again(ctx, dsn)
    assert resumed.wait_for_event("paid", timeout=3600) == {"amount": 5}
    # A wait whose step timed out raises EventTimeout on replay.
    with psycopg.connect(dsn) as conn:
        conn.execute("UPDATE pgqueue.job_steps SET state = 'timed_out' WHERE job_id = %s",
                     (ctx.id,))  # fmt: skip
    again = _context_again(resumed, dsn)
    with pytest.raises(EventTimeout, match="'paid' past its timeout"):
        again.wait_for_event("paid", timeout=3600)


@pytest.mark.parametrize(
    ("call", "message"),
    [
        (lambda ctx: ctx.sleep(-1), "between 0 and 100 years"),
        (lambda ctx: ctx.sleep("5"), "a number of seconds or a timedelta"),
        (lambda ctx: ctx.sleep_until(datetime(2030, 1, 1)), "timezone-aware"),
        (lambda ctx: ctx.wait_for_event(""), "must not be empty"),
        (lambda ctx: asyncio.run(ctx.sleep_async(-1)), "between 0 and 100 years"),
        (lambda ctx: asyncio.run(ctx.sleep_async(math.nan)), "a number of seconds"),
        (lambda ctx: asyncio.run(ctx.sleep_until_async(datetime(2030, 1, 1))), "timezone-aware"),
        (lambda ctx: asyncio.run(ctx.wait_for_event_async("", timeout=-1)), "must not be empty"),
    ],
)
def test_bad_sleeps_and_waits_are_refused_before_the_checkpoints_are_read(pgq, dsn, call, message):
    ctx = _context(pgq, dsn, Parking(dsn))
    with pytest.raises(InvalidJobError, match=message):
        call(ctx)
    assert ctx.step_run is None  # refused before the run's checkpoints were read


# -- retention -----------------------------------------------------------------------------


def test_retention_prunes_checkpoints_with_their_job_and_events_after_keep_until(pgq, dsn):
    calls: list[str] = []
    flow, twice = _flow(pgq, calls)
    done = flow.enqueue(n=5)
    drain(pgq)  # succeeds without a record: its steps are left without a job
    live = twice.enqueue()
    with psycopg.connect(dsn) as conn:
        conn.execute(
            "INSERT INTO pgqueue.job_steps (job_id, seq, name, state)"
            " VALUES (%s, 1, 's', 'succeeded')",
            (live,),
        )
    pgq.emit_event("old", 1, keep=1)
    pgq.emit_event("fresh", 2)
    with psycopg.connect(dsn) as conn:
        conn.execute(
            "UPDATE pgqueue.events SET keep_until = now() - interval '1s' WHERE name = 'old'"
        )
    report = pgq.retention.prune()
    assert (report.steps, report.events) == (2, 1)
    remaining = scalar(dsn, "SELECT array_agg(job_id) FROM pgqueue.job_steps")
    assert remaining == [live] and int(done) != int(live)
    assert scalar(dsn, "SELECT array_agg(name) FROM pgqueue.events") == ["fresh"]


def test_a_step_whose_result_cannot_be_stored_fails_naming_the_step(pgq, dsn):
    @pgq.task(max_attempts=1)
    def unstorable() -> None:
        current_job().step("load", object)

    @pgq.task(max_attempts=1)
    def bad_retry() -> None:
        current_job().step("load", lambda: 1, retry="often")  # type: ignore[arg-type]

    job = unstorable.enqueue()
    other = bad_retry.enqueue()
    summary = drain(pgq, raise_on_failure=False)
    errors = {run.id: run.exception for run in summary.runs}
    assert isinstance(errors[job], InvalidJobError)
    assert "the result of step 'load' is not JSON-serialisable" in str(errors[job])
    # Recorded as failed, with its error: the step runs again on a later attempt.
    assert scalar(
        dsn, "SELECT state || ' ' || (error->>'error') FROM pgqueue.job_steps WHERE job_id = %s",
        (job,),
    ) == "failed InvalidJobError"  # fmt: skip
    assert isinstance(errors[other], InvalidJobError)
    assert "retry= takes a number of tries or a StepRetry" in str(errors[other])


def test_a_step_retried_in_place_never_retries_fail(pgq):
    tried: list[int] = []

    def refuse() -> None:
        tried.append(1)
        raise Fail("the card was declined")

    @pgq.task(max_attempts=3)
    def declined() -> None:
        current_job().step("charge", refuse, retry=5)

    declined.enqueue()
    summary = drain(pgq, raise_on_failure=False)
    assert [run.outcome for run in summary.runs] == ["dead"]  # Fail: dead at once
    assert tried == [1]


def test_a_transactional_step_on_the_applications_connection(pgq, dsn):
    with psycopg.connect(dsn) as app_conn:

        def save(conn: psycopg.Connection[Any], n: int) -> int:
            assert conn is app_conn
            conn.execute("INSERT INTO ledger (event, note) VALUES ('app', %s)", (str(n),))
            return n

        @pgq.task(max_attempts=2, backoff=ConstantBackoff(0))
        def on_app_conn() -> None:
            ctx = current_job()
            ctx.step("save", save, 7, transaction=app_conn)
            if ctx.attempt == 1:
                raise RuntimeError("fails once after the step")

        job = on_app_conn.enqueue()
        assert [run.outcome for run in drain(pgq).runs] == ["retried", "succeeded"]
    assert scalar(dsn, "SELECT array_agg(note) FROM ledger WHERE event = 'app'") == ["7"]
    assert scalar(dsn, "SELECT result FROM pgqueue.job_steps WHERE job_id = %s", (job,)) == 7


# -- sleeps and waits under the drain: time collapses, events are injected --------------------


def _durable_flow(pgq: PgQueue, calls: list[str]) -> Task[..., Any]:
    @pgq.task(max_attempts=2)
    def remind(order: int) -> Any:
        ctx = current_job()
        ctx.step("charge", calls.append, f"charge {order}")
        ctx.sleep(timedelta(days=3))
        try:
            packed = ctx.wait_for_event(f"packed-{order}", timeout=timedelta(days=2))
        except EventTimeout:
            calls.append("timed out")
            return None
        calls.append(f"ship {packed}")
        return packed

    return remind


def test_drain_collapses_a_sleep_and_a_wait_times_out(pgq, dsn):
    calls: list[str] = []
    remind = _durable_flow(pgq, calls)
    job = remind.enqueue(order=1)
    summary = drain(pgq)
    assert [run.outcome for run in summary.runs] == ["parked", "parked", "succeeded"]
    assert calls == ["charge 1", "timed out"]
    assert [run.attempt for run in summary.runs] == [1, 1, 1]  # parks are not attempts
    assert scalar(dsn, "SELECT count(*) FROM pgqueue.jobs WHERE id = %s", (job,)) == 0


def test_drain_delivers_an_injected_event(pgq, dsn):
    calls: list[str] = []
    remind = _durable_flow(pgq, calls)
    early = remind.enqueue(order=2)
    pgq.emit_event("packed-2", {"parcel": 9})  # emitted before the wait: delivered at once
    drain(pgq)
    assert calls == ["charge 2", "ship {'parcel': 9}"]
    assert scalar(dsn, "SELECT count(*) FROM pgqueue.jobs WHERE id = %s", (early,)) == 0


def test_run_job_sleeps_and_a_wait_without_timeout_stays_parked(pgq, dsn):
    @pgq.task()
    def patient() -> Any:
        ctx = current_job()
        ctx.sleep(3600)
        return ctx.wait_for_event("never")

    job = patient.enqueue()
    first = run_job(pgq, job)
    assert first.outcome == "parked"
    second = run_job(pgq, job)  # the sleep collapsed to now: the wait parks
    assert second.outcome == "parked"
    summary = drain(pgq)  # nothing to do: the wait has no timeout, no event came
    assert summary.runs == []
    pgq.emit_event("never", 7)
    assert [run.outcome for run in drain(pgq).runs] == ["succeeded"]


def test_a_batch_handler_that_sleeps_fails_with_a_clear_error(pgq, dsn):
    @pgq.task(batch_size=5, max_attempts=1)
    def napping(items: list[Item[dict[str, Any]]]) -> None:
        current_job().sleep(60)

    napping.enqueue({"n": 1})
    with pytest.raises(JobsFailed) as failed:
        drain(pgq)
    error = failed.value.failures[0].exception
    assert isinstance(error, LookupError)
    assert "a batch handler cannot sleep or wait" in str(error)
    assert scalar(dsn, "SELECT count(*) FROM pgqueue.jobs WHERE state = 'scheduled'") == 0
