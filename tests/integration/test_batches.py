"""Batch tasks end to end: real `pgq work` processes running tests/integration/batch_app.py.

Two workers are shared by the whole module (one database for all its tests): one with handler
threads serving queue ``batches``, one with ``--pool process`` serving ``proc``. Tests tell
their jobs apart by id. The shutdown test runs a worker of its own.
"""

from __future__ import annotations

import os
import signal
import time
from collections import Counter
from collections.abc import Iterator, Sequence
from pathlib import Path
from typing import Any

import psycopg
import pytest

from pgqueue import PgQueue
from tests.conftest import PgServer
from tests.helpers import scalar, spawn_worker, stop_workers, wait_for

APP = "tests.integration.batch_app:pgq"


@pytest.fixture(scope="module")
def db(pg_server: PgServer) -> Iterator[str]:
    """The module's database, also as PGQUEUE_DSN (the app's own client, ``task.enqueue``)."""
    from tests.integration.batch_app import pgq

    name = f"pgqueue_test_batches_{os.getpid()}"
    with pytest.MonkeyPatch.context() as env:
        env.setenv("PGQUEUE_DSN", pg_server.create_database(name, template=pg_server.template))
        yield os.environ["PGQUEUE_DSN"]
        pgq.close()
    pg_server.drop_database(name)


@pytest.fixture(scope="module")
def workers(db: str, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Path]:
    logs = tmp_path_factory.mktemp("batch-workers")
    common = ("--concurrency", "4", "--lease", "10")
    fleet = [
        spawn_worker(db, "--queue", "batches", *common, app=APP, log=logs / "threads.log"),
        spawn_worker(
            db, "--queue", "proc", "--pool", "process", *common, app=APP, log=logs / "proc.log"
        ),
    ]
    try:
        wait_for(
            lambda: scalar(db, "SELECT count(*) FROM pgqueue.workers") == 2,
            timeout=60,
            message="both workers registered",
        )
        yield logs
    finally:
        stop_workers(fleet)


@pytest.fixture
def pgq(db: str, workers: Path) -> Iterator[PgQueue]:
    queue = PgQueue(db)
    yield queue
    queue.close()


def ledger(dsn: str, ids: Sequence[int], event: str = "batch") -> list[tuple[int, int, int, str]]:
    """(job_id, attempt, pid, note) of the ledger rows of these jobs, oldest first."""
    with psycopg.connect(dsn) as conn:
        return conn.execute(
            "SELECT job_id, attempt, pid, note FROM ledger"
            " WHERE job_id = ANY(%s) AND event = %s ORDER BY seq",
            [ids, event],
        ).fetchall()


def batch_sizes(rows: list[tuple[int, int, int, str]]) -> list[int]:
    """The size of each batch the rows ran in (one entry per batch)."""
    return sorted(int(note.split("/")[1]) for note in {row[3] for row in rows})


def finished(dsn: str, ids: Sequence[int]) -> dict[int, tuple[str, int | None, list[Any]]]:
    """How each finished job ended: (state, attempts, errors) from history or dead letters; a
    job that left no row succeeded without keeping its result (attempts unknown)."""
    with psycopg.connect(dsn) as conn:
        rows = conn.execute(
            "SELECT id, state, attempts, errors FROM pgqueue.job_history WHERE id = ANY(%(ids)s)"
            " UNION ALL SELECT id, 'dead', attempts, errors FROM pgqueue.dead_letters"
            " WHERE id = ANY(%(ids)s)"
            " UNION ALL SELECT id, NULL, NULL, NULL FROM unnest(%(ids)s::bigint[]) AS i(id)"
            " WHERE NOT EXISTS (SELECT FROM pgqueue.jobs AS j WHERE j.id = i.id)",
            {"ids": ids},
        ).fetchall()
    ended: dict[int, tuple[str, int | None, list[Any]]] = {}
    for job, state, attempts, errors in rows:
        if state is not None or job not in ended:
            ended[job] = (state or "succeeded", attempts, errors or [])
    return ended


def wait_finished(dsn: str, ids: Sequence[int], timeout: float = 20) -> dict[int, Any]:
    return wait_for(
        lambda: (done := finished(dsn, ids)) and len(done) == len(ids) and done,
        timeout=timeout,
        message=f"{len(ids)} jobs finished",
    )


