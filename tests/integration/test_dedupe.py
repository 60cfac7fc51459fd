"""Deduplication modes against PostgreSQL: keys derived from arguments (``unique_by``), keys held
only until a job starts (``unique_among="pending"``), debounce (``on_conflict="replace"``) and
throttle, single and bulk, from Python and SQL, under racing producers and claiming workers."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import threading
from collections import Counter
from datetime import timedelta
from typing import Any

import psycopg
import pytest

from pgqueue import InvalidJobError, PgQueue
from pgqueue.db.queries import query
from pgqueue.rules.dedupe import derived_key
from tests.helpers import (
    ROOT,
    ledger,
    scalar,
    spawn_fleet,
    stop_workers,
    thread_worker,
    wait_for,
)

APP = "tests.integration.dedupe_app:pgq"


@pytest.fixture
def tasks(pgq: PgQueue) -> Any:
    class Tasks:
        @pgq.task(name="t.report")
        def report(month: str, fmt: str = "pdf") -> None: ...

        @pgq.task(name="t.other")
        def other(month: str, fmt: str = "pdf") -> None: ...

        @pgq.task(name="t.refresh", unique_by=True, unique_among="pending")
        def refresh(account: int) -> None: ...

        @pgq.task(name="t.sync", unique_by=("doc",), on_conflict="replace")
        def sync(doc: int, version: int = 0) -> None: ...

    return Tasks


def row(conn: psycopg.Connection[Any], job_id: int) -> Any:
    return conn.execute(
        "SELECT state, args, idempotency_key, run_at, priority, attempts, key_until_started"
        " FROM pgqueue.jobs WHERE id = %s",
        (job_id,),
    ).fetchone()


def claim(
    conn: psycopg.Connection[Any], task: str, queue: str = "default"
) -> list[tuple[int, int]]:
    """Claim every due job of ``task`` as a worker would (the claim function); (id, token)."""
    return conn.execute(
        "SELECT id, lease_token FROM pgqueue.claim(ARRAY[%s], ARRAY[%s], 100,"
        " interval '1 minute', gen_random_uuid()) WHERE id IS NOT NULL ORDER BY id",
        (queue, task),
    ).fetchall()


# -- unique_by -----------------------------------------------------------------------------------


def test_unique_by_keys_a_job_by_its_task_and_arguments(pgq, conn, tasks):
    first = tasks.report.enqueue("2026-11", unique_by=True)
    assert first.created
    assert tasks.report.enqueue(month="2026-11", unique_by=True) == first  # same stored args
    # By name, arguments in another order: the same key (canonical JSON, sorted keys).
    again = pgq.enqueue("t.report", {"fmt": "csv", "month": "2026-12"}, unique_by=True)
    same = pgq.enqueue("t.report", {"month": "2026-12", "fmt": "csv"}, unique_by=True)
    assert again.created and same == again and not same.created
    # Another task with the same arguments is another job; so are other arguments.
    assert tasks.other.enqueue("2026-11", unique_by=True).created
    assert tasks.report.enqueue("2026-11", "csv", unique_by=True).created
    # A subset: the format does not count.
    monthly = tasks.report.enqueue("2027-01", "pdf", unique_by=["month"])
    assert tasks.report.enqueue("2027-01", "csv", unique_by=["month"]) == monthly
    key = row(conn, first)[2]
    assert key == derived_key("t.report", {"month": "2026-11"}, None)
    assert key.startswith("t.report:") and len(key) == len("t.report:") + 64


def test_a_tasks_unique_by_is_a_default_a_call_can_change(pgq, conn, tasks):
    a = tasks.refresh.enqueue(7)
    assert tasks.refresh.enqueue(7) == a and tasks.refresh.enqueue(8) != a
    assert tasks.refresh.enqueue(7, unique_by=False, unique_among="live").created is True
    explicit = tasks.refresh.enqueue(7, idempotency_key="mine")  # the call's key wins
    assert explicit != a and row(conn, explicit)[2] == "mine"
    with pytest.raises(InvalidJobError, match="either idempotency_key or unique_by"):
        tasks.report.enqueue("x", idempotency_key="k", unique_by=True)
    with pytest.raises(InvalidJobError, match=r"unique_by names 'mnth'.*month"):
        tasks.report.enqueue("x", unique_by=["mnth"])
    with pytest.raises(InvalidJobError, match="unique_by names 'mnth'"):
        pgq.enqueue("t.report", {"month": "x"}, unique_by="mnth")
    with pytest.raises(InvalidJobError, match="throttle needs a key"):
        tasks.report.enqueue("x", throttle=60)
    with pytest.raises(InvalidJobError, match="unique_for and throttle keep it"):
        tasks.refresh.enqueue(1, unique_for=60)
    assert scalar(pgq.dsn, "SELECT count(*) FROM pgqueue.jobs") == 4


# -- unique_among="pending" ---------------------------------------------------------------------


def test_a_pending_key_is_free_again_once_the_job_started(conn, tasks):
    a = tasks.refresh.enqueue(1)
    assert tasks.refresh.enqueue(1) == a  # pending: one job
    assert row(conn, a)[6] is True
    [(claimed, _)] = claim(conn, "t.refresh")
    assert claimed == a
    b = tasks.refresh.enqueue(1)  # a runs: "refresh again after this run"
    assert b.created and b != a
    assert tasks.refresh.enqueue(1) == b and not tasks.refresh.enqueue(1).created
    # The key of a live job (the default) is held while it runs.
    live = tasks.refresh.enqueue(2, unique_among="live")
    claim(conn, "t.refresh")
    assert tasks.refresh.enqueue(2, unique_among="live") == live


def _back_to_the_queue(conn: psycopg.Connection[Any], path: str, job: int, token: int) -> None:
    """Put a running job back as the worker or the reaper would."""
    held = {"ids": [job], "tokens": [token]}
    if path == "retry":
        error = {"kinds": ["error"], "delays": [0.0], "errors": ['{"message": "x"}'], "wake": None}
        assert conn.execute(query("fail_jobs"), {**held, **error}).fetchall() == [(job, "retry")]
    elif path == "retry_later":
        retry = {"kinds": ["retry"], "delays": [30.0], "errors": [None], "wake": None}
        assert conn.execute(query("fail_jobs"), {**held, **retry}).fetchall() == [(job, "retry")]
    elif path == "release":
        assert conn.execute(query("release_jobs"), held).fetchall() == [(job,)]
    else:
        conn.execute(
            "UPDATE pgqueue.jobs SET lease_expires_at = now() - interval '1s' WHERE id = %s",
            (job,),
        )
        assert conn.execute("SELECT pgqueue.reap()").fetchone()[0] == 1


@pytest.mark.parametrize("path", ["retry", "retry_later", "release", "reap"])
def test_a_started_job_comes_back_without_its_key_and_never_collides(pgq, conn, tasks, path):
    """A started job no longer holds its pending key, so going back to the queue (a retry, a
    release at shutdown, the reaper) can never meet the newer job that took the key: the write
    succeeds, both jobs run, and the newer one keeps the key."""
    a = tasks.refresh.enqueue(1)
    [(_, token)] = claim(conn, "t.refresh")
    b = tasks.refresh.enqueue(1)
    _back_to_the_queue(conn, path, a, token)
    state_a, _, key_a, *_ = row(conn, a)
    assert state_a in ("ready", "scheduled") and key_a == row(conn, b)[2]
    assert tasks.refresh.enqueue(1) == b  # b holds the key, a runs again without it
    assert pgq.enqueue_many([tasks.refresh.s(1)]) == [b]
    # With no newer job, the job that came back still does not hold it: a new one may come.
    claim(conn, "t.refresh")  # a (if due) and b start
    c = tasks.refresh.enqueue(1)
    assert c.created and c not in (a, b)


def test_a_worker_retries_and_releases_a_job_whose_key_a_newer_job_holds(app_dsn, pgq, conn):
    """The same, with a real worker: the first attempt of each job fails while a newer job with
    the same key waits, and at shutdown a running job is released while another waits; every
    write succeeds, nothing is dead-lettered, and every job runs."""
    from tests.integration import dedupe_app

    def flaky(doc: int, seconds: float) -> Any:
        return pgq.enqueue(dedupe_app.flaky, {"doc": doc, "seconds": seconds})

    with thread_worker(dedupe_app.pgq, app_dsn, concurrency=1, shutdown_grace=0.2) as worker:
        first = flaky(1, 0.3)
        wait_for(lambda: ledger(app_dsn, "start"), message="the first job to start")
        second = flaky(1, 0.3)  # the first runs: a new job, which then holds the key
        assert second.created and second != first
        wait_for(lambda: len(ledger(app_dsn, "start")) == 4, message="both to fail once and pass")
        wait_for(lambda: scalar(app_dsn, "SELECT count(*) FROM pgqueue.jobs") == 0)
        running = flaky(2, 30)
        wait_for(lambda: len(ledger(app_dsn, "start")) == 5, message="the long job to start")
        waiting = flaky(2, 30)
        assert waiting.created
        worker.stop()  # releases the running job while the waiting one holds the key
    assert sorted(r[0] for r in ledger(app_dsn, "start")) == sorted(
        [first] * 2 + [second] * 2 + [running]
    )
    assert conn.execute("SELECT id, state FROM pgqueue.jobs ORDER BY id").fetchall() == [
        (running, "ready"),
        (waiting, "ready"),
    ]
    assert scalar(app_dsn, "SELECT count(*) FROM pgqueue.dead_letters") == 0
    assert flaky(2, 30) == waiting


def test_bulk_lookups_and_replays_see_only_the_holder(pgq, conn, tasks):
    a = tasks.refresh.enqueue(3)
    [(_, token)] = claim(conn, "t.refresh")
    fail = {"kinds": ["fail"], "delays": [0.0], "errors": ['{"message": "x"}'], "wake": None}
    conn.execute(query("fail_jobs"), {"ids": [a], "tokens": [token], **fail})
    b = tasks.refresh.enqueue(3)
    # The dead letter keeps its key; replaying it while b holds the key leaves it there.
    assert pgq.admin.replay_dead_letters(ids=[a]) == 0
    claim(conn, "t.refresh")  # b starts: the key is free
    assert pgq.admin.replay_dead_letters(ids=[a]) == 1
    assert tasks.refresh.enqueue(3) == a  # the replayed job holds it as a live job would
    assert b != a


# -- on_conflict="replace" (debounce) -----------------------------------------------------------


def test_replace_moves_a_pending_job_to_the_newest_arguments_and_time(conn, tasks):
    first = tasks.sync.enqueue(1, 1, delay=60, priority=3)
    state, _, _, run_at, *_ = row(conn, first)
    again = tasks.sync.enqueue(1, 2, delay=120, priority=-5)
    assert again == first and not again.created and again.replaced
    state2, args2, _, run_at2, priority2, attempts2, _ = row(conn, first)
    assert args2 == {"doc": 1, "version": 2} and run_at2 - run_at >= timedelta(seconds=59)
    assert (state2, priority2, attempts2) == (state, 3, 0)  # only args and run_at change
    now = tasks.sync.enqueue(1, 3)  # no delay: due now, so ready
    assert now.replaced and row(conn, first)[0] == "ready"
    # replace_args: the arguments only; the job keeps its time (a fixed batching window).
    window = tasks.sync.enqueue(2, 1, delay=60)
    kept = tasks.sync.enqueue(2, 2, on_conflict="replace_args", delay=600)
    assert kept.replaced and row(conn, window)[1] == {"doc": 2, "version": 2}
    assert row(conn, window)[0] == "scheduled"
    assert abs((row(conn, window)[3] - run_at).total_seconds()) < 5  # still about a minute away
    # keep (the default): the holder as it was.
    assert not tasks.sync.enqueue(2, 3, on_conflict="keep").replaced
    assert row(conn, window)[1] == {"doc": 2, "version": 2}
    assert repr(now) == f"JobId({int(first)}, created=False, replaced=True)"


def test_replace_never_touches_a_running_job(pgq, conn, tasks):
    live = tasks.sync.enqueue(5, 1)
    claim(conn, "t.sync")
    same = tasks.sync.enqueue(5, 2)  # live: the running job holds the key, unchanged
    assert same == live and not same.created and not same.replaced
    assert row(conn, live)[1] == {"doc": 5, "version": 1}
    # Held until started: once the job runs, a new one is enqueued (and then debounced).
    started = tasks.sync.enqueue(6, 1, unique_among="pending")
    claim(conn, "t.sync")
    pending = tasks.sync.enqueue(6, 2, unique_among="pending")
    assert pending.created and pending != started
    assert tasks.sync.enqueue(6, 3, unique_among="pending").replaced
    assert row(conn, started)[1] == {"doc": 6, "version": 1}
    assert row(conn, pending)[1] == {"doc": 6, "version": 3}
    # A key shared across tasks: another task's job is never given these arguments.
    mine = pgq.enqueue("t.report", {"month": "m"}, idempotency_key="shared")
    theirs = pgq.enqueue("t.other", {"month": "n"}, idempotency_key="shared", on_conflict="replace")
    assert theirs == mine and not theirs.replaced and row(conn, mine)[1] == {"month": "m"}


@pytest.mark.parametrize(
    ("unique_among", "on_conflict"),
    [("live", "replace"), ("pending", "replace"), ("pending", "keep")],
)
def test_an_enqueue_racing_the_claim(dsn, conn, tasks, unique_among, on_conflict):
    """The claim locks the row first: the enqueue waits for it and then finds the job running,
    so it returns the running job (live) or enqueues a new one (pending); never changes it."""
    modes = {"unique_among": unique_among, "on_conflict": on_conflict}
    job = tasks.sync.enqueue(9, 1, **modes)
    results: list[Any] = []
    with psycopg.connect(dsn) as worker:
        [(claimed, _)] = claim(worker, "t.sync")  # in an open transaction: the row is locked
        producer = threading.Thread(
            target=lambda: results.append(tasks.sync.enqueue(9, 2, **modes))
        )
        producer.start()
        producer.join(0.5)
        assert producer.is_alive(), "the enqueue waits for the claim's row lock"
        worker.commit()
    producer.join(10)
    [result] = results
    assert claimed == job and row(conn, job)[1] == {"doc": 9, "version": 1}
    if unique_among == "live":
        assert result == job and not result.created and not result.replaced
    else:
        assert result.created and row(conn, result)[1] == {"doc": 9, "version": 2}


def test_a_pending_job_returned_to_a_transaction_starts_after_it(dsn, conn, tasks):
    """ "Refresh again after this change": the pending job an enqueue returns inside a
    transaction cannot start before that transaction ends, so it sees what it wrote."""
    job = tasks.refresh.enqueue(11)
    with psycopg.connect(dsn) as producer:
        assert tasks.refresh.enqueue(11, conn=producer) == job
        assert claim(conn, "t.refresh") == []  # held back until the producer commits
        producer.commit()
    assert [c[0] for c in claim(conn, "t.refresh")] == [job]


def test_a_replace_holds_the_job_until_it_commits_or_rolls_back(dsn, conn, tasks):
    job = tasks.sync.enqueue(4, 1)
    with psycopg.connect(dsn) as producer:
        assert tasks.sync.enqueue(4, 2, conn=producer).replaced
        assert claim(conn, "t.sync") == []  # the claim skips the row being replaced
        producer.rollback()
    assert row(conn, job)[1] == {"doc": 4, "version": 1}
    with psycopg.connect(dsn) as producer:
        assert tasks.sync.enqueue(4, 3, conn=producer).replaced
        producer.commit()
    assert [c[0] for c in claim(conn, "t.sync")] == [job]
    assert row(conn, job)[1] == {"doc": 4, "version": 3}


AUDIT = """
CREATE TABLE public.args_changed_while_running (id bigint, before jsonb, after jsonb);
CREATE FUNCTION public.audit_running_args() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
    INSERT INTO public.args_changed_while_running VALUES (OLD.id, OLD.args, NEW.args);
    RETURN NEW;
