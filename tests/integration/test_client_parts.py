"""The client's operations against PostgreSQL, each test run twice: through the sync method and
through its ``_async`` twin (one event loop for the whole test), so both forms are held to the
same assertions. Which operations must have both forms, with the same parameters, is checked
in tests/unit/test_client_surface.py; their ``conn=`` in the caller's transaction in
test_caller_transactions.py."""

from __future__ import annotations

import asyncio
from collections.abc import Callable, Iterator
from typing import Any

import pytest

from pgqueue import CircuitBreaker, PgQueue, RateLimit

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
