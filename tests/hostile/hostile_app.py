"""Tasks for the hostile-input tests: they record exactly what they were called with."""

from __future__ import annotations

import json
import os
import time

import psycopg

from pgqueue import ConstantBackoff, PgQueue, Retry, current_job
from tests.integration.worker_app import record

pgq = PgQueue()


@pgq.task(name="echo")
def echo(**kwargs: object) -> None:
    record("end", note=json.dumps(kwargs, ensure_ascii=False))


@pgq.task(name="echo_one", max_attempts=3)
def echo_one(value: object) -> None:
    record("end", note=json.dumps(value, ensure_ascii=False))


@pgq.task(name="fails", max_attempts=1)
def fails() -> None:
    record("start")
    raise RuntimeError("fails on purpose")


@pgq.task(name="keeps_result", result_ttl=3600)
def keeps_result() -> dict[str, int]:
    record("end")
    return {"answer": 42}


@pgq.task(name="retry_far", max_attempts=1)
def retry_far() -> None:
    """Asks for a delay no timestamp can hold (a backoff callable gone wrong)."""
    record("start")
    raise Retry(delay=1e300)


@pgq.task(name="refused", max_attempts=1)
def refused() -> None:
    """Fails; the test forbids its dead letter with a constraint, so nothing can record it."""
    record("start")
    raise RuntimeError("refused on purpose")


@pgq.task(name="bad_address", max_attempts=2, backoff=ConstantBackoff(0.05))
def bad_address() -> None:
    record("start")
    raise ValueError("bad address: x=1\nsecond line")


@pgq.task(name="holds_on")
def holds_on() -> None:
    """A sync handler that ignores cancellation: it returns only once the test inserts a
    'release' ledger row for its job."""
    job = current_job()
    record("start")
    with psycopg.connect(os.environ["PGQUEUE_DSN"], autocommit=True) as conn:
        while not conn.execute(
            "SELECT 1 FROM ledger WHERE job_id = %s AND event = 'release'", (job.id,)
        ).fetchone():
            time.sleep(0.02)
    record("end")
