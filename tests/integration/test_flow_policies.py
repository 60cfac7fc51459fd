"""Circuit breakers, retry policies, kept idempotency keys, backpressure, fan-out and delayed
jobs, with real worker processes."""

from __future__ import annotations

import threading
import time

import psycopg
import pytest
from typer.testing import CliRunner

from pgqueue import PgQueue, QueueFullError
from pgqueue.cli import app as cli_app
from tests.helpers import ledger, scalar, spawn_fleet, spawn_worker, stop_workers, wait_for
from tests.integration import flow_app

pytestmark = pytest.mark.slow

APP = "tests.integration.flow_app:pgq"


def flow_app_on(dsn: str) -> PgQueue:
    """flow_app's tasks, subscriptions and schedules on a client of this test's database."""
    app = PgQueue(dsn)
    app.tasks = flow_app.pgq.tasks
    app.subscriptions = flow_app.pgq.subscriptions
    app.schedules = flow_app.pgq.schedules
    return app


def fleet(dsn, tmp_path, count=2, *args):
    return spawn_fleet(dsn, count, "--concurrency", "4", *args, app=APP, log_dir=tmp_path)


# -- circuit breaker -------------------------------------------------------------------------


def breaker(dsn: str) -> tuple[str, int]:
    with psycopg.connect(dsn) as conn:
        row = conn.execute(
            "SELECT state, trips FROM pgqueue.circuit_breaker_status WHERE task = 'fragile'"
        ).fetchone()
    return row  # type: ignore[return-value]


def test_circuit_breaker_opens_jobs_wait_then_a_probe_closes_it(app_dsn, pgq, tmp_path):
    pgq.enqueue_many([pgq.spec("fragile", {}, {}) for _ in range(20)])
    workers = fleet(app_dsn, tmp_path, 2)
    try:
        wait_for(lambda: breaker(app_dsn) and breaker(app_dsn)[1] >= 1, message="breaker trips")
        failed_at_trip = len(pgq.admin.dead_letters())
        # Open: the remaining jobs wait (not failed) while the cooldown runs.
        time.sleep(0.5)
        assert (
            len(pgq.admin.dead_letters()) <= failed_at_trip + 8
        )  # in-flight ones may still finish
        waiting = scalar(app_dsn, "SELECT count(*) FROM pgqueue.jobs WHERE state = 'ready'")
        assert waiting >= 5
        result = CliRunner().invoke(cli_app, ["breaker", "list", "--json", "--dsn", app_dsn])
        assert result.exit_code == 0 and '"task": "fragile"' in result.output
        # After the cooldown one probe runs (still failing): open again, one more trip.
        wait_for(lambda: breaker(app_dsn)[1] >= 2, timeout=30, message="probe failed")
        dead_after_probe = len(pgq.admin.dead_letters())
        assert dead_after_probe <= failed_at_trip + 9
        # The dependency is fixed: the next probe succeeds and the breaker closes.
        with psycopg.connect(app_dsn) as conn:
            conn.execute("INSERT INTO ledger (event) VALUES ('fixed')")
        wait_for(
            lambda: scalar(app_dsn, "SELECT count(*) FROM pgqueue.jobs") == 0,
            timeout=60,
            message="the rest ran",
        )
    finally:
        stop_workers(workers)
    assert breaker(app_dsn)[0] == "closed"
    assert len(ledger(app_dsn, "end")) == 20 - len(pgq.admin.dead_letters())
    assert len(ledger(app_dsn, "end")) >= 5


def test_breaker_can_be_opened_and_reset_by_hand(app_dsn, pgq):
    app = flow_app_on(app_dsn)
    app.sync_declarations()  # what a worker does at start-up
    app.close()
    assert pgq.flow.trip_breaker("fragile", 60)
    assert breaker(app_dsn)[0] == "open"
    result = CliRunner().invoke(cli_app, ["breaker", "reset", "fragile", "--dsn", app_dsn])
    assert result.exit_code == 0, result.output
    assert breaker(app_dsn)[0] == "closed"
    result = CliRunner().invoke(cli_app, ["breaker", "reset", "nope", "--dsn", app_dsn])
    assert result.exit_code == 1


# -- retry policies --------------------------------------------------------------------------


