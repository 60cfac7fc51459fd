"""Tasks and a producer for the deduplication tests, importable by real `pgq work` processes:

    pgq work tests.integration.dedupe_app:pgq
    python -m tests.integration.dedupe_app PRODUCER COUNT   (a producer process; $PGQUEUE_DSN)

Handlers write to the effects ledger (see worker_app): a 'start' row whose note is the
arguments the job ran with, so a test can tell which arguments ran, and how often.
"""

from __future__ import annotations

import asyncio
import json
import sys

from pgqueue import PgQueue, current_job
from tests.integration.worker_app import arecord

pgq = PgQueue()


@pgq.task(name="dedupe.sync", unique_by=("doc",), unique_among="pending", on_conflict="replace")
async def sync(doc: int, version: str = "", seconds: float = 0.0) -> None:
    """Debounced per document: a pending job takes the newest version; one may be enqueued
    while another runs ("sync again after this run")."""
    await arecord("start", json.dumps({"doc": doc, "version": version}))
    await asyncio.sleep(seconds)


@pgq.task(
    name="dedupe.flaky", unique_by=("doc",), unique_among="pending", backoff=lambda attempt: 0.1
)
async def flaky(doc: int, seconds: float = 0.0) -> None:
    """Its first attempt fails after ``seconds``."""
    attempt = current_job().attempt
    await arecord("start", str(attempt))
    await asyncio.sleep(seconds)
    if attempt == 1:
        raise RuntimeError("the first attempt fails")


@pgq.task(name="dedupe.tick")
async def tick(n: int = 0) -> None:
    await arecord("start", str(n))


def produce(producer: str, count: int) -> None:
    """Enqueue document 1 ``count`` times (each call replaces the pending job's version), and
    print what each call returned, one JSON line per call: [id, created, replaced, version]."""
    try:
        for n in range(count):
            version = f"{producer}-{n}"
            job = sync.enqueue(1, version)
            sys.stdout.write(json.dumps([int(job), job.created, job.replaced, version]) + "\n")
    finally:
        pgq.close()


if __name__ == "__main__":
    produce(sys.argv[1], int(sys.argv[2]))
