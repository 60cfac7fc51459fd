"""A write that fails for one job (a constraint, a hand-edited row, an id already taken) must
not stall the jobs written with it: the completer and the reaper isolate it. That job goes to
the dead letters with the reason (under a fresh id when its own is taken: the row holding the
id is never touched); when even that is impossible it is logged and handed to the reaper,
which parks it out of the way. Nothing stays running with a live lease."""

from __future__ import annotations

import asyncio
import logging
from uuid import uuid4

import psycopg
import pytest

from pgqueue.handler.job_context import ClaimedJob
from pgqueue.worker.completer import Completer
from pgqueue.worker.observer import WorkerStats
from pgqueue.worker.outcome import Outcome
from pgqueue.worker.store import WorkerDB
from tests.helpers import scalar, thread_worker, wait_for
from tests.hostile import hostile_app
from tests.hostile.test_malformed_rows import insert_raw

pytestmark = pytest.mark.slow


def hand_made_dead_letter(conn: psycopg.Connection, job_id: int) -> None:
    """A dead letter that already holds ``job_id`` (an operator's copy, a restored backup)."""
    conn.execute(
        "INSERT INTO pgqueue.dead_letters (id, queue, task, args, priority, attempts,"
        " max_attempts, lease_token, created_at, reason)"
        " VALUES (%s, 'default', 'older.task', '{\"older\": true}', 0, 1, 1, 0, now(),"
        " 'an older dead letter')",
        (job_id,),
    )


def expired(conn: psycopg.Connection, task: str, attempts: int, max_attempts: int) -> int:
    """A running job whose worker vanished: its lease ran out a minute ago."""
    return insert_raw(
        conn,
        task,
        "{}",
        state="running",
        attempts=attempts,
        max_attempts=max_attempts,
        lease_token=7,
        lease_expires_at="-infinity",
        worker_id=uuid4(),
    )


def test_one_unwritable_outcome_does_not_stall_the_others(app_dsn, conn, caplog):
    caplog.set_level(logging.INFO, logger="pgqueue")
    # One slot, and the bad jobs first (priority -1): before the fix every outcome written
    # after the first bad one queued behind its failing write, leases extended forever.
    clash = insert_raw(conn, "fails", "{}", priority=-1, max_attempts=1)
    hand_made_dead_letter(conn, clash)
    kept = insert_raw(conn, "keeps_result", "{}", priority=-1, result_ttl="1 hour")
    conn.execute(
        "INSERT INTO pgqueue.job_history (id, queue, task, args, state, priority, attempts,"
        " max_attempts, created_at) VALUES (%s, 'default', 'older.task', '{}', 'succeeded',"
        " 0, 1, 1, now())",
        (kept,),
    )
    far = insert_raw(conn, "retry_far", "{}", priority=-1, max_attempts=1)
    ordinary = [insert_raw(conn, "fails", "{}", max_attempts=1) for _ in range(3)]

    with thread_worker(hostile_app.pgq, app_dsn, concurrency=1, lease=5.0) as worker:
        wait_for(
            lambda: (
                scalar(app_dsn, "SELECT count(*) FROM pgqueue.jobs WHERE state = 'running'") == 0
                and scalar(app_dsn, "SELECT count(*) FROM pgqueue.jobs WHERE task = 'fails'") == 0
            ),
            timeout=60,
            message="every job written",
        )
        assert worker.thread.is_alive()

    dead = {
        row[0]: row[1:]
        for row in conn.execute(
            "SELECT id, task, reason, args FROM pgqueue.dead_letters ORDER BY id"
        ).fetchall()
    }
    for job_id in ordinary:
        assert dead[job_id][:2] == ("fails", "max attempts reached")
    # The row that held the id is untouched ...
    assert dead[clash] == ("older.task", "an older dead letter", {"older": True})
    # ... and the job that collided with it is recorded under a fresh id, saying so.
    [(renamed, task, reason)] = [
        (job_id, row[0], row[1]) for job_id, row in dead.items() if job_id > max(ordinary)
    ]
    assert task == "fails" and reason.startswith("max attempts reached")
    assert f"id {clash} is taken by another dead letter" in reason
    assert f"recorded as id {renamed}" in reason
    # A success whose history row cannot be written (its id is taken there): a dead letter,
    # with the database's words for why.
    assert dead[kept][0] == "keeps_result"
    assert "could not be written" in dead[kept][1] and "job_history_pkey" in dead[kept][1]
    # A delay the database cannot add to now() is capped, not a failed batch.
    state, years = conn.execute(
        "SELECT state, extract(year FROM run_at) - extract(year FROM now())"
        " FROM pgqueue.jobs WHERE id = %s",
        (far,),
    ).fetchone()
    assert state == "scheduled" and years > 100
    assert "service crashed" not in caplog.text
    assert scalar(app_dsn, "SELECT count(*) FROM pgqueue.jobs") == 1  # only the far one


