"""The client's operations against PostgreSQL, each test run twice: through the sync method and
through its ``_async`` twin (one event loop for the whole test), so both forms are held to the
same assertions. Which operations must have both forms, with the same parameters, is checked
in tests/unit/test_client_surface.py; their ``conn=`` in the caller's transaction in
test_caller_transactions.py."""

from __future__ import annotations

import asyncio
from collections.abc import Callable, Iterator
from datetime import timedelta
from typing import Any

import pytest

from pgqueue import CircuitBreaker, InvalidJobError, PgQueue, RateLimit, chain

Call = Callable[..., Any]


@pytest.fixture(params=["sync", "async"])
def call(request: pytest.FixtureRequest, pgq: PgQueue) -> Iterator[Call]:
    """``call(pgq.flow.pause_queue, "q")`` runs the method, or its ``_async`` twin."""
    if request.param == "sync":
        yield lambda method, *args, **kwargs: method(*args, **kwargs)
        return
    with asyncio.Runner() as runner:

        def run_twin(method: Any, *args: Any, **kwargs: Any) -> Any:
            twin = getattr(method.__self__, f"{method.__name__}_async")
            return runner.run(twin(*args, **kwargs))

        yield run_twin
        runner.run(pgq.aclose())


def by_name(rows: list[dict[str, Any]], key: str, name: str) -> dict[str, Any]:
    return next(row for row in rows if row[key] == name)


def test_queue_settings_and_pausing(pgq: PgQueue, call: Call) -> None:
    row = call(pgq.flow.configure_queue, "emails", weight=3, max_depth=10, rate_limit="5/s")
    assert (row["weight"], row["max_depth"], row["rate_limit"]) == (3, 10, 5.0)
    row = call(pgq.flow.configure_queue, "emails", max_depth=None)  # the rest stays
    assert (row["weight"], row["max_depth"], row["rate_limit"]) == (3, None, 5.0)
    call(pgq.flow.pause_queue, "emails")
    assert by_name(call(pgq.flow.queue_settings), "queue", "emails")["paused"] is True
    call(pgq.flow.resume_queue, "emails")
    assert by_name(call(pgq.flow.queue_settings), "queue", "emails")["paused"] is False


def test_task_limits(pgq: PgQueue, call: Call) -> None:
    row = call(
        pgq.flow.configure_task, "reports.build", concurrency_limit=2, rate_limit=RateLimit(4)
    )
    assert (row["concurrency_limit"], row["key_limit"], row["rate_limit"]) == (2, 1, 4.0)
    limits = by_name(call(pgq.flow.task_limits), "task", "reports.build")
    assert (limits["concurrency_limit"], limits["from_code"]) == (2, False)


def test_circuit_breakers(pgq: PgQueue, call: Call) -> None:
    @pgq.task(name="parts.fragile", circuit_breaker=CircuitBreaker(cooldown=30))
    def fragile() -> None: ...

    call(pgq.sync_declarations)
    assert by_name(call(pgq.flow.circuit_breakers), "task", "parts.fragile")["state"] == "closed"
    assert call(pgq.flow.trip_breaker, "parts.fragile", 60) is True
    assert by_name(call(pgq.flow.circuit_breakers), "task", "parts.fragile")["state"] == "open"
    assert call(pgq.flow.reset_breaker, "parts.fragile") is True
    assert by_name(call(pgq.flow.circuit_breakers), "task", "parts.fragile")["state"] == "closed"
    assert call(pgq.flow.trip_breaker, "parts.nobody") is False


def test_cron_schedules(pgq: PgQueue, call: Call) -> None:
    @pgq.task(name="parts.report", queue="reports", priority=3)
    def report(month: str) -> None: ...

    call(pgq.cron.schedule, "nightly", "0 3 * * *", report, {"month": "may"}, tz="Europe/Paris")
    row = by_name(call(pgq.cron.schedules), "name", "nightly")
    assert (row["task"], row["queue"], row["timezone"], row["paused"]) == (
        "parts.report",
        "reports",  # the task's
        "Europe/Paris",
        False,
    )
    assert call(pgq.cron.pause, "nightly") is True
    assert by_name(call(pgq.cron.schedules), "name", "nightly")["paused"] is True
    assert call(pgq.cron.resume, "nightly") is True
    assert call(pgq.cron.delete, "nightly") is True
    assert call(pgq.cron.delete, "nightly") is False
    assert call(pgq.cron.pause, "nightly") is False
    assert call(pgq.cron.schedules) == []


