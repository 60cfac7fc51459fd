"""Events (``pgq.emit_event``, SQL ``pgqueue.emit_event``, ``pgq events emit``) and the
statements that will park a sleeping or waiting job and wake it, run directly against
PostgreSQL (the worker does not park jobs yet: these are the statements it will run)."""

from __future__ import annotations

import asyncio
import json
from datetime import UTC, datetime, timedelta
from typing import Any

import psycopg
import pytest
from typer.testing import CliRunner

from pgqueue import InvalidJobError, PgQueue
from pgqueue.cli.app import app
from pgqueue.db import durable
from pgqueue.db import plan as plans
from tests.helpers import scalar

#: The worker that running_job's claims name.
WORKER = "3f2a6c1e-0d4b-4a8e-9c57-2b1f0e6d8a90"


def running_job(pgq: PgQueue, dsn: str) -> tuple[int, int]:
    """A job as a worker's (WORKER's) claim leaves it: running, under a lease; its id and
    token."""
    job = pgq.enqueue("some.task", {}, queue="durable")
    with psycopg.connect(dsn) as conn:
        row = conn.execute(
            "UPDATE pgqueue.jobs SET state = 'running', attempts = attempts + 1,"
            " lease_token = lease_token + 1, lease_expires_at = now() + interval '1 minute',"
            " started_at = now(), worker_id = %s WHERE id = %s RETURNING lease_token",
            (WORKER, job),
        ).fetchone()
    assert row is not None
    return int(job), int(row[0])


def job_row(dsn: str, job: int) -> dict[str, Any]:
    with psycopg.connect(dsn) as conn:
        cur = conn.execute(
            "SELECT state, attempts, lease_expires_at, run_at, now() AS now"
            " FROM pgqueue.jobs WHERE id = %s",
            (job,),
        )
        names = [c.name for c in cur.description or ()]
        row = cur.fetchone()
    assert row is not None
    return dict(zip(names, row, strict=True))


def step_row(dsn: str, job: int, seq: int = 1) -> dict[str, Any] | None:
    with psycopg.connect(dsn) as conn:
        cur = conn.execute(
            "SELECT name, kind, state, result, wake_at, event FROM pgqueue.job_steps"
            " WHERE job_id = %s AND seq = %s",
            (job, seq),
        )
        names = [c.name for c in cur.description or ()]
        row = cur.fetchone()
    return None if row is None else dict(zip(names, row, strict=True))


def run(dsn: str, plan: plans.Plan[Any]) -> Any:
    with psycopg.connect(dsn, autocommit=True) as conn:
        return plans.run(plan, conn)


# -- emit ----------------------------------------------------------------------------------


def test_the_first_emit_of_a_name_wins(pgq, dsn):
    assert pgq.emit_event("order-1-packed", {"parcels": 2}) is True
    assert pgq.emit_event("order-1-packed", {"parcels": 3}) is False
    with psycopg.connect(dsn) as conn:
        assert conn.execute("SELECT pgqueue.emit_event('order-1-packed', '4')").fetchone() == (
            False,
        )
        row = conn.execute(
            "SELECT payload, keep_until - emitted_at FROM pgqueue.events"
            " WHERE name = 'order-1-packed'"
        ).fetchone()
    # The history retention (7 days by default), at least a day.
    assert row == ({"parcels": 2}, timedelta(days=7))
    assert scalar(dsn, "SELECT count(*) FROM pgqueue.event_status WHERE emitted") == 1


