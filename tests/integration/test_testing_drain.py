"""pgqueue.testing: jobs run inline by drain / run_job with the worker's own statements, and
assertions about what was enqueued; against the test's real database."""

from __future__ import annotations

import asyncio
import threading
from datetime import UTC, datetime, timedelta
from typing import TypedDict

import psycopg
import pytest

from pgqueue import DAG, ConstantBackoff, Fail, Item, PgQueue, Retry, chain, chord, current_job
from pgqueue.testing import (
    DrainError,
    JobsFailed,
    assert_enqueued,
    assert_not_enqueued,
    drain,
    drain_async,
    enqueued,
    run_job,
)
from tests.helpers import scalar

NOW = datetime.now(UTC)


class Number(TypedDict):
    n: int


def test_drain_runs_the_jobs_inline_in_the_callers_thread_and_what_they_enqueue(pgq, dsn):
    seen: list[tuple[str, int, str]] = []

    @pgq.task
    def notify(user: int) -> None:
        seen.append(("notify", user, threading.current_thread().name))

    @pgq.task(result_ttl=60)
    def signup(user: int) -> str:
        seen.append(("signup", user, threading.current_thread().name))
        notify.enqueue(user)
        return f"welcome {user}"

    job = signup.enqueue(7)
    summary = drain(pgq)
    here = threading.current_thread().name
    assert seen == [("signup", 7, here), ("notify", 7, here)]
    assert [(r.task, r.outcome) for r in summary.runs] == [
        (signup.name, "succeeded"),
        (notify.name, "succeeded"),
    ]
    assert summary.runs[0].value == "welcome 7"
    assert pgq.result(job, timeout=1) == "welcome 7"  # acked as a worker acks: result kept
    assert scalar(dsn, "SELECT count(*) FROM pgqueue.jobs") == 0
    assert str(summary) == "2 attempt(s): 2 succeeded"
    assert drain(pgq).runs == []  # nothing left


def test_retries_with_backoff_are_collapsed_to_now(pgq, dsn):
    attempts: list[int] = []

    @pgq.task(max_attempts=3, backoff=ConstantBackoff(3600), result_ttl=60)
    def flaky() -> str:
        attempts.append(current_job().attempt)
        if len(attempts) < 3:
            raise ConnectionError("try again")
        return "ok"

    flaky.enqueue()
    summary = drain(pgq)
    assert attempts == [1, 2, 3]
    assert [r.outcome for r in summary.runs] == ["retried", "retried", "succeeded"]
    assert summary.failed[0].error == "ConnectionError: try again"
    assert isinstance(summary.failed[0].exception, ConnectionError)
    # The attempts' errors were recorded by fail_jobs, as under a worker.
    assert scalar(dsn, "SELECT jsonb_array_length(errors) FROM pgqueue.job_history") == 2


def test_retry_raised_by_the_handler_runs_again_in_the_drain(pgq):
    calls: list[int] = []

    @pgq.task
    def poll() -> None:
        calls.append(1)
        if len(calls) < 3:
            raise Retry(delay=300)

    poll.enqueue()
    assert [r.outcome for r in drain(pgq).runs] == ["retried", "retried", "succeeded"]


def test_scheduled_jobs_run_in_the_drain_unless_told_not_to(pgq):
    ran: list[str] = []

    @pgq.task
    def remind(what: str) -> None:
        ran.append(what)

    remind.enqueue("later", run_at=NOW + timedelta(hours=1))
    remind.enqueue("now")
    assert drain(pgq, scheduled=False).runs[0].args == {"what": "now"}
    assert ran == ["now"]
    assert_enqueued(pgq, remind, args={"what": "later"})
    drain(pgq)
    assert ran == ["now", "later"]