END $$;
CREATE TRIGGER audit_running_args AFTER UPDATE ON pgqueue.jobs FOR EACH ROW
    WHEN (OLD.state = 'running' AND OLD.args IS DISTINCT FROM NEW.args)
    EXECUTE FUNCTION public.audit_running_args();
"""


@pytest.mark.slow
def test_debounce_under_racing_producers_and_a_claiming_fleet(app_dsn, pgq, conn, tmp_path):
    """Producers (threads and processes) debounce one document while two worker processes
    claim: at most one pending job at any time, no running job's arguments ever change, every
    job id a producer got runs exactly once, and the last version enqueued runs."""
    from tests.integration.dedupe_app import sync

    conn.execute(AUDIT)
    pending_peak = 0
    stop = threading.Event()

    def sample() -> None:
        nonlocal pending_peak
        with psycopg.connect(app_dsn, autocommit=True) as c:
            while not stop.is_set():
                pending = c.execute(
                    "SELECT count(*) FROM pgqueue.jobs WHERE task = 'dedupe.sync'"
                    " AND state <> 'running'"
                ).fetchone()[0]
                pending_peak = max(pending_peak, pending)
                stop.wait(0.002)

    returned: list[list[Any]] = []

    def thread_producer(name: str) -> None:
        for n in range(60):
            job = pgq.enqueue(sync, {"doc": 1, "version": f"{name}-{n}", "seconds": 0.01})
            returned.append([int(job), job.created, job.replaced, f"{name}-{n}"])

    env = {**os.environ, "PGQUEUE_DSN": app_dsn}
    command = [sys.executable, "-m", "tests.integration.dedupe_app"]
    fleet = spawn_fleet(app_dsn, 2, "--concurrency", "4", app=APP, log_dir=tmp_path)
    sampler = threading.Thread(target=sample)
    try:
        sampler.start()
        processes = [
            subprocess.Popen([*command, f"p{i}", "60"], cwd=ROOT, env=env, stdout=subprocess.PIPE)
            for i in range(2)
        ]
        threads = [threading.Thread(target=thread_producer, args=(f"t{i}",)) for i in range(3)]
        for thread in threads:
            thread.start()
        for thread in threads:
            thread.join(60)
        for process in processes:
            out, _ = process.communicate(timeout=60)
            assert process.returncode == 0
            returned.extend(json.loads(line) for line in out.decode().splitlines())
        final = pgq.enqueue(sync, {"doc": 1, "version": "final"})
        returned.append([int(final), final.created, final.replaced, "final"])
        wait_for(
            lambda: scalar(app_dsn, "SELECT count(*) FROM pgqueue.jobs") == 0,
            timeout=60,
            message="every job ran",
        )
    finally:
        stop.set()
        sampler.join(10)
        stop_workers(fleet)
    assert len(returned) == 5 * 60 + 1
    assert pending_peak <= 1
    assert conn.execute("SELECT * FROM public.args_changed_while_running").fetchall() == []
    started = Counter(r[0] for r in ledger(app_dsn, "start"))
    created = {job for job, was_created, _, _ in returned if was_created}
    # Every id handed out was created by exactly one call and ran exactly once.
    assert {job for job, *_ in returned} == created == set(started)
    assert set(started.values()) == {1}
    assert any(json.loads(r[5])["version"] == "final" for r in ledger(app_dsn, "start"))
    assert sum(1 for *_, replaced, _ in returned if replaced) > 0  # debounced at least once
    assert len(created) < len(returned)


# -- throttle -----------------------------------------------------------------------------------


@pytest.mark.slow
def test_throttle_allows_one_job_per_period_fleet_wide(app_dsn, conn, tmp_path):
    """Producers on several connections enqueue the same key for a few one-second periods
    while a worker runs the jobs: exactly one job per period, whoever asked and whether or not
    the period's job already finished (its key is kept until the period is over)."""
    conn.execute(
        "CREATE TABLE public.job_keys (id bigint, key text);"
        " CREATE FUNCTION public.record_key() RETURNS trigger LANGUAGE plpgsql AS $$"
        " BEGIN INSERT INTO public.job_keys VALUES (NEW.id, NEW.idempotency_key); RETURN NULL;"
        " END $$;"
        " CREATE TRIGGER record_key AFTER INSERT ON pgqueue.jobs FOR EACH ROW"
        " EXECUTE FUNCTION public.record_key()"
    )
    client = PgQueue(app_dsn)
    returned: list[Any] = []
    deadline = 0.0

    def producer() -> None:
        with psycopg.connect(app_dsn, autocommit=True) as c:
            while c.execute("SELECT extract(epoch FROM now())::float8").fetchone()[0] < deadline:
                returned.append(
                    client.enqueue("dedupe.tick", {}, idempotency_key="tick", throttle=1, conn=c)
                )

    fleet = spawn_fleet(app_dsn, 1, "--concurrency", "4", app=APP, log_dir=tmp_path)
    try:
        # Three and a half seconds of the database's clock: three periods at least.
        deadline = scalar(app_dsn, "SELECT extract(epoch FROM now())::float8") + 3.5
        threads = [threading.Thread(target=producer) for _ in range(4)]
        for thread in threads:
            thread.start()
        for thread in threads:
            thread.join(30)
        wait_for(lambda: scalar(app_dsn, "SELECT count(*) FROM pgqueue.jobs") == 0, timeout=30)
    finally:
        stop_workers(fleet)
        client.close()
    ids = {int(job) for job in returned}
    created = [int(job) for job in returned if job.created]
    assert sorted(created) == sorted(ids)  # each job created by exactly one call
    # (An insert that met a holder finishing at that moment was taken back at once: recorded
    # here, but never handed out and never run.)
    keys = dict(conn.execute("SELECT id, key FROM public.job_keys").fetchall())
    keys = {job: key for job, key in keys.items() if job in ids}
    assert set(keys) == ids
    periods = sorted(key.split("@")[1] for key in keys.values())
    assert len(periods) == len(set(periods)) >= 3  # one job per period, three periods or more
    assert all(key.startswith("tick@") and key.endswith("Z") for key in keys.values())
    assert len(returned) > len(ids)
    assert sorted(r[0] for r in ledger(app_dsn, "start")) == sorted(ids)  # each ran once