def test_an_emit_in_a_rolled_back_transaction_wakes_nobody(pgq, dsn):
    job, token = running_job(pgq, dsn)
    park = durable.park_for_event(job, token, seq=1, name="wait:paid#1", event="paid", timeout=None)
    assert run(dsn, park).state == "parked"
    with psycopg.connect(dsn) as conn, conn.transaction(force_rollback=True):
        assert pgq.emit_event("paid", {"amount": 5}, conn=conn) is True
        assert step_row(dsn, job)["state"] == "waiting"  # not before the commit
    assert scalar(dsn, "SELECT count(*) FROM pgqueue.events") == 0
    assert step_row(dsn, job)["state"] == "waiting"
    assert job_row(dsn, job)["run_at"] > datetime.now(UTC) + timedelta(days=365)
    # The emit that commits wakes it, in its own transaction.
    with psycopg.connect(dsn) as conn:
        assert pgq.emit_event("paid", {"amount": 6}, conn=conn) is True
    assert step_row(dsn, job)["state"] == "succeeded"
    assert step_row(dsn, job)["result"] == {"amount": 6}
    woken = job_row(dsn, job)
    assert woken["state"] == "scheduled" and woken["run_at"] <= woken["now"]


@pytest.mark.parametrize(
    ("name", "payload", "keep", "message"),
    [
        ("", None, None, "an event's name must not be empty"),
        ("x" * 201, None, None, "over the limit of 200"),
        ("ok", float("nan"), None, "NaN"),
        ("ok", None, 0, "keep must be positive"),
    ],
)
def test_bad_emits_are_refused_before_writing(pgq, dsn, name, payload, keep, message):
    with pytest.raises(InvalidJobError, match=message):
        pgq.emit_event(name, payload, keep=keep)
    assert scalar(dsn, "SELECT count(*) FROM pgqueue.events") == 0


def test_emit_event_async(dsn):
    async def main() -> None:
        async with PgQueue(dsn) as pgq:
            assert await pgq.emit_event_async("async-one", [1, 2]) is True
            assert await pgq.emit_event_async("async-one", [3]) is False

    asyncio.run(main())
    assert scalar(dsn, "SELECT payload FROM pgqueue.events WHERE name = 'async-one'") == [1, 2]


def test_pgq_events_emit(dsn):
    runner = CliRunner()
    first = runner.invoke(app, ["events", "emit", "shipped", "--payload", '{"a": 1}', "--dsn", dsn])
    assert first.exit_code == 0, first.output
    assert first.output.strip() == "emitted shipped"
    again = runner.invoke(app, ["events", "emit", "shipped", "--dsn", dsn, "--json"])
    assert json.loads(again.output) == {"name": "shipped", "emitted": False}
    bad = runner.invoke(app, ["events", "emit", "x", "--payload", "{nope", "--dsn", dsn])
    assert bad.exit_code == 1
    assert "--payload is not valid JSON" in bad.output
    assert scalar(dsn, "SELECT payload FROM pgqueue.events WHERE name = 'shipped'") == {"a": 1}


# -- parking (phase 2's statements) --------------------------------------------------------


def test_park_sleep_parks_the_job_fenced_and_without_counting_the_attempt(pgq, dsn):
    job, token = running_job(pgq, dsn)
    assert run(dsn, durable.park_sleep(job, token + 1, seq=1, name="sleep#1", delay=60)) is None
    assert job_row(dsn, job)["state"] == "running"  # a stale token writes nothing
    wake = run(dsn, durable.park_sleep(job, token, seq=1, name="sleep#1", delay=3600))
    parked = job_row(dsn, job)
    assert parked["state"] == "scheduled" and parked["attempts"] == 0
    assert parked["lease_expires_at"] is None and parked["run_at"] == wake
    assert timedelta(minutes=59) < wake - parked["now"] <= timedelta(hours=1)
    assert step_row(dsn, job) == {
        "name": "sleep#1", "kind": "sleep", "state": "waiting", "result": None,
        "wake_at": wake, "event": None,
    }  # fmt: skip
    # Parked, it holds no lease: the same token cannot park (or checkpoint) it again.
    assert run(dsn, durable.park_sleep(job, token, seq=2, name="sleep#2", delay=1)) is None
    written = durable.write_step(job, token, WORKER, seq=2, name="x", state="succeeded",
                                 attempts=1, elapsed=0.0, result="1")  # fmt: skip
    assert run(dsn, written) is False