def test_retry_on_no_retry_on_and_custom_backoff(app_dsn, pgq, tmp_path):
    app = flow_app_on(app_dsn)  # the task's defaults (max_attempts=4) apply
    retried = app.enqueue("picky", {"error": "connection"})  # OSError: retried, 4 attempts
    final = app.enqueue("picky", {"error": "permission"})  # no_retry_on wins over retry_on
    other = app.enqueue("picky", {"error": "value"})  # not in retry_on: final
    app.close()
    workers = fleet(app_dsn, tmp_path, 2)
    try:
        wait_for(lambda: len(pgq.admin.dead_letters()) == 3, timeout=60, message="all dead")
    finally:
        stop_workers(workers)
    dead = {d["id"]: d for d in pgq.admin.dead_letters()}
    assert dead[retried]["attempts"] == 4 and dead[retried]["reason"] == "max attempts reached"
    assert dead[final]["attempts"] == 1
    assert dead[final]["reason"] == "not retried: the task's retry policy excludes PermissionError"
    assert dead[other]["attempts"] == 1 and "ValueError" in dead[other]["reason"]
    # the custom backoff (0.05 s x attempt) spaced the attempts of the retried job
    times = [e["at"] for e in dead[retried]["errors"]]
    assert len(times) == 4


# -- unique jobs -----------------------------------------------------------------------------


def test_key_kept_after_success_for_unique_for(app_dsn, pgq, tmp_path):
    first = pgq.enqueue("hold", {}, idempotency_key="report:7", unique_for=3600)
    assert first.created
    workers = fleet(app_dsn, tmp_path, 2)
    try:
        wait_for(lambda: ledger(app_dsn, "end"), message="first ran")
        wait_for(lambda: scalar(app_dsn, "SELECT count(*) FROM pgqueue.jobs") == 0, message="ack")
        again = pgq.enqueue("hold", {}, idempotency_key="report:7", unique_for=3600)
        assert int(again) == int(first) and not again.created
        bulk = pgq.enqueue_many(
            [
                flow_app.hold.s(idempotency_key="report:7"),
                flow_app.hold.s(idempotency_key="report:8", unique_for=60),
            ]
        )
        assert (int(bulk[0]), bulk[0].created) == (int(first), False)
        assert bulk[1].created
        # A key not kept (no unique_for) is free again once its job finished.
        plain = pgq.enqueue("hold", {}, idempotency_key="plain")
        wait_for(
            lambda: (
                scalar(app_dsn, "SELECT count(*) FROM pgqueue.jobs WHERE id = %s", (plain,)) == 0
            ),
            message="plain done",
        )
        assert pgq.enqueue("hold", {}, idempotency_key="plain").created
    finally:
        stop_workers(workers)
    with psycopg.connect(app_dsn) as conn:
        kept = conn.execute(
            "SELECT key, job_id, state FROM pgqueue.idempotency_keys ORDER BY key"
        ).fetchall()
    assert ("report:7", int(first), "succeeded") in kept
    assert all(k[0] != "plain" for k in kept)


def test_unique_states_choose_which_final_states_keep_the_key(app_dsn, pgq, tmp_path):
    dead_kept = pgq.enqueue(
        "picky",
        {"error": "value"},
        idempotency_key="k-dead",
        unique_for=60,
        unique_states=("dead",),
    )
    dead_free = pgq.enqueue("picky", {"error": "value"}, idempotency_key="k-free", unique_for=60)
    workers = fleet(app_dsn, tmp_path, 2)
    try:
        wait_for(lambda: len(pgq.admin.dead_letters()) == 2, message="both dead")
    finally:
        stop_workers(workers)
    again = pgq.enqueue("picky", {"error": "value"}, idempotency_key="k-dead")
    assert int(again) == int(dead_kept) and not again.created
    fresh = pgq.enqueue("picky", {"error": "value"}, idempotency_key="k-free")
    assert fresh.created and int(fresh) != int(dead_free)  # only 'succeeded' was kept


def test_kept_key_race_yields_exactly_one_job(app_dsn, pgq):
    """Enqueuers racing a holder that finishes: at every moment exactly one job owns the key."""
    holder = pgq.enqueue("hold", {}, idempotency_key="race", unique_for=60)
    with psycopg.connect(app_dsn, autocommit=True) as conn:
        conn.execute(
            "UPDATE pgqueue.jobs SET state = 'running',"
            " lease_expires_at = now() + interval '1 minute' WHERE id = %s",
            (holder,),
        )
    results: list[int] = []
    stop = threading.Event()

    def enqueuer() -> None:
        app = PgQueue(app_dsn)
        try:
            while not stop.is_set():
                results.append(int(app.enqueue("hold", {}, idempotency_key="race")))
        finally:
            app.close()

    threads = [threading.Thread(target=enqueuer) for _ in range(4)]
    for t in threads:
        t.start()
    time.sleep(0.2)
    with psycopg.connect(app_dsn, autocommit=True) as conn:
        conn.execute("DELETE FROM pgqueue.jobs WHERE id = %s", (holder,))  # an ack
    time.sleep(0.2)
    stop.set()
    for t in threads:
        t.join()
    assert set(results) == {int(holder)}
    assert scalar(app_dsn, "SELECT count(*) FROM pgqueue.jobs") == 0