def test_throttle_key_is_the_period_by_the_database_clock(conn, pgq):
    job = pgq.enqueue("t", {}, idempotency_key="k", throttle=timedelta(hours=1))
    key, expected = conn.execute(
        "SELECT idempotency_key, 'k@' || to_char(date_trunc('hour', created_at AT TIME ZONE"
        " 'UTC'), 'YYYY-MM-DD\"T\"HH24:MI:SS\"Z\"') FROM pgqueue.jobs WHERE id = %s",
        (job,),
    ).fetchone()
    assert key == expected
    assert pgq.enqueue("t", {}, idempotency_key="k", throttle=3600) == job
    # Kept after the job ended (here: deleted as if it succeeded), until the period is over.
    conn.execute(
        "UPDATE pgqueue.jobs SET state = 'running', lease_expires_at = now() WHERE id = %s", (job,)
    )
    conn.execute("DELETE FROM pgqueue.jobs WHERE id = %s", (job,))
    again = pgq.enqueue("t", {}, idempotency_key="k", throttle=3600)
    assert again == job and not again.created
    with pytest.raises(InvalidJobError, match="whole number of seconds"):
        pgq.enqueue("t", {}, idempotency_key="k", throttle=1.5)


# -- bulk and SQL -------------------------------------------------------------------------------