def test_a_job_nothing_can_record_is_parked_and_the_others_finish(app_dsn, conn, caplog):
    caplog.set_level(logging.INFO, logger="pgqueue")
    # An operator's constraint forbids this task's dead letters: the job can be written
    # nowhere, neither by fail_jobs nor by the completer's fallback nor by the reaper.
    conn.execute(
        "ALTER TABLE pgqueue.dead_letters ADD CONSTRAINT no_refused CHECK (task <> 'refused')"
    )
    stuck = insert_raw(conn, "refused", "{}", priority=-1, max_attempts=1)
    ordinary = [insert_raw(conn, "fails", "{}", max_attempts=1) for _ in range(3)]
    with thread_worker(hostile_app.pgq, app_dsn, concurrency=1, lease=5.0):
        wait_for(
            lambda: (
                scalar(app_dsn, "SELECT state FROM pgqueue.jobs WHERE id = %s", (stuck,))
                == "scheduled"
                and scalar(app_dsn, "SELECT count(*) FROM pgqueue.dead_letters") == 3
            ),
            timeout=60,
            message="the stuck job parked, the others dead-lettered",
        )
    assert {row[0] for row in conn.execute("SELECT id FROM pgqueue.dead_letters")} == set(ordinary)
    run_at, errors = conn.execute(
        "SELECT run_at - now(), errors FROM pgqueue.jobs WHERE id = %s", (stuck,)
    ).fetchone()
    assert run_at.total_seconds() > 30 * 60  # out of the way, tried again in an hour
    assert "no_refused" in errors[-1]["message"]
    # The completer said which job it could not write, and why.
    [line] = [r for r in caplog.records if "could not be written" in r.getMessage()]
    assert line.levelno == logging.ERROR
    assert line.job_id == stuck and "no_refused" in line.error
    assert "service crashed" not in caplog.text


def test_the_reaper_recovers_every_expired_job_when_one_cannot_be_written(conn):
    clash = expired(conn, "fails", attempts=1, max_attempts=1)
    hand_made_dead_letter(conn, clash)
    dies = expired(conn, "fails", attempts=1, max_attempts=1)
    again = expired(conn, "fails", attempts=1, max_attempts=3)
    conn.execute(
        "ALTER TABLE pgqueue.dead_letters ADD CONSTRAINT no_refused CHECK (task <> 'refused')"
    )
    refused = expired(conn, "refused", attempts=1, max_attempts=1)

    assert conn.execute("SELECT pgqueue.reap()").fetchone()[0] == 4

    states = dict(conn.execute("SELECT id, state FROM pgqueue.jobs").fetchall())
    assert states == {again: "scheduled", refused: "scheduled"}
    reasons = dict(conn.execute("SELECT id, reason FROM pgqueue.dead_letters").fetchall())
    assert reasons[dies] == "lease expired with no attempts left"
    assert reasons[clash] == "an older dead letter"
    [renamed] = [job_id for job_id in reasons if job_id not in (clash, dies)]
    assert f"id {clash} is taken" in reasons[renamed]
    # The job nothing can record is parked for an hour with the reason in its errors, so it
    # neither blocks the reaper's batches nor looks held by a live worker.
    run_at, errors = conn.execute(
        "SELECT run_at - now(), errors FROM pgqueue.jobs WHERE id = %s", (refused,)
    ).fetchone()
    assert run_at.total_seconds() > 30 * 60 and "no_refused" in errors[-1]["message"]
    # A second pass has nothing left to do.
    assert conn.execute("SELECT pgqueue.reap()").fetchone()[0] == 0