def _dead_letters(pgq: PgQueue, queue: str, count: int) -> list[int]:
    """Jobs moved straight to the dead letters (as a worker would after their last attempt)."""
    ids = [int(pgq.enqueue("parts.failed", {"n": n}, queue=queue)) for n in range(count)]
    with pgq.connection() as conn:
        conn.execute(
            "WITH gone AS (DELETE FROM pgqueue.jobs WHERE id = ANY(%s) RETURNING *) "
            "INSERT INTO pgqueue.dead_letters (id, queue, task, args, priority, attempts, "
            "max_attempts, lease_token, reason, errors, created_at) SELECT id, queue, task, args, "
            "priority, 1, max_attempts, lease_token, 'failed', '[]'::jsonb, created_at FROM gone",
            (ids,),
        )
    return ids


def test_dead_letters_and_replay(pgq: PgQueue, call: Call) -> None:
    first, *rest = _dead_letters(pgq, "mail", 3)
    other = _dead_letters(pgq, "other", 1)
    assert {d["id"] for d in call(pgq.admin.dead_letters)} == {first, *rest, *other}
    assert [d["id"] for d in call(pgq.admin.dead_letters, queue="other")] == other
    assert len(call(pgq.admin.dead_letters, limit=2)) == 2
    assert call(pgq.admin.replay_dead_letters, queue="mail", dry_run=True) == 3
    assert call(pgq.admin.replay_dead_letters, ids=[first]) == 1
    assert call(pgq.admin.replay_dead_letters, queue="mail", batch_size=1) == 2
    assert [d["id"] for d in call(pgq.admin.dead_letters)] == other


def test_reap(pgq: PgQueue, call: Call) -> None:
    job = pgq.enqueue("parts.stuck", {})
    with pgq.connection() as conn:
        conn.execute(
            "UPDATE pgqueue.jobs SET state = 'running', attempts = 1, "
            "worker_id = gen_random_uuid(), started_at = now() - interval '1 hour', "
            "lease_expires_at = now() - interval '1 s' WHERE id = %s",
            (job,),
        )
    assert call(pgq.admin.reap) == 1
    assert call(pgq.admin.reap) == 0


def test_retention(pgq: PgQueue, call: Call) -> None:
    assert call(pgq.retention.settings).history_retention == timedelta(days=7)
    changed = call(pgq.retention.set, history=3600, dead_letters="never")
    assert (changed.history_retention, changed.dead_letter_retention) == (timedelta(hours=1), None)
    assert call(pgq.retention.settings) == changed
    _dead_letters(pgq, "old", 2)
    with pgq.connection() as conn:
        conn.execute("UPDATE pgqueue.dead_letters SET dead_at = now() - interval '2 days'")
    assert call(pgq.retention.prune).dead_letters == 0  # kept: "never"
    call(pgq.retention.set, dead_letters=timedelta(days=1))
    assert call(pgq.retention.prune, batch_size=1).dead_letters == 2


def test_workflows_progress_and_cancel(pgq: PgQueue, call: Call) -> None:
    @pgq.task(name="parts.add")
    def add(a: int, b: int) -> int:
        return a + b

    run = call(pgq.enqueue_workflow, chain(add.s(1, 2), add.s(b=3)))
    assert call(pgq.workflow, run.id)["state"] == "running"
    assert [w["id"] for w in call(pgq.workflows, state="running")] == [run.id]
    assert call(pgq.progress, run.job_ids[0]) is None  # not running
    assert call(pgq.cancel, run.job_ids[0]) == "cancelled"
    assert call(pgq.cancel, run.job_ids[0]) == "not_found"
    job = call(add.s(2, 2).enqueue)
    assert call(pgq.cancel, job) == "cancelled"


def test_migrate_and_declarations(pgq: PgQueue, call: Call) -> None:
    @pgq.task(name="parts.limited", concurrency_limit=3)
    def limited() -> None: ...

    call(pgq.migrate)  # already at the newest version: nothing to do
    call(pgq.sync_declarations)
    row = by_name(pgq.flow.task_limits(), "task", "parts.limited")
    assert (row["concurrency_limit"], row["from_code"]) == (3, True)


@pytest.mark.parametrize("bad", [1.5, 2**70, "x", True])
def test_cancel_and_progress_refuse_what_is_not_a_job_id(pgq: PgQueue, call: Call, bad) -> None:
    """A float or a number past bigint found no pgqueue.cancel() to call and was reported as
    "pgqueue's schema is not installed"; a word reached the database as a raw cast error."""
    with pytest.raises(InvalidJobError, match=r"a job id must be an integer"):
        call(pgq.cancel, bad)
    with pytest.raises(InvalidJobError, match=r"a job id must be an integer"):
        call(pgq.progress, bad)


@pytest.mark.parametrize("bad", [0, "10", 2.5])
def test_replay_dead_letters_refuses_a_bad_batch_size(pgq: PgQueue, call: Call, bad) -> None:
    """A string or a float failed on a raw comparison or reached the database as a LIMIT."""
    with pytest.raises(InvalidJobError, match=r"batch_size must be"):
        call(pgq.admin.replay_dead_letters, batch_size=bad)