def test_bulk_enqueue_with_modes_behaves_as_consecutive_enqueues(pgq, conn, tasks):
    before = tasks.sync.enqueue(1, 0)
    ids = pgq.enqueue_many(
        [
            tasks.sync.s(1, 1),  # replaces the job enqueued before
            tasks.sync.s(2, 1),  # new
            tasks.sync.s(2, 2),  # replaces the batch's own job
            tasks.refresh.s(5),  # pending key, new
            tasks.refresh.s(5),  # the same job
            tasks.report.s("m", unique_by=True),  # a derived key, default mode
            tasks.report.s("m", unique_by=True),
            tasks.report.s("m", idempotency_key="t", throttle=60),
            tasks.report.s("n", idempotency_key="t", throttle=60),
            tasks.report.s("plain"),
        ]
    )
    flags = [(int(i), i.created, i.replaced) for i in ids]
    assert flags[0] == (before, False, True) and row(conn, before)[1] == {"doc": 1, "version": 1}
    assert flags[1][1:] == (True, False) and flags[2] == (flags[1][0], False, True)
    assert row(conn, ids[1])[1] == {"doc": 2, "version": 2}
    assert flags[3][1:] == (True, False) and flags[4] == (flags[3][0], False, False)
    assert flags[5][1] and flags[6] == (flags[5][0], False, False)
    assert flags[7][1] and flags[8] == (flags[7][0], False, False)
    assert row(conn, ids[7])[2].startswith("t@") and flags[9][1]
    assert scalar(pgq.dsn, "SELECT count(*) FROM pgqueue.jobs") == 6