def test_a_checkpoint_is_written_only_under_its_token_and_worker(pgq, dsn):
    job, token = running_job(pgq, dsn)

    def write(token: int, worker: str) -> bool:
        plan = durable.write_step(job, token, worker, seq=1, name="x", state="succeeded",
                                  attempts=1, elapsed=0.0, result="1")  # fmt: skip
        return bool(run(dsn, plan))

    # Another worker's claim under the same token (the server lost the first one's claim in a
    # crash and handed the token out again), an old token: nothing written.
    assert write(token, "00000000-0000-4000-8000-000000000000") is False
    assert write(token - 1, WORKER) is False
    assert write(token, WORKER) is True
    assert step_row(dsn, job)["state"] == "succeeded"


def test_park_sleep_until_a_time(pgq, dsn):
    job, token = running_job(pgq, dsn)
    until = datetime(2030, 1, 1, tzinfo=UTC)
    assert run(dsn, durable.park_sleep(job, token, seq=1, name="nap", until=until)) == until


def test_a_wait_for_an_event_emitted_before_settles_at_once(pgq, dsn):
    pgq.emit_event("early", {"v": 1})
    job, token = running_job(pgq, dsn)
    waited = run(dsn, durable.park_for_event(job, token, seq=1, name="wait:early#1",
                                             event="early", timeout=30))  # fmt: skip
    assert waited == ("succeeded", {"v": 1})
    row = job_row(dsn, job)
    # The job leaves its worker and is due now: its next run reads the payload from the step.
    assert row["state"] == "scheduled" and row["run_at"] <= row["now"] and row["attempts"] == 0
    assert step_row(dsn, job)["state"] == "succeeded"


def test_a_wait_past_its_timeout_times_out(pgq, dsn):
    job, token = running_job(pgq, dsn)
    waited = run(dsn, durable.park_for_event(job, token, seq=1, name="w", event="never",
                                             timeout=0))  # fmt: skip
    assert waited == ("timed_out", None)
    assert step_row(dsn, job)["state"] == "timed_out"


def test_a_wait_parks_until_its_timeout_and_a_stale_token_parks_nothing(pgq, dsn):
    job, token = running_job(pgq, dsn)
    lost = durable.park_for_event(job, token - 1, seq=1, name="w", event="e", timeout=60)
    assert run(dsn, lost) == ("lost", None)
    assert step_row(dsn, job) is None
    assert run(dsn, durable.park_for_event(job, token, seq=1, name="w", event="e",
                                           timeout=60)) == ("parked", None)  # fmt: skip
    row, step = job_row(dsn, job), step_row(dsn, job)
    assert step is not None and step["state"] == "waiting" and step["event"] == "e"
    assert row["run_at"] == step["wake_at"]
    assert timedelta(seconds=59) < row["run_at"] - row["now"] <= timedelta(seconds=60)
    assert scalar(dsn, "SELECT waiting FROM pgqueue.event_status WHERE name = 'e'") == 1


def test_many_jobs_wait_on_one_name(pgq, dsn):
    jobs = [running_job(pgq, dsn) for _ in range(3)]
    for job, token in jobs:
        run(dsn, durable.park_for_event(job, token, seq=1, name="w", event="go", timeout=None))
    assert pgq.emit_event("go", "now") is True
    for job, _ in jobs:
        assert step_row(dsn, job)["result"] == "now"
        row = job_row(dsn, job)
        assert row["run_at"] <= row["now"]


def test_a_wait_during_an_uncommitted_emit_parks_for_a_second_and_misses_nothing(pgq, dsn):
    job, token = running_job(pgq, dsn)
    with psycopg.connect(dsn) as emitter:
        pgq.emit_event("racing", 1, conn=emitter)  # holds the name's lock until it commits
        waited = run(dsn, durable.park_for_event(job, token, seq=1, name="w", event="racing",
                                                 timeout=None))  # fmt: skip
        assert waited.state == "parked"  # did not wait for the emitter's transaction
        row = job_row(dsn, job)
        assert row["run_at"] - row["now"] <= timedelta(seconds=1)
    # The emitter committed after the park's snapshot: the job looks again within a second.
    assert scalar(dsn, "SELECT count(*) FROM pgqueue.events WHERE name = 'racing'") == 1
