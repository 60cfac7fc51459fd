"""``ctx.transaction()`` without a database: what it refuses, and how a lost COMMIT reply is
looked into (the decisions shared by the sync and async drivers). The transactions themselves
are tested against PostgreSQL with real workers (tests/integration/test_job_transactions.py)."""

from __future__ import annotations

import asyncio
from datetime import UTC, datetime

import psycopg
import pytest

from pgqueue import JobContext, JobTransactionError
from pgqueue.handler.job_context import ClaimedJob
from pgqueue.handler.job_transaction import (
    COMMITTED,
    OPEN,
    UNKNOWN,
    Completed,
    TransactionHost,
    _Settling,
)

NOW = datetime(2030, 1, 1, tzinfo=UTC)


def context(host: TransactionHost | None = None, wants_result: bool = False) -> JobContext:
    job = ClaimedJob(7, "default", "t", {}, 1, 3, 1, 0, NOW, NOW, wants_result)
    ctx = JobContext(job, "worker")
    ctx.transactions = host
    return ctx


def host() -> TransactionHost:
    return TransactionHost("dbname=nowhere", application_name=None, max_result_bytes=100)


def test_outside_a_worker_there_is_no_transaction():
    with (
        pytest.raises(JobTransactionError, match="run by a pgqueue worker"),
        context().transaction(),
    ):
        pass


def test_a_job_has_one_transaction():
    ctx = context(host())
    ctx.transaction_state = OPEN
    with pytest.raises(JobTransactionError, match="inside another"), ctx.transaction():
        pass
    ctx.transaction_state = COMMITTED
    block = ctx.transaction()
    with pytest.raises(JobTransactionError, match="after the job's transaction ended"), block:
        pass


def test_with_on_the_event_loop_asks_for_async_with():
    async def handler() -> None:
        with context(host()).transaction():
            pass

    with pytest.raises(JobTransactionError, match="async with"):
        asyncio.run(handler())


def test_set_result_belongs_inside_the_block():
    ctx = context(host(), wants_result=True)
    with pytest.raises(JobTransactionError, match=r"inside a ctx\.transaction"):
        ctx.set_result(1)
    ctx.transaction_state = OPEN
    ctx.set_result({"a": 1})
    assert ctx.result_json == '{"a":1}'
    with pytest.raises(ValueError, match="result"):
        ctx.set_result("x" * 200)  # over max_result_bytes


COMPLETED = Completed(7, False, "123", 42)


def test_a_status_the_server_gave_is_final():
    assert _Settling(COMPLETED).next("committed", None) == "committed"
    assert _Settling(COMPLETED).next("aborted", None) == "aborted"


def test_an_outage_is_waited_out_with_growing_pauses_until_the_deadline():
    settling = _Settling(COMPLETED)
    outage = psycopg.OperationalError("connection refused")
    pauses = [settling.next(None, outage) for _ in range(6)]
    assert pauses == [0.1, 0.2, 0.4, 0.8, 1.0, 1.0]
    assert settling.next("in progress", None) == 1.0  # still open on the server: ask again
    settling.deadline = 0.0
    assert settling.next(None, outage) == UNKNOWN


def test_without_the_right_to_end_the_backend_it_waits_for_the_server():
    settling = _Settling(COMPLETED)
    assert settling.terminate
    assert settling.next(None, psycopg.errors.InsufficientPrivilege("denied")) == 0.1
    assert not settling.terminate


def test_an_error_that_is_no_outage_means_the_server_cannot_say():
    error = psycopg.errors.InvalidParameterValue("transaction ID 123 is in the future")
    assert _Settling(COMPLETED).next(None, error) == UNKNOWN
