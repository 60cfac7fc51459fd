"""Chancy's benchmark driver (runs in its own virtualenv; see ``protocol``).

Configured for throughput as its docs describe: one queue on the ``AsyncExecutor`` (its
executor for I/O-bound ``async def`` jobs; the default ``ProcessExecutor`` pays a process hop
per job) with ``--concurrency`` slots (default 64, as pgqueue's worker), ``eager_polling`` (poll
again as soon as a job completes: "for queues where jobs are expected to be continuously
available") and a 1 s ``polling_interval`` (its minimum; LISTEN/NOTIFY wakes it on a push in
between). The worker's default plugins (pruner, recovery, leadership, workflows) stay on. It
writes job results back in batches every ``send_outgoing_interval`` (1 s), as shipped. Single
enqueue is ``push``; bulk is ``push_many`` (its default 1,000 jobs per statement batch; with
``--atomic`` all batches in one transaction through ``push_many_ex``).
"""

from __future__ import annotations

import asyncio
import os
import time
from typing import Any

from chancy import Chancy, Job, Queue, Worker
from psycopg.rows import dict_row

from benchmarks.drivers import protocol

QUEUE = "default"
DEFAULT_CONCURRENCY = 64
BATCH = 1_000
FUNC = "benchmarks.drivers.chancy_driver.bench_job"


async def bench_job(sent: float | None = None) -> None:
    protocol.STATS.job(sent)


def job(**kwargs: Any) -> Job:
    return Job(func=FUNC, queue=QUEUE, kwargs=kwargs)


def queue(concurrency: int) -> Queue:
    return Queue(
        QUEUE,
        concurrency=concurrency,
        executor="chancy.executors.asyncex.AsyncExecutor",
        polling_interval=1,
        eager_polling=True,
    )


async def run(args) -> None:
    dsn: str = args.dsn
    producers = max(getattr(args, "producers", 1), 1)
    async with Chancy(dsn, max_connection_pool_size=max(producers, 10)) as chancy:
        if args.command == "setup":
            await chancy.migrate()
            await chancy.declare(
                queue(DEFAULT_CONCURRENCY),
                upsert=True,
            )
        elif args.command == "enqueue":

            async def make():
                async def enqueue() -> None:
                    await chancy.push(job())

                async def close() -> None:
                    return None

                return enqueue, close

            rate = await protocol.async_rate(producers, args.count // producers, make)
            protocol.emit(rate=rate)
        elif args.command == "bulk":
            await chancy.push(job())
            started = time.perf_counter()
            if args.atomic:
                async with (
                    chancy.pool.connection() as conn,
                    conn.cursor(row_factory=dict_row) as cursor,
                    conn.transaction(),
                ):
                    for n in protocol.chunks(args.count, BATCH):
                        await chancy.push_many_ex(cursor, [job() for _ in range(n)])
            else:
                for n in protocol.chunks(args.count, args.chunk):
                    async for _ in chancy.push_many([job() for _ in range(n)], batch_size=BATCH):
                        pass
            protocol.emit(rate=args.count / (time.perf_counter() - started))
        elif args.command == "latency":
            sent = 0
            started = time.perf_counter()
            async for _ in protocol.async_paced(args.rate, args.seconds):
                await chancy.push(job(sent=time.time()))
                sent += 1
            protocol.emit(sent=sent, seconds=time.perf_counter() - started)
        elif args.command == "work":
            if args.concurrency:
                await chancy.declare(
                    queue(args.concurrency),
                    upsert=True,
                )
            async with Worker(chancy) as worker:
                await worker.wait_for_shutdown()


def cli_app() -> Chancy:
    """The app ``chancy --app benchmarks.drivers.chancy_driver.cli_app worker start`` runs (its
    command-line worker, ``benchmarks.startup``): the database from the harness's environment,
    the queue as ``setup`` declared it."""
    return Chancy(os.environ["BENCH_APP_DSN"])


def main() -> None:
    asyncio.run(run(protocol.parser(__doc__ or "").parse_args()))


if __name__ == "__main__":
    # Chancy imports a job's function by its path: run from the module's importable name.
    import importlib

    importlib.import_module("benchmarks.drivers.chancy_driver").main()