def test_a_dead_lettered_job_is_reported_with_its_error(pgq, dsn):
    @pgq.task(max_attempts=2, backoff=ConstantBackoff(60))
    def charge(card: str) -> None:
        raise ValueError(f"card {card} declined")

    @pgq.task
    def fine() -> None:
        pass

    job = charge.enqueue("4242")
    fine.enqueue()
    with pytest.raises(JobsFailed) as failed:
        drain(pgq)
    message = str(failed.value)
    assert message.splitlines()[:2] == [
        "1 job(s) dead-lettered (3 attempt(s): 1 retried, 1 succeeded, 1 dead):",
        f"  job {job} {charge.name} (attempt 2 of 2): dead: ValueError: card 4242 declined",
    ]
    assert "Traceback (most recent call last)" in message
    assert 'raise ValueError(f"card {card} declined")' in message
    assert isinstance(failed.value.__cause__, ValueError)
    summary = failed.value.summary
    assert [r.outcome for r in summary.runs] == ["retried", "succeeded", "dead"]  # time passed
    # Dead-lettered as a worker would: the row is in dead_letters with the reason.
    assert scalar(dsn, "SELECT reason FROM pgqueue.dead_letters") == "max attempts reached"


def test_fail_dead_letters_at_once_and_can_be_reported_instead_of_raised(pgq, dsn):
    @pgq.task(max_attempts=5)
    def refuse() -> None:
        raise Fail("never")

    refuse.enqueue()
    summary = drain(pgq, raise_on_failure=False)
    assert [(r.outcome, r.error) for r in summary.dead] == [("dead", "pgqueue.errors.Fail: never")]
    assert scalar(dsn, "SELECT count(*) FROM pgqueue.dead_letters") == 1


def test_a_chain_a_chord_and_a_dag_are_drained_to_their_end(pgq):
    @pgq.task
    def add(x: int, y: int = 0) -> int:
        return x + y

    @pgq.task
    def total(values: list[int]) -> int:
        return sum(values)

    chained = pgq.enqueue_workflow(chain(add.s(1, 2), add.s(y=10), add.s(y=100)))
    chorded = pgq.enqueue_workflow(chord([add.s(i) for i in range(4)], total.s()))
    dag = DAG()
    a = dag.add(add.s(1))
    b = dag.add(add.s(2), depends_on=[a])
    dag.add(add.s(3), depends_on=[a, b])
    dagged = pgq.enqueue_workflow(dag)
    summary = drain(pgq)
    assert len(summary.succeeded) == 3 + 5 + 3
    assert chained.result(timeout=1) == 113
    assert chorded.result(timeout=1) == 6
    assert pgq.workflow(dagged.id)["state"] == "succeeded"


def test_cron_ticks_due_are_enqueued_and_run(pgq, dsn):
    ran: list[str] = []

    @pgq.task
    def nightly() -> None:
        ran.append("tick")

    pgq.cron.schedule("nightly", "* * * * *", nightly.name, {})
    assert drain(pgq).runs == []  # not due yet
    with psycopg.connect(dsn) as conn:  # the clock reaches the tick
        conn.execute("UPDATE pgqueue.schedules SET next_tick = date_trunc('minute', now())")
    summary = drain(pgq)
    assert summary.cron_ticks == 1 and ran == ["tick"]


def test_ctx_transaction_in_a_drained_handler_completes_the_job_with_its_writes(pgq, dsn):
    with psycopg.connect(dsn) as conn:
        conn.execute("CREATE TABLE invoices (n int)")

    @pgq.task
    def invoice(n: int) -> None:
        with current_job().transaction() as conn:
            conn.execute("INSERT INTO invoices VALUES (%s)", (n,))

    invoice.enqueue(1)
    assert [r.outcome for r in drain(pgq).runs] == ["succeeded"]
    assert scalar(dsn, "SELECT n FROM invoices") == 1
    assert scalar(dsn, "SELECT count(*) FROM pgqueue.jobs") == 0