def test_a_batch_fills_by_size_and_each_job_keeps_its_result(db, pgq):
    from tests.integration.batch_app import record

    ids = pgq.enqueue_many([record.s(n=n) for n in range(12)])
    done = wait_finished(db, ids)
    assert {state for state, _, _ in done.values()} == {"succeeded"}
    rows = ledger(db, ids)
    assert sorted(row[0] for row in rows) == sorted(ids)  # each job ran once
    assert batch_sizes(rows) == [2, 5, 5]  # two full batches, then what waited
    assert [pgq.result(job, timeout=5) for job in ids] == [n * 2 for n in range(12)]


def test_a_batch_runs_with_what_it_has_once_its_wait_is_over(db, pgq):
    from tests.integration.batch_app import record

    start = scalar(db, "SELECT now()")
    ids = pgq.enqueue_many([record.s(n=n) for n in range(3)])
    wait_finished(db, ids)
    rows = ledger(db, ids)
    assert batch_sizes(rows) == [3]  # one batch, short of batch_size
    waited = scalar(
        db,
        "SELECT min(at) - %s FROM ledger WHERE job_id = ANY(%s) AND event = 'batch'",
        [start, ids],
    )
    assert waited.total_seconds() >= 1.0  # batch_wait: the first job waited for more


@pytest.mark.parametrize("task", ["record", "arecord", "precord"])
def test_a_handler_fails_a_subset_and_each_job_retries_on_its_own(db, pgq, task):
    """Threads, async, and a child process: the same rules per job."""
    from tests.integration import batch_app

    handler = getattr(batch_app, task)
    outcomes = [None, "error", None, "fail", "retry"]
    ids = pgq.enqueue_many(
        [handler.s(n=n, outcome=o) if o else handler.s(n=n) for n, o in enumerate(outcomes)]
    )
    done = wait_finished(db, ids)
    ok, error, ok2, fail, retry = ids
    assert {job: done[job][0] for job in ids} == {
        ok: "succeeded",
        error: "dead",
        ok2: "succeeded",
        fail: "dead",
        retry: "succeeded",
    }
    # Each keeps its own attempts and errors: two failed attempts (max_attempts 2), one Fail,
    # a Retry that burned nothing, and the others untouched.
    assert [e["error"] for e in done[error][2]] == ["ValueError", "ValueError"]
    assert done[error][1] == 2
    assert [e["error"] for e in done[fail][2]] == ["pgqueue.errors.Fail"]
    assert done[retry][1] == 1 and done[retry][2] == []
    assert done[ok][1] == 1 and done[ok][2] == []
    runs = Counter(row[0] for row in ledger(db, ids))
    assert runs == {ok: 1, error: 2, ok2: 1, fail: 1, retry: 2}
    assert pgq.result(ok, timeout=5) == 0 and pgq.result(ok2, timeout=5) == 4
    if task == "precord":
        worker_pid = scalar(db, "SELECT pid FROM pgqueue.workers WHERE 'proc' = ANY(queues)")
        assert worker_pid not in {row[2] for row in ledger(db, ids)}  # ran in children


def test_an_exception_fails_every_job_of_the_batch_once(db, pgq):
    from tests.integration.batch_app import record

    ids = pgq.enqueue_many([record.s(n=0, outcome="raise"), *(record.s(n=n) for n in (1, 2))])
    done = wait_finished(db, ids)
    first = [row for row in ledger(db, ids) if row[1] == 1]
    assert sorted(row[0] for row in first) == sorted(ids)  # one batch at the first attempt
    for job in ids:
        state, attempts, errors = done[job]
        assert (state, attempts) == ("succeeded", 2)
        assert [(e["error"], e["message"]) for e in errors] == [
            ("RuntimeError", "the whole batch failed")
        ]


def test_arguments_declared_by_a_dataclass(db, pgq):
    from tests.integration.batch_app import Point, points

    first = points.enqueue(x=1, y=2)
    second = points.options(priority=1).enqueue(Point(3))
    # By name: a client that does not know the task gives it no defaults.
    third = pgq.enqueue("batch.points", {"x": 5}, queue="batches", result_ttl=60)
    assert [pgq.result(job, timeout=10) for job in (first, second, third)] == [12, 30, 50]