# -- backpressure ----------------------------------------------------------------------------


def test_max_depth_refuses_then_waits_for_room(app_dsn, pgq, tmp_path):
    pgq.flow.configure_queue("bounded", max_depth=5)
    ids = [pgq.enqueue("hold", {"seconds": 0.05}, queue="bounded") for _ in range(5)]
    with pytest.raises(QueueFullError, match="'bounded' is full"):
        pgq.enqueue("hold", {}, queue="bounded")
    with pytest.raises(QueueFullError, match="cannot take 2 more"):
        pgq.enqueue_many([flow_app.hold.s(queue="bounded"), flow_app.hold.s(queue="bounded")])
    # SQL callers get the same refusal (SQLSTATE PGQ01).
    with psycopg.connect(app_dsn) as conn, pytest.raises(psycopg.Error) as info:
        conn.execute("SELECT pgqueue.enqueue('hold', queue => 'bounded')")
    assert info.value.sqlstate == "PGQ01"
    # An idempotency key matching a waiting job is still answered (nothing is added).
    keyed = pgq.enqueue("hold", {}, queue="other", idempotency_key="k")
    pgq.flow.configure_queue("other", max_depth=1)
    assert int(pgq.enqueue("hold", {}, queue="other", idempotency_key="k")) == int(keyed)
    # Inside the caller's transaction, waiting uses a savepoint: the transaction survives.
    workers = fleet(app_dsn, tmp_path, 2, "--queue", "bounded")
    try:
        with psycopg.connect(app_dsn) as conn:
            conn.execute("INSERT INTO ledger (event) VALUES ('app-write')")
            waited = pgq.enqueue("hold", {}, queue="bounded", wait_if_full=30, conn=conn)
        assert waited.created
        assert ledger(app_dsn, "app-write")
        wait_for(lambda: len(ledger(app_dsn, "end")) == 6, timeout=60, message="drained")
    finally:
        stop_workers(workers)
    assert len(ids) == 5


# -- fan-out ---------------------------------------------------------------------------------


def test_publish_enqueues_one_job_per_subscriber_in_the_callers_transaction(app_dsn):
    app = flow_app_on(app_dsn)
    with psycopg.connect(app_dsn) as conn:
        app.publish("user.signed_up", {"user_id": 1}, conn=conn)
        conn.rollback()
    assert scalar(app_dsn, "SELECT count(*) FROM pgqueue.jobs") == 0
    with psycopg.connect(app_dsn) as conn:
        ids = app.publish("user.signed_up", {"user_id": 2, "plan": "pro"}, conn=conn)
        assert scalar(app_dsn, "SELECT count(*) FROM pgqueue.jobs") == 0  # not committed yet
    assert len(ids) == 2
    assert app.publish("user.upgraded", {"user_id": 3}, conn=None) and True
    assert app.publish("nobody.listens", {"x": 1}) == []
    from pgqueue import InvalidJobError

    with pytest.raises(InvalidJobError):
        app.publish("user.signed_up", {"user": 1})  # a subscriber cannot take it: nothing written
    app.close()
    burst = [spawn_worker(app_dsn, "--burst", "--concurrency", "1", app=APP) for _ in range(2)]
    assert [w.wait(60) for w in burst] == [0, 0]
    notes = sorted(r[5] for r in ledger(app_dsn, "end"))
    assert notes == ["crm:2:pro", "crm:3:free", "welcome:2:pro"]


# -- delayed jobs ----------------------------------------------------------------------------


def test_idle_workers_pick_a_future_job_up_at_its_time(app_dsn, pgq, tmp_path):
    workers = fleet(app_dsn, tmp_path, 2, "--poll-interval", "60s")
    try:
        time.sleep(1.0)  # idle, listening, sleeping for their long poll interval
        due = scalar(app_dsn, "SELECT now() + interval '1.5 seconds'")
        pgq.enqueue("hold", {}, run_at=due)
        wait_for(lambda: ledger(app_dsn, "start"), timeout=30, message="delayed job started")
    finally:
        stop_workers(workers)
    late = scalar(
        app_dsn, "SELECT extract(epoch FROM min(at) - %s) FROM ledger WHERE event = 'start'", (due,)
    )
    # Not before its time, and long before the 60 s poll (the timer to the next due job);
    # benchmarks/flow.py measures the real figure (milliseconds).
    assert 0 <= float(late) < 3.0