def test_the_async_drain_runs_on_the_callers_loop(pgq, dsn):
    loops: list[object] = []

    @pgq.task
    async def fetch(url: str) -> None:
        loops.append(asyncio.get_running_loop())
        async with current_job().transaction() as conn:
            await conn.execute("SELECT 1")

    @pgq.task
    def parse(url: str) -> None:
        loops.append(threading.current_thread().name)

    async def main() -> tuple[object, list[str]]:
        await fetch.enqueue_async("a")
        await parse.enqueue_async("b")
        summary = await drain_async(pgq)
        await pgq.aclose()
        return asyncio.get_running_loop(), [r.outcome for r in summary.runs]

    loop, outcomes = asyncio.run(main())
    assert outcomes == ["succeeded", "succeeded"]
    assert loops[0] is loop  # the caller's loop; the sync handler ran in a thread of it
    assert loops[1] != threading.current_thread().name


def test_async_handlers_run_in_the_sync_drain(pgq):
    @pgq.task
    async def double(x: int) -> int:
        await asyncio.sleep(0)
        return 2 * x

    double.enqueue(4)
    assert drain(pgq).runs[0].value == 8


def test_drain_in_a_running_loop_says_to_await_the_async_twin(pgq):
    async def main() -> None:
        drain(pgq)

    with pytest.raises(DrainError, match=r"use `await drain_async\(...\)`"):
        asyncio.run(main())


def test_a_job_that_enqueues_itself_for_ever_stops_at_max_jobs(pgq, dsn):
    @pgq.task
    def again() -> None:
        again.enqueue()

    again.enqueue()
    with pytest.raises(DrainError, match="ran 5 attempts and jobs are still ready"):
        drain(pgq, max_jobs=5)
    assert scalar(dsn, "SELECT state FROM pgqueue.jobs") == "ready"  # released, not burnt


def test_drain_only_one_queue(pgq):
    @pgq.task(queue="mail")
    def mail() -> None: ...

    @pgq.task
    def other() -> None: ...

    mail.enqueue()
    other.enqueue()
    assert [r.queue for r in drain(pgq, queue="mail").runs] == ["mail"]
    assert_enqueued(pgq, other, count=1)


def test_run_job_runs_one_job_now_even_a_scheduled_one(pgq):
    ran: list[int] = []

    @pgq.task(result_ttl=60)
    def step(n: int) -> None:
        ran.append(n)

    step.enqueue(1)
    later = step.enqueue(2, delay=timedelta(days=1))
    run = run_job(pgq, later)
    assert (run.id, run.outcome, ran) == (later, "succeeded", [2])
    with pytest.raises(DrainError, match=f"job {later} cannot run: it is finished"):
        run_job(pgq, later)
    with pytest.raises(DrainError, match=r"no job 999999 \(never enqueued, or finished"):
        run_job(pgq, 999999)


def test_run_job_raises_a_failed_attempt(pgq):
    @pgq.task(max_attempts=3)
    def boom() -> None:
        raise RuntimeError("kaboom")

    job = boom.enqueue()
    with pytest.raises(JobsFailed, match="retried: RuntimeError: kaboom"):
        run_job(pgq, job)
    assert run_job(pgq, job, raise_on_failure=False).attempt == 2


def test_drain_on_the_callers_uncommitted_transaction(pgq, dsn):
    """Jobs enqueued in a transaction the test never commits (a test that rolls back its
    connection) are drained on that connection and vanish with it."""

    @pgq.task
    def welcome(user: int) -> None:
        current_job()

    with psycopg.connect(dsn) as conn:
        welcome.enqueue(1, conn=conn)
        assert enqueued(pgq) == []  # not committed: invisible elsewhere
        assert_enqueued(pgq, welcome, args={"user": 1}, conn=conn)
        summary = drain(pgq, conn=conn)
        assert [r.outcome for r in summary.runs] == ["succeeded"]
        assert_not_enqueued(pgq, welcome, conn=conn)
        conn.rollback()