def test_sql_enqueue_takes_the_modes(conn):
    first = conn.execute(
        "SELECT * FROM pgqueue.enqueue_job('s.t', '{\"v\": 1}', idempotency_key => 'k',"
        " unique_among => 'pending', on_conflict => 'replace')"
    ).fetchone()
    again = conn.execute(
        "SELECT pgqueue.enqueue('s.t', '{\"v\": 2}', idempotency_key => 'k',"
        " unique_among => 'pending', on_conflict => 'replace')"
    ).fetchone()
    assert first[1:] == (True, False) and again[0] == first[0]
    assert row(conn, first[0])[1] == {"v": 2}
    assert conn.execute(
        "SELECT created, replaced FROM pgqueue.enqueue_job('s.t', idempotency_key => 'p',"
        " throttle => interval '1 minute')"
    ).fetchone() == (True, False)
    for bad, message in [
        ("on_conflict => 'merge'", "on_conflict must be"),
        ("unique_among => 'running'", "unique_among must be"),
        ("throttle => interval '1.5 seconds'", "whole number of seconds"),
        ("throttle => interval '1 minute', unique_for => interval '1 hour'", "whole number"),
        ("unique_among => 'pending', unique_for => interval '1 hour'", "releases the key"),
    ]:
        with pytest.raises(psycopg.errors.InvalidParameterValue, match=message):
            conn.execute(f"SELECT pgqueue.enqueue_job('s.t', idempotency_key => 'x', {bad})")
    with pytest.raises(psycopg.errors.InvalidParameterValue, match="need an idempotency_key"):
        conn.execute("SELECT pgqueue.enqueue('s.t', on_conflict => 'replace')")