def test_one_pass_writes_every_outcome_of_a_batch_around_the_unwritable_ones(dsn, conn, caplog):
    # The same in one batch of eight, deterministically: the completer itself, on a real
    # database, with jobs claimed by hand.
    caplog.set_level(logging.INFO, logger="pgqueue")
    worker_id = str(uuid4())

    def running(task: str, **columns: object) -> ClaimedJob:
        job_id = insert_raw(
            conn,
            task,
            "{}",
            state="running",
            attempts=1,
            max_attempts=1,
            lease_token=7,
            lease_expires_at="infinity",
            worker_id=worker_id,
            **columns,
        )
        row = conn.execute(
            "SELECT id, queue, task, args, attempts, max_attempts, lease_token, priority,"
            " created_at, run_at, result_ttl IS NOT NULL FROM pgqueue.jobs WHERE id = %s",
            (job_id,),
        ).fetchone()
        return ClaimedJob.from_row(row)

    failed = [running("fails") for _ in range(4)]
    acked = [running("keeps_result", result_ttl="1 hour") for _ in range(4)]
    hand_made_dead_letter(conn, failed[1].id)
    conn.execute(
        "INSERT INTO pgqueue.job_history (id, queue, task, args, state, priority, attempts,"
        " max_attempts, created_at) VALUES (%s, 'default', 'older.task', '{}', 'succeeded',"
        " 0, 1, 1, now())",
        (acked[2].id,),
    )
    stats = WorkerStats()

    async def write() -> Completer:
        db = WorkerDB(dsn, size=2)
        await db.open()
        try:
            completer = Completer(db)
            completer.observer = stats
            for job in failed:
                completer.submit(
                    Outcome.from_exception(job, "error", RuntimeError("boom"), worker_id)
                )
            for job in acked:
                completer.submit(Outcome(job, "ack", result='{"n": 1}'))
            await completer.run_once()
            return completer
        finally:
            await db.close()

    completer = asyncio.run(write())
    assert completer.idle() and not completer.held()
    assert (stats.succeeded, stats.dead, stats.stale) == (3, 5, 0)
    assert scalar(dsn, "SELECT count(*) FROM pgqueue.jobs") == 0
    reasons = dict(conn.execute("SELECT id, reason FROM pgqueue.dead_letters").fetchall())
    for job in (failed[0], failed[2], failed[3]):
        assert reasons[job.id] == "max attempts reached"
    assert reasons[failed[1].id] == "an older dead letter"
    assert reasons[acked[2].id].startswith("succeeded, but that outcome could not be written")
    [renamed] = set(reasons) - {j.id for j in failed} - {acked[2].id}
    assert f"id {failed[1].id} is taken" in reasons[renamed]
    kept = dict(conn.execute("SELECT id, result FROM pgqueue.job_history").fetchall())
    assert {job.id: kept.get(job.id) for job in acked if job is not acked[2]} == {
        job.id: {"n": 1} for job in acked if job is not acked[2]
    }
    # Each statement's batch failed once and was split; nothing crashed.
    splits = [r for r in caplog.records if r.getMessage().startswith("batch write failed")]
    assert len(splits) == 2 and "service crashed" not in caplog.text


def test_an_error_that_is_not_about_a_row_keeps_its_outcomes_until_fixed(dsn, conn):
    # A privilege missing after an upgrade fails every job of its kind alike: dead-lettering
    # them would be wrong, and splitting the batch cannot help. Those outcomes are kept (their
    # leases held) and written once it is fixed; the batch's other statement is written at once.
    conn.execute(
        "CREATE FUNCTION public.no_history() RETURNS trigger LANGUAGE plpgsql AS $$ BEGIN"
        " RAISE EXCEPTION 'permission denied (test)' USING ERRCODE = 'insufficient_privilege';"
        " END $$"
    )
    conn.execute(
        "CREATE TRIGGER no_history BEFORE INSERT ON pgqueue.job_history"
        " FOR EACH ROW EXECUTE FUNCTION public.no_history()"
    )
    running = (
        "INSERT INTO pgqueue.jobs (queue, task, args, state, attempts, max_attempts,"
        " lease_token, lease_expires_at, worker_id, result_ttl)"
        " VALUES ('default', %s, '{}', 'running', 1, 1, 7, 'infinity', gen_random_uuid(), %s)"
        " RETURNING id, queue, task, args, attempts, max_attempts, lease_token, priority,"
        " created_at, run_at, result_ttl IS NOT NULL"
    )
    acked = [
        ClaimedJob.from_row(conn.execute(running, ("keeps_result", ttl)).fetchone())
        for ttl in ("1 hour", "1 hour", None)
    ]
    failing = ClaimedJob.from_row(conn.execute(running, ("fails", None)).fetchone())

    async def write() -> tuple[BaseException | None, list[tuple[int, int]], bool]:
        db = WorkerDB(dsn, size=2)
        await db.open()
        try:
            completer = Completer(db)
            for job in acked:
                completer.submit(Outcome(job, "ack", result="1" if job.wants_result else None))
            completer.submit(Outcome.from_exception(failing, "error", RuntimeError("x"), "w"))
            error: BaseException | None = None
            try:
                await completer.run_once()
            except psycopg.Error as exc:
                error = exc
            held = sorted(completer.held())
            conn.execute("DROP TRIGGER no_history ON pgqueue.job_history")  # fixed
            await completer.run_once()
            return error, held, completer.idle()
        finally:
            await db.close()

    error, held, idle = asyncio.run(write())
    assert isinstance(error, psycopg.errors.InsufficientPrivilege)
    assert held == sorted((job.id, job.lease_token) for job in acked)
    assert idle and scalar(dsn, "SELECT count(*) FROM pgqueue.jobs") == 0
    history = {row[0] for row in conn.execute("SELECT id FROM pgqueue.job_history")}
    assert history == {job.id for job in acked if job.wants_result}
    dead = [row[0] for row in conn.execute("SELECT id FROM pgqueue.dead_letters")]
    assert dead == [failing.id]