def test_arguments_that_do_not_fit_fail_alone(db, pgq):
    from tests.integration.batch_app import points

    good = points.enqueue(x=1)
    with psycopg.connect(db, autocommit=True) as conn:
        [[bad]] = conn.execute(
            "INSERT INTO pgqueue.jobs (queue, task, args) VALUES"
            " ('batches', 'batch.points', '{\"z\": 1}') RETURNING id"
        ).fetchall()
    done = wait_finished(db, [good, bad])
    assert done[good][0] == "succeeded"
    assert done[bad][0] == "dead"
    assert "missing a required argument" in done[bad][2][0]["message"]


@pytest.mark.parametrize("task", ["slow", "aslow", "pslow"])
def test_the_timeout_applies_to_the_whole_call(db, pgq, task):
    from tests.integration import batch_app

    handler = getattr(batch_app, task)
    ids = pgq.enqueue_many([handler.s(n=n) for n in range(3)])
    done = wait_finished(db, ids)
    assert batch_sizes(ledger(db, ids, "start")) == [3]
    for state, attempts, errors in done.values():
        assert (state, attempts) == ("dead", 1)
        assert errors[0]["error"] == "pgqueue.errors.JobTimeout"
    time.sleep(1.0)  # past the handler's own end, had it gone on
    late = ledger(db, ids, "late")
    # A thread cannot be stopped (its result is ignored); a task is cancelled, a child killed.
    assert len(late) == (3 if task == "slow" else 0)


@pytest.mark.parametrize("task", ["waits", "pwaits"])
def test_cancelling_one_job_of_a_running_batch(db, pgq, task):
    from tests.integration import batch_app

    handler = getattr(batch_app, task)
    ids = pgq.enqueue_many([handler.s(n=n) for n in range(3)])
    wait_for(lambda: len(ledger(db, ids, "start")) == 3, message="the batch started")
    pgq.cancel(ids[1])
    done = wait_finished(db, ids)
    assert {job: done[job][0] for job in ids} == {
        ids[0]: "succeeded",
        ids[1]: "cancelled",
        ids[2]: "succeeded",
    }
    assert sorted(row[0] for row in ledger(db, ids, "done")) == [ids[0], ids[2]]


def test_concurrency_limits_count_each_job_of_a_batch(db, pgq):
    from tests.integration.batch_app import points

    pgq.flow.configure_task("batch.points", concurrency_limit=3)
    try:
        ids = pgq.enqueue_many([points.s(x=n) for n in range(7)])
        wait_finished(db, ids)
    finally:
        pgq.flow.configure_task("batch.points", concurrency_limit=None)
    assert max(batch_sizes(ledger(db, ids))) <= 3


def test_shutdown_hands_back_a_gathered_batch_and_drains_a_running_one(db, workers, tmp_path):
    pgq = PgQueue(db)
    try:
        from tests.integration.batch_app import drains, handback

        worker = spawn_worker(db, "--queue", "handback", app=APP, log=tmp_path / "w.log")
        running = pgq.enqueue_many([drains.s(n=n) for n in range(2)])
        gathered = pgq.enqueue_many([handback.s(n=n) for n in range(3)])
        wait_for(lambda: len(ledger(db, running, "start")) == 2, message="a batch running")
        wait_for(
            lambda: (
                scalar(
                    db,
                    "SELECT count(*) FROM pgqueue.jobs WHERE id = ANY(%s) AND state = 'running'",
                    [gathered],
                )
                == 3
            ),
            message="a batch gathering",
        )
        # A job cancelled while its batch gathers is taken out of it, and written cancelled.
        pgq.cancel(gathered[0])
        wait_for(lambda: finished(db, gathered[:1]), message="the gathered job cancelled")
        worker.send_signal(signal.SIGTERM)
        assert worker.wait(30) == 0
        assert sorted(row[0] for row in ledger(db, running, "end")) == sorted(running)
        assert finished(db, gathered[:1])[gathered[0]][0] == "cancelled"
        with psycopg.connect(db) as conn:
            rows = conn.execute(
                "SELECT state, attempts FROM pgqueue.jobs WHERE id = ANY(%s)", [gathered[1:]]
            ).fetchall()
        assert rows == [("ready", 0)] * 2  # handed back: the attempt not burned
        assert ledger(db, gathered, "ran") == []
    finally:
        pgq.close()
