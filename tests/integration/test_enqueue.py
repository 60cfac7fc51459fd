from __future__ import annotations

import asyncio
import gc
import threading
from datetime import UTC, datetime, timedelta

import psycopg
import pytest

from pgqueue import InvalidJobError, PgQueue, PgQueueError


def jobs(conn, where="true", params=()):
    return conn.execute(
        f"SELECT id, queue, task, args, state, priority, max_attempts, idempotency_key "  # noqa: S608
        f"FROM pgqueue.jobs WHERE {where} ORDER BY id",
        params,
    ).fetchall()


def count(conn) -> int:
    return conn.execute("SELECT count(*) FROM pgqueue.jobs").fetchone()[0]


@pytest.fixture
def send_email(pgq):
    @pgq.task(queue="emails", max_attempts=7, priority=2)
    def send_email(to: str, subject: str = "hi") -> None: ...

    return send_email


def test_enqueue_returns_id_and_stores_named_args(pgq, conn, send_email):
    job_id = send_email.enqueue("a@example.com", subject="welcome")
    assert job_id.created
    [(jid, queue, task, args, state, priority, max_attempts, key)] = jobs(conn)
    assert jid == job_id
    assert (queue, task, state, priority, max_attempts, key) == (
        "emails",
        send_email.name,
        "ready",
        2,
        7,
        None,
    )
    assert args == {"to": "a@example.com", "subject": "welcome"}


def test_job_exists_iff_the_application_transaction_commits(dsn, conn, send_email):
    with psycopg.connect(dsn) as app:
        app.execute("CREATE TABLE users (email text)")
        app.execute("INSERT INTO users VALUES ('a@example.com')")
        send_email.enqueue("a@example.com", conn=app)
        assert count(conn) == 0, "visible before commit"
        app.rollback()
    assert count(conn) == 0

    with psycopg.connect(dsn) as app:
        app.execute("CREATE TABLE users (email text)")
        app.execute("INSERT INTO users VALUES ('a@example.com')")
        job_id = send_email.enqueue("a@example.com", conn=app)
        app.commit()
    assert [row[0] for row in jobs(conn)] == [job_id]
    assert conn.execute("SELECT count(*) FROM users").fetchone()[0] == 1


def test_per_call_options(pgq, conn, send_email):
    send_email.enqueue("a", queue="bulk", priority=-5, max_attempts=2)
    [row] = jobs(conn)
    assert (row[1], row[5], row[6]) == ("bulk", -5, 2)


def test_delay_and_run_at_use_the_database_clock(pgq, conn, send_email):
    delayed = send_email.enqueue("a", delay=timedelta(minutes=10))
    at = datetime.now(UTC) + timedelta(hours=1)
    scheduled = send_email.enqueue("b", run_at=at)
    immediate = send_email.enqueue("c", delay=0)
    rows = dict(
        conn.execute(
            "SELECT id, (state, round(extract(epoch FROM run_at - now()))) FROM pgqueue.jobs"
        ).fetchall()
    )
    assert rows[delayed][0] == "scheduled" and 595 <= float(rows[delayed][1]) <= 600
    assert rows[scheduled][0] == "scheduled" and 3590 <= float(rows[scheduled][1]) <= 3600
    assert rows[immediate][0] == "ready"


def test_options_for_tasks_whose_parameters_clash(pgq, conn):
    @pgq.task(name="clash")
    def clash(priority: str, queue: str) -> None: ...

    clash.options(priority=4, queue="q2").enqueue(priority="high", queue="mine")
    [row] = jobs(conn)
    assert (row[1], row[3], row[5]) == ("q2", {"priority": "high", "queue": "mine"}, 4)


def test_enqueue_by_name_without_the_task_code(pgq, conn):
    pgq.enqueue("other.service.task", {"x": 1}, queue="elsewhere")
    [row] = jobs(conn)
    assert row[1:4] == ("elsewhere", "other.service.task", {"x": 1})


def test_idempotency_key_returns_the_live_job(pgq, conn, send_email):
    first = send_email.enqueue("a", idempotency_key="welcome:a")
    again = send_email.enqueue("a", idempotency_key="welcome:a")
    assert first.created and not again.created and first == again
    assert count(conn) == 1
    conn.execute("DELETE FROM pgqueue.jobs")  # the job finished: the key is free again
    third = send_email.enqueue("a", idempotency_key="welcome:a")
    assert third.created and third != first