def test_enqueued_matches_a_subset_of_the_arguments(pgq):
    @pgq.task
    def send(to: str, subject: str, body: str = "") -> None: ...

    send.enqueue("a@example.com", "hi")
    send.enqueue("b@example.com", "hi", body="long")
    assert [j.args["to"] for j in enqueued(pgq, send, args={"subject": "hi"})] == [
        "a@example.com",
        "b@example.com",
    ]
    assert [j.args for j in enqueued(pgq, send.name, args={"body": "long"})] == [
        {"to": "b@example.com", "subject": "hi", "body": "long"}
    ]
    assert enqueued(pgq, send, queue="elsewhere") == []
    assert len(assert_enqueued(pgq, send, count=2)) == 2


def test_assert_enqueued_lists_what_was_enqueued_when_it_fails(pgq):
    @pgq.task
    def send(to: str) -> None: ...

    @pgq.task
    def audit(event: str) -> None: ...

    first = send.enqueue("a@example.com")
    second = audit.enqueue("login")
    with pytest.raises(AssertionError) as failed:
        assert_enqueued(pgq, send, args={"to": "z@example.com"})
    assert str(failed.value) == (
        f"expected a job of {send.name} with args including to='z@example.com', found 0; "
        "enqueued (2):\n"
        f"  job {first} {send.name}(to='a@example.com') queue=default ready\n"
        f"  job {second} {audit.name}(event='login') queue=default ready"
    )
    with pytest.raises(AssertionError, match=r"expected 2 job\(s\) of .*send, found 1"):
        assert_enqueued(pgq, send, count=2)
    with pytest.raises(AssertionError) as unwanted:
        assert_not_enqueued(pgq, audit)
    assert str(unwanted.value) == (
        f"expected no job of {audit.name}; enqueued (1):\n"
        f"  job {second} {audit.name}(event='login') queue=default ready"
    )


def test_assert_enqueued_on_an_empty_queue_says_nothing_was_enqueued(pgq):
    with pytest.raises(AssertionError, match="found 0; nothing was enqueued"):
        assert_enqueued(pgq, "app.tasks.anything")


def test_ctx_transaction_in_a_drain_on_the_callers_connection_is_a_savepoint(pgq, dsn):
    """A test's uncommitted transaction: the handler's block runs in it, on the same
    connection (another connection would wait for the job's row, locked by the drain's claim),
    and is rolled back with it."""
    attempts: list[int] = []

    @pgq.task(max_attempts=2, backoff=ConstantBackoff(60))
    def invoice(n: int) -> None:
        attempts.append(current_job().attempt)
        with current_job().transaction() as conn:
            conn.execute("INSERT INTO invoices VALUES (%s)", (n,))
            if len(attempts) == 1:
                raise RuntimeError("rolled back to the savepoint")

    @pgq.task(max_attempts=1)
    def elsewhere() -> None:
        with psycopg.connect(dsn) as other, current_job().transaction(conn=other):
            pass

    with psycopg.connect(dsn) as conn:
        conn.execute("CREATE TABLE invoices (n int)")
        invoice.enqueue(1, conn=conn)
        summary = drain(pgq, conn=conn)
        assert [r.outcome for r in summary.runs] == ["retried", "succeeded"]
        assert conn.execute("SELECT n FROM invoices").fetchall() == [(1,)]  # once
        elsewhere.enqueue(conn=conn)
        with pytest.raises(JobsFailed, match="pass the same connection as drain"):
            drain(pgq, conn=conn)
        conn.rollback()
    assert scalar(dsn, "SELECT to_regclass('invoices')") is None  # all of it rolled back


def test_periodic_schedules_and_task_limits_are_declared_as_a_worker_declares_them(pgq, dsn):
    ran: list[int] = []

    @pgq.periodic("* * * * *")
    @pgq.task(concurrency_limit=1, rate_limit="1000/s")
    def sweep() -> None:
        ran.append(1)

    assert drain(pgq).runs == []  # writes the schedule; its first tick is not due yet
    with psycopg.connect(dsn) as conn:
        conn.execute("UPDATE pgqueue.schedules SET next_tick = date_trunc('minute', now())")
        assert conn.execute("SELECT concurrency_limit FROM pgqueue.task_limits").fetchall() == [
            (1,)
        ]
    sweep.enqueue()
    # Flow control applies (claim_jobs skips its walk): claimed through pgqueue.claim.
    summary = drain(pgq)
    assert summary.cron_ticks == 1 and len(summary.succeeded) == 2 and ran == [1, 1]


