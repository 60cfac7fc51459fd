"""Batch tasks for the batch tests, importable by `pgq work` and by its children:

    pgq work tests.integration.batch_app:pgq --queue batches
    pgq work tests.integration.batch_app:pgq --queue proc --pool process

Every handler writes one ledger row per job it got, in one COPY per call, with the batch it
ran in (``note``: the first job's id and the batch's size) and the pid of its process.

What a job's ``outcome`` argument asks of the handler: ``error`` (a failed attempt), ``fail``
(dead-letter now), ``retry`` (run again later, the first time only), ``raise`` (the whole batch
raises, at the job's first attempt only); anything else succeeds. Jobs keep their results:
``n * 2``.
"""

from __future__ import annotations

import asyncio
import os
import time
from dataclasses import dataclass
from typing import Any, NotRequired, TypedDict

import psycopg

from pgqueue import ConstantBackoff, Fail, Item, PgQueue, Retry, current_job

pgq = PgQueue()


class Row(TypedDict):
    n: int
    outcome: NotRequired[str]


@dataclass
class Point:
    x: int
    y: int = 0


def write(items: list[Item[Any]], event: str) -> None:
    """One ledger row per item, in one COPY (on a connection of its own)."""
    if not items:
        return
    note = f"{items[0].id}/{len(items)}"
    with (
        psycopg.connect(os.environ["PGQUEUE_DSN"], autocommit=True) as conn,
        conn.cursor().copy("COPY ledger (job_id, attempt, pid, event, note) FROM STDIN") as copy,
    ):
        for item in items:
            copy.write_row((item.id, item.attempt, os.getpid(), event, note))


def retried_before(items: list[Item[Row]]) -> set[int]:
    with psycopg.connect(os.environ["PGQUEUE_DSN"], autocommit=True) as conn:
        rows = conn.execute(
            "SELECT job_id FROM ledger WHERE event = 'retried' AND job_id = ANY(%s)",
            [[item.id for item in items]],
        ).fetchall()
    return {row[0] for row in rows}


def handle(items: list[Item[Row]]) -> list[int]:
    try:
        current_job()
    except LookupError:
        pass  # a batch runs several jobs: none of them is "the" job
    else:
        raise AssertionError("current_job() answered inside a batch handler")
    write(items, "batch")
    retried = retried_before(items)
    for item in items:
        outcome = item.args.get("outcome")
        if outcome == "error":
            item.fail(ValueError(f"bad row {item.args['n']}"))
        elif outcome == "fail":
            item.fail(Fail(f"row {item.args['n']} can never be written"))
        elif outcome == "retry" and item.id not in retried:
            write([item], "retried")
            item.fail(Retry(delay=0.1))
    if any(item.args.get("outcome") == "raise" and item.attempt == 1 for item in items):
        raise RuntimeError("the whole batch failed")
    return [item.args["n"] * 2 for item in items]


_RECORD: dict[str, Any] = {
    "batch_size": 5,
    "batch_wait": 1.0,
    "max_attempts": 2,
    "backoff": ConstantBackoff(0.1),
    "result_ttl": 3600,
}


@pgq.task(name="batch.record", queue="batches", **_RECORD)
def record(items: list[Item[Row]]) -> list[int]:
    return handle(items)


@pgq.task(name="batch.arecord", queue="batches", **_RECORD)
async def arecord(items: list[Item[Row]]) -> list[int]:
    return await asyncio.to_thread(handle, items)


@pgq.task(name="batch.precord", queue="proc", **_RECORD)
def precord(items: list[Item[Row]]) -> list[int]:
    return handle(items)


@pgq.task(name="batch.points", queue="batches", batch_size=10, batch_wait=0.2, result_ttl=3600)
def points(items: list[Item[Point]]) -> list[int]:
    """The arguments as a dataclass; the result says what the handler saw."""
    write(items, "batch")
    return [item.args.x * 10 + item.args.y for item in items]


@pgq.task(
    name="batch.slow", queue="batches", batch_size=10, batch_wait=0.2, timeout=0.5, max_attempts=1
)
def slow(items: list[Item[dict[str, Any]]]) -> None:
    """Runs past its timeout: its thread is abandoned, the jobs fail at once."""
    write(items, "start")
    time.sleep(1)
    write(items, "late")


@pgq.task(
    name="batch.aslow", queue="batches", batch_size=10, batch_wait=0.2, timeout=0.5, max_attempts=1
)
async def aslow(items: list[Item[dict[str, Any]]]) -> None:
    await asyncio.to_thread(write, items, "start")
    await asyncio.sleep(1)
    await asyncio.to_thread(write, items, "late")


@pgq.task(
    name="batch.pslow", queue="proc", batch_size=10, batch_wait=0.2, timeout=0.5, max_attempts=1
)
def pslow(items: list[Item[dict[str, Any]]]) -> None:
    """In a child: killed at its timeout, so "late" is never written."""
    write(items, "start")
    time.sleep(1)
    write(items, "late")


def wait_for_a_cancel(items: list[Item[dict[str, Any]]]) -> None:
    """Until one of the jobs is cancelled (10 s at most); the others are done then."""
    write(items, "start")
    deadline = time.monotonic() + 10
    while not any(item.cancelled for item in items) and time.monotonic() < deadline:
        time.sleep(0.02)
    write([item for item in items if not item.cancelled], "done")


@pgq.task(name="batch.waits", queue="batches", batch_size=10, batch_wait=0.3)
def waits(items: list[Item[dict[str, Any]]]) -> None:
    wait_for_a_cancel(items)


@pgq.task(name="batch.pwaits", queue="proc", batch_size=10, batch_wait=0.3)
def pwaits(items: list[Item[dict[str, Any]]]) -> None:
    wait_for_a_cancel(items)


@pgq.task(name="batch.handback", queue="handback", batch_size=100, batch_wait=4.0)
def handback(items: list[Item[dict[str, Any]]]) -> None:
    """Waits long for more jobs: a shutdown meanwhile hands its jobs back unstarted."""
    write(items, "ran")


@pgq.task(name="batch.drains", queue="handback", batch_size=2, batch_wait=0.1)
def drains(items: list[Item[dict[str, Any]]]) -> None:
    write(items, "start")
    time.sleep(1.0)
    write(items, "end")