@pytest.mark.parametrize("outcome", ["commit", "rollback"])
def test_idempotency_key_under_two_racing_connections(dsn, pgq, conn, send_email, outcome):
    """A holds the key in an open transaction; B's enqueue waits for A, then returns A's job
    (A committed) or creates its own (A rolled back). Exactly one job either way."""
    results: dict[str, int] = {}
    with psycopg.connect(dsn) as a:
        results["a"] = send_email.enqueue("x", idempotency_key="race", conn=a)

        def b() -> None:
            with psycopg.connect(dsn) as b_conn:
                results["b"] = send_email.enqueue("x", idempotency_key="race", conn=b_conn)
                b_conn.commit()

        thread = threading.Thread(target=b)
        thread.start()
        thread.join(0.5)
        assert thread.is_alive(), "B should wait on A's uncommitted key"
        getattr(a, outcome)()
    thread.join(10)
    assert count(conn) == 1
    [(job_id, *_)] = jobs(conn)
    assert results["b"] == job_id
    if outcome == "commit":
        assert results["a"] == results["b"]


def test_idempotency_key_many_threads_yield_exactly_one_job(dsn, pgq, conn, send_email):
    barrier = threading.Barrier(8)
    ids: list[int] = []

    def enqueue() -> None:
        with psycopg.connect(dsn, autocommit=True) as c:
            barrier.wait()
            ids.append(send_email.enqueue("x", idempotency_key="stampede", conn=c))

    threads = [threading.Thread(target=enqueue) for _ in range(8)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert count(conn) == 1 and len(set(ids)) == 1


@pytest.mark.parametrize(
    ("call", "message"),
    [
        (lambda t: t.enqueue(object()), "argument 'to' of .*: value is not JSON-serialisable"),
        (lambda t: t.enqueue(float("nan")), "NaN"),
        (lambda t: t.enqueue("x" * (1024 * 1024 + 1)), "over the limit of 1048576 bytes"),
        (lambda t: t.enqueue("x", prioroty=1), "unexpected keyword argument 'prioroty'"),
        (lambda t: t.options(prioroty=1), "unknown enqueue option"),
        (lambda t: t.enqueue("x", queue=""), "must not be empty"),
        (lambda t: t.enqueue("x", queue="q" * 201), "over the limit of 200"),
        (lambda t: t.enqueue(), "missing a required argument"),
    ],
)
def test_bad_input_raises_before_anything_is_written(pgq, conn, send_email, call, message):
    with pytest.raises(InvalidJobError, match=message):
        call(send_email)
    assert count(conn) == 0


def test_payload_limit_is_configurable(dsn, conn):
    small = PgQueue(dsn, max_payload_bytes=50)
    try:
        with pytest.raises(InvalidJobError, match="over the limit of 50"):
            small.enqueue("t", {"x": "y" * 100})
    finally:
        small.close()
    assert count(conn) == 0


def test_names_with_quotes_and_sql_are_just_data(pgq, conn):
    hostile = "x'); DROP TABLE pgqueue.jobs; --\"é☃"
    pgq.enqueue(hostile, {"k": hostile}, queue=hostile, idempotency_key=hostile)
    [row] = jobs(conn)
    assert row[1:4] == (hostile, hostile, {"k": hostile}) and row[7] == hostile


def test_bulk_enqueue_100k_in_one_transaction(dsn, pgq, conn, send_email):
    calls = [send_email.s(f"user{i}@example.com") for i in range(100_000)]
    with psycopg.connect(dsn) as app:
        ids = pgq.enqueue_many(calls, conn=app)
        assert count(conn) == 0
        app.commit()
    assert len(ids) == 100_000 and len(set(ids)) == 100_000
    assert count(conn) == 100_000
    first, last = ids[0], ids[-1]
    assert jobs(conn, "id = %s", (first,))[0][3] == {"to": "user0@example.com"}
    assert jobs(conn, "id = %s", (last,))[0][3] == {"to": "user99999@example.com"}


def test_bulk_enqueue_rolls_back_with_the_transaction(dsn, pgq, conn, send_email):
    with psycopg.connect(dsn) as app:
        pgq.enqueue_many([send_email.s("a") for _ in range(500)], conn=app)
        app.rollback()
    assert count(conn) == 0


def test_bulk_enqueue_small_batch_keys_and_options(pgq, conn, send_email):
    existing = send_email.enqueue("old", idempotency_key="k0")
    ids = pgq.enqueue_many(
        [
            send_email.s("a", idempotency_key="k0"),
            send_email.s("b", idempotency_key="k1"),
            send_email.s("c", delay=60, queue="later"),
            send_email.s("d", idempotency_key="k1"),
            send_email.s("e", priority=9),
        ]
    )
    assert [i.created for i in ids] == [False, True, True, False, True]
    assert ids[0] == existing and ids[3] == ids[1]
    rows = {row[0]: row for row in jobs(conn)}
    assert rows[ids[2]][1] == "later" and rows[ids[2]][4] == "scheduled"
    assert rows[ids[4]][5] == 9
    assert count(conn) == 4


def test_bulk_enqueue_validates_every_job_before_writing(pgq, conn, send_email):
    calls = [send_email.s("a"), send_email.s("b")]
    with pytest.raises(InvalidJobError):
        pgq.enqueue_many([*calls, send_email.s(float("nan"))])
    assert count(conn) == 0


def test_async_twin_in_the_callers_transaction(dsn, pgq, conn, send_email):
    async def main() -> list[int]:
        async with await psycopg.AsyncConnection.connect(dsn) as aconn:
            one = await send_email.enqueue_async("a", priority=1, conn=aconn)
            many = await pgq.enqueue_many_async([send_email.s("b"), send_email.s("c")], conn=aconn)
            await aconn.rollback()
            assert count(conn) == 0
            one = await send_email.enqueue_async("a", priority=1, conn=aconn)
            await aconn.commit()
        pooled = await send_email.enqueue_async("d")  # own pool, own transaction
        keyed = await send_email.enqueue_async("a", idempotency_key="k")
        again = await pgq.enqueue_async(send_email.name, {"to": "z"}, idempotency_key="k")
        assert keyed == again and not again.created
        await pgq.aclose()
        return [one, *many, pooled]

    ids = asyncio.run(main())
    assert count(conn) == 3
    assert [
        row[0] for row in jobs(conn, "task = %s AND idempotency_key IS NULL", (send_email.name,))
    ] == [ids[0], ids[3]]


def test_one_notify_per_transaction_per_queue(dsn, pgq, send_email):
    with psycopg.connect(dsn, autocommit=True) as listener:
        # Producers notify only while a worker waits for it (tests/integration/test_idle_wakeup.py).
        listener.execute(
            "INSERT INTO pgqueue.idle_workers (worker_id)"
            " VALUES ('00000000-0000-0000-0000-0000000000aa')"
        )
        listener.execute("LISTEN pgqueue_jobs")
        with psycopg.connect(dsn) as app:
            for i in range(5):
                send_email.enqueue(str(i), conn=app)
            send_email.enqueue("x", queue="other", conn=app)
            pgq.enqueue_many([send_email.s(str(i)) for i in range(200)], conn=app)
            app.commit()
        with psycopg.connect(dsn) as app:
            send_email.enqueue("rolled back", queue="ghost", conn=app)
            app.rollback()
        payloads = sorted(n.payload for n in listener.notifies(timeout=0.5))
    assert payloads == ["emails", "other"]


def test_unmigrated_database_gets_a_clear_error(fresh_db):
    pgq = PgQueue(fresh_db)
    try:
        with pytest.raises(PgQueueError, match="run `pgq migrate`"):
            pgq.enqueue("t", {})
    finally:
        pgq.close()


def test_sql_enqueue_function_for_psql_and_triggers(conn):
    job_id = conn.execute(
        "SELECT pgqueue.enqueue('reports.build', '{\"month\": \"2026-11\"}', queue => 'reports',"
        " priority => 3)"
    ).fetchone()[0]
    again = conn.execute(
        "SELECT * FROM pgqueue.enqueue_job('reports.build', idempotency_key => 'm')"
    ).fetchone()
    same = conn.execute(
        "SELECT * FROM pgqueue.enqueue_job('reports.build', idempotency_key => 'm')"
    ).fetchone()
    assert again[1] is True and same == (again[0], False, False)
    [row] = jobs(conn, "id = %s", (job_id,))
    assert row[1:6] == ("reports", "reports.build", {"month": "2026-11"}, "ready", 3)


def test_queue_stats_view(pgq, conn, send_email):
    send_email.enqueue("a")
    send_email.enqueue("b", delay=3600)
    pgq.enqueue("t", {}, queue="other", allow_unknown=True)  # a task of another service
    conn.execute(
        "INSERT INTO pgqueue.dead_letters (id, queue, task, args, priority, attempts,"
        " max_attempts, lease_token, created_at, reason) VALUES"
        " (999, 'dlq-only', 't', '{}', 0, 5, 5, 5, now(), 'test')"
    )
    rows = {
        r[0]: r[1:]
        for r in conn.execute(
            "SELECT queue, ready, scheduled, running, dead, oldest_ready_age IS NOT NULL"
            " FROM pgqueue.queue_stats"
        ).fetchall()
    }
    assert rows == {
        "emails": (1, 1, 0, 0, True),
        "other": (1, 0, 0, 0, True),
        "dlq-only": (0, 0, 0, 1, False),
    }


def test_plain_insert_and_enqueue_job_write_the_same_row(pgq, conn):
    # A job without keys is a plain INSERT; the SQL function must write the very same row.
    columns = (
        "queue, task, args, state, priority, max_attempts, attempts, lease_token, errors,"
        " result_ttl, run_at - created_at > interval '59 s'"
    )
    plain = pgq.enqueue("t", {"x": [1, "é"]}, queue="q", priority=-3, max_attempts=7, delay=60)
    now = pgq.enqueue("t", {}, result_ttl=timedelta(hours=1))
    [by_function] = conn.execute(
        "SELECT id FROM pgqueue.enqueue_job('t', '{\"x\": [1, \"é\"]}', 'q', -3,"
        " now() + interval '60 s', 7)"
    ).fetchone()
    conn.commit()
    rows = {
        job_id: conn.execute(
            f"SELECT {columns} FROM pgqueue.jobs WHERE id = %s",  # noqa: S608
            (job_id,),
        ).fetchone()
        for job_id in (plain, by_function, now)
    }
    assert rows[plain] == rows[by_function]
    assert rows[plain][:4] == ("q", "t", {"x": [1, "é"]}, "scheduled")
    assert rows[now][3] == "ready" and rows[now][9] == timedelta(hours=1)


def test_a_bounded_queue_goes_through_the_room_check(pgq, conn):
    pgq.flow.configure_queue("small", max_depth=1)
    first = pgq.enqueue("t", {}, queue="small")
    assert first.created
    with pytest.raises(PgQueueError, match="full"):
        pgq.enqueue("t", {}, queue="small")
    assert count(conn) == 1


def test_bulk_mixes_ready_delayed_and_keyed_jobs(pgq, conn):
    # Ready jobs without keys take the column defaults (run_at = the transaction's now());
    # the others are written with their own run_at, state and keys, in the same transaction.
    specs = [pgq.spec("t", {"i": i}, {}) for i in range(100)]
    specs += [
        pgq.spec("t", {"i": 100}, {"delay": 60}),
        pgq.spec("t", {"i": 101}, {"idempotency_key": "k"}),
    ]
    specs += [pgq.spec("t", {"i": 102}, {"concurrency_key": "c"})]
    ids = pgq.enqueue_many(specs)
    assert len(ids) == 103 and all(job_id.created for job_id in ids)
    rows = conn.execute(
        "SELECT (args->>'i')::int, state, run_at = created_at, idempotency_key, concurrency_key"
        " FROM pgqueue.jobs ORDER BY 1"
    ).fetchall()
    assert rows[:100] == [(i, "ready", True, None, None) for i in range(100)]
    assert rows[100][:3] == (100, "scheduled", False)
    assert rows[101] == (101, "ready", True, "k", None)
    assert rows[102] == (102, "ready", True, None, "c")
    assert [r[0] for r in conn.execute("SELECT id FROM pgqueue.jobs ORDER BY id")] == sorted(ids)


def test_a_bulk_of_alike_jobs_with_options_stores_each_option(pgq, conn):
    # A batch of jobs due now without idempotency keys is one COPY whatever their options.
    opts = {"meta": {"m": 1}, "tags": ["a", "b"], "result_ttl": 60, "concurrency_key": "c"}
    ids = pgq.enqueue_many([pgq.spec("t", {"i": i}, opts) for i in range(70)])
    assert len(ids) == 70 and all(job_id.created for job_id in ids)
    rows = conn.execute(
        "SELECT DISTINCT state, meta, tags, result_ttl, concurrency_key FROM pgqueue.jobs"
    ).fetchall()
    assert rows == [("ready", {"m": 1}, ["a", "b"], timedelta(seconds=60), "c")]


def test_bulk_enqueue_gives_the_garbage_collector_back_on(dsn):
    with PgQueue(dsn) as app:
        assert gc.isenabled()
        ids = app.enqueue_many([app.spec("t", {"n": i}, {}) for i in range(500)])
        assert len(ids) == 500 and gc.isenabled()
        with pytest.raises(InvalidJobError):
            app.enqueue_many([app.spec("t", {"n": float("nan")}, {})])
        assert gc.isenabled()


@pytest.mark.parametrize("wait", [-1, float("nan"), "5s"])
def test_enqueue_many_refuses_a_bad_wait_if_full_sync_and_async(pgq, conn, send_email, wait):
    """enqueue(wait_if_full=...) checks it as an option; enqueue_many's argument was taken as
    it came: a negative or NaN wait wrote the jobs, a string failed on a raw TypeError."""
    with pytest.raises(InvalidJobError, match="wait_if_full must be"):
        pgq.enqueue_many([send_email.s(to="a@x.org")], wait_if_full=wait)

    async def main() -> None:
        try:
            with pytest.raises(InvalidJobError, match="wait_if_full must be"):
                await asyncio.wait_for(
                    pgq.enqueue_many_async([send_email.s(to="a@x.org")], wait_if_full=wait), 10
                )
        finally:
            await pgq.aclose()

    asyncio.run(main())
    assert count(conn) == 0