def test_a_rate_limited_task_is_drained_at_its_rate(pgq):
    @pgq.task(rate_limit="5/s")
    def ping(n: int) -> None: ...

    for n in range(8):
        ping.enqueue(n)
    assert len(drain(pgq).succeeded) == 8  # waits for the tokens (a second or two)


def test_async_handlers_in_the_sync_drain_may_use_the_queue_asynchronously(pgq):
    @pgq.task
    async def first() -> None:
        await second.enqueue_async()

    @pgq.task
    async def second() -> None: ...

    first.enqueue()
    assert [r.task for r in drain(pgq).succeeded] == [first.name, second.name]


def test_a_batch_tasks_jobs_are_drained_as_batches_of_one(pgq):
    @pgq.task(batch_size=10, batch_wait=5.0, result_ttl=60)
    def double(items: list[Item[Number]]) -> list[int]:
        return [2 * item.args["n"] for item in items]

    jobs = [double.enqueue(n=n) for n in range(3)]
    summary = drain(pgq)
    assert [r.outcome for r in summary.runs] == ["succeeded"] * 3
    assert [pgq.result(job, timeout=1) for job in jobs] == [0, 2, 4]


def test_the_async_drain_on_the_callers_async_connection(pgq, dsn):
    @pgq.task
    async def record(n: int) -> None:
        async with current_job().transaction() as conn:  # a savepoint of the test's
            await conn.execute("INSERT INTO records VALUES (%s)", (n,))

    async def main() -> list[tuple[int]]:
        async with await psycopg.AsyncConnection.connect(dsn) as conn:
            await conn.execute("CREATE TABLE records (n int)")
            await record.enqueue_async(5, conn=conn)
            summary = await drain_async(pgq, conn=conn)
            assert [r.outcome for r in summary.runs] == ["succeeded"]
            rows = await (await conn.execute("SELECT n FROM records")).fetchall()
            await conn.rollback()
        await pgq.aclose()
        return rows

    assert asyncio.run(main()) == [(5,)]
    assert scalar(dsn, "SELECT to_regclass('records')") is None


def test_run_job_refuses_a_job_waiting_for_its_workflow(pgq):
    @pgq.task
    def step(x: int = 0) -> int:
        return x

    run = pgq.enqueue_workflow(chain(step.s(1), step.s()))
    with pytest.raises(DrainError, match=f"job {run.job_ids[1]} cannot run now: it waits for"):
        run_job(pgq, run.job_ids[1])


def test_a_drain_on_the_callers_connection_needs_no_dsn(dsn, monkeypatch):
    """A queue with no DSN configured (its database comes with the caller's connection) starts
    no embedded server for a drain on that connection."""
    for name in ("PGQUEUE_DSN", "DATABASE_URL"):
        monkeypatch.delenv(name, raising=False)
    queue = PgQueue()

    @queue.task
    def hello() -> None: ...

    with psycopg.connect(dsn) as conn:
        hello.enqueue(conn=conn)
        assert [r.outcome for r in drain(queue, conn=conn).runs] == ["succeeded"]
    assert queue._pools._dsn is None  # never resolved


def test_an_async_handlers_timeout_fails_its_attempt_as_under_a_worker(pgq):
    @pgq.task(timeout=0.1, max_attempts=1)
    async def stuck() -> None:
        await asyncio.sleep(60)

    @pgq.task(max_attempts=1)
    async def own_timeout() -> None:
        raise TimeoutError("the handler's own")

    stuck.enqueue()
    own_timeout.enqueue()
    summary = drain(pgq, raise_on_failure=False)
    assert [r.error for r in summary.dead] == [
        f"pgqueue.errors.JobTimeout: {stuck.name} timed out after 0.1s",
        "TimeoutError: the handler's own",
    ]
