"""An idle worker starts a claimed job as soon as the claim's rows arrive, before the claim's
COMMIT returns; nothing is written about the attempt until that COMMIT succeeded, and a claim
that never commits leaves nothing written under its lease token."""

from __future__ import annotations

import logging
import time

import psycopg
import pytest

from tests.helpers import ledger, scalar, thread_worker, wait_for
from tests.integration import durable_app, progress_app, worker_app

APP = worker_app.pgq

# A deferred constraint trigger runs inside the COMMIT of the transaction that claimed a job
# (OLD.state is not 'running', NEW.state is): it can make that COMMIT slow, or fail.
CLAIM_COMMIT_TRIGGER = """
CREATE SEQUENCE claim_commits;
CREATE FUNCTION at_claim_commit() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
    IF OLD.state <> 'running' AND NEW.state = 'running' THEN
        IF nextval('claim_commits') = 1 THEN  -- a sequence: the count survives a rollback
            PERFORM pg_sleep(%(sleep)s);
            IF %(fail)s THEN
                RAISE EXCEPTION 'the first claim does not commit';
            END IF;
        END IF;
    END IF;
    RETURN NULL;
END $$;
CREATE CONSTRAINT TRIGGER at_claim_commit AFTER UPDATE ON pgqueue.jobs
    DEFERRABLE INITIALLY DEFERRED FOR EACH ROW EXECUTE FUNCTION at_claim_commit();
"""


def install_trigger(dsn: str, *, sleep: float, fail: bool) -> None:
    with psycopg.connect(dsn, autocommit=True) as conn:
        # Literal values: the body is a dollar-quoted string, not a place for parameters.
        body = CLAIM_COMMIT_TRIGGER.replace("%(sleep)s", repr(float(sleep)))
        conn.execute(body.replace("%(fail)s", "true" if fail else "false"))


def idle(dsn: str) -> bool:
    return bool(scalar(dsn, "SELECT count(*) FROM pgqueue.idle_workers"))


def test_an_idle_worker_starts_a_job_while_its_claim_commits(app_dsn, pgq):
    install_trigger(app_dsn, sleep=2.0, fail=False)
    with thread_worker(APP, app_dsn, poll_interval=600):
        wait_for(lambda: idle(app_dsn), message="the worker to go idle")
        job = pgq.enqueue("sync_noop", {})
        wait_for(lambda: ledger(app_dsn, "end"), timeout=5, message="the handler to run")
        # The handler has run, and the claim is still committing: the row is not running
        # yet for anyone else, and the outcome is held back (its ack would wait anyway).
        state = scalar(app_dsn, "SELECT state FROM pgqueue.jobs WHERE id = %s", (job,))
        assert state == "ready"
        wait_for(
            lambda: scalar(app_dsn, "SELECT count(*) FROM pgqueue.jobs") == 0,
            timeout=10,
            message="the ack once the claim committed",
        )
    assert [row[0] for row in ledger(app_dsn, "end")] == [job]


@pytest.mark.parametrize("task", ["sync_noop", "instant"])
def test_a_claim_that_does_not_commit_writes_nothing_and_the_job_runs_again(
    app_dsn, pgq, caplog, task
):
    caplog.set_level(logging.WARNING, logger="pgqueue.worker")
    install_trigger(app_dsn, sleep=0.3, fail=True)
    with thread_worker(APP, app_dsn, poll_interval=600):
        wait_for(lambda: idle(app_dsn), message="the worker to go idle")
        job = pgq.enqueue(task, {})
        wait_for(
            lambda: scalar(app_dsn, "SELECT count(*) FROM pgqueue.jobs") == 0,
            timeout=15,
            message="the job to run again and be acked",
        )
        time.sleep(0.3)  # anything left to write about the first attempt
    messages = [r.getMessage() for r in caplog.records]
    assert any("claim did not commit; its jobs were stopped" in m for m in messages)
    # The first attempt's handler finished (a no-op is done before the COMMIT fails); what it
    # returned was dropped, not written under a token the next claim hands out again.
    assert any(m.startswith("claim did not commit; outcome not written") for m in messages)
    if task == "sync_noop":
        assert [row[0] for row in ledger(app_dsn, "end")] == [job, job]
    assert scalar(app_dsn, "SELECT count(*) FROM pgqueue.dead_letters") == 0
    assert scalar(app_dsn, "SELECT nextval('claim_commits')") >= 3  # claimed twice


@pytest.mark.parametrize(
    ("task", "kwargs"),
    [
        ("order", {"amount": 5}),
        ("order_async", {"amount": 5}),
        ("transfer", {"fail_inside": False}),
        ("transfer_async", {"fail_inside": False}),
    ],
)
def test_a_step_of_a_job_started_while_its_claim_commits_is_checkpointed_once(
    app_dsn, pgq, task, kwargs
):
    """A step's checkpoint, fenced by the lease token, waits for the claim that gave the job
    (it would otherwise see the row as it was before the claim, and take the job for lost)."""
    with psycopg.connect(app_dsn, autocommit=True) as conn:
        conn.execute(durable_app.EFFECTS_DDL)
    install_trigger(app_dsn, sleep=1.0, fail=False)
    with thread_worker(durable_app.pgq, app_dsn, queues=["durable"], poll_interval=600):
        wait_for(lambda: idle(app_dsn), message="the worker to go idle")
        job = pgq.enqueue(getattr(durable_app, task), kwargs)
        state = wait_for(
            lambda: scalar(app_dsn, "SELECT state FROM pgqueue.job_history WHERE id = %s", (job,)),
            timeout=20,
            message="the job to finish",
        )
    assert state == "succeeded"
    # Both tasks fail their first attempt after the step(s): the second replays them.
    assert scalar(app_dsn, "SELECT attempts FROM pgqueue.job_history WHERE id = %s", (job,)) == (
        3 if task.startswith("transfer") else 2
    )
    if task.startswith("order"):
        charged = [row for row in ledger(app_dsn, "charge") if row[0] == job]
        assert [row[1] for row in charged] == [1]
    else:
        effects = scalar(
            app_dsn,
            "SELECT array_agg(attempt ORDER BY id) FROM durable_effects WHERE job_id = %s",
            (job,),
        )
        assert effects == [1]


def test_progress_reported_while_the_claim_commits_is_written_once_it_committed(app_dsn, pgq):
    """The handler reports progress at once, while its claim's COMMIT is still on its way (2 s
    here); heartbeats meanwhile (one a second: a 3 s lease) do not send the job, since nothing
    is written under a claim not committed yet. They must keep its progress for the first beat
    after the COMMIT, not drop it: the handler reports nothing more."""
    install_trigger(app_dsn, sleep=2.0, fail=False)
    with thread_worker(progress_app.pgq, app_dsn, poll_interval=600, lease=3.0):
        wait_for(lambda: idle(app_dsn), message="the worker to go idle")
        job = pgq.enqueue("progress.async_steps", {"steps": [{"done": 1, "of": 2}], "hold": 60.0})
        wait_for(
            lambda: (
                scalar(app_dsn, "SELECT state FROM pgqueue.jobs WHERE id = %s", (job,)) == "running"
            ),
            timeout=10,
            message="the claim to commit",
        )
        wait_for(
            lambda: pgq.progress(job) == {"done": 1, "of": 2},
            timeout=10,
            message="the progress reported before the claim committed",
        )
        pgq.cancel(job)
