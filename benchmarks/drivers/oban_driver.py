"""Oban-py's benchmark driver (runs in its own virtualenv; see ``protocol``).

Oban-py is the Python port of Oban (``pip install oban``). Configured as its docs describe for
a production worker: an ``async def process`` worker on one queue whose ``limit`` is the
process's concurrency (``--limit``, default 64, the slots pgqueue's worker has), the default
producer debounce (5 ms between fetches) and the default connection pool (1..10, "comfortable
for most deployments"; the notifier's LISTEN connection is its own). Its maintenance plugins
(stager, pruner, lifeline, leader) keep their defaults, as ``oban start`` runs them. Single
enqueue is ``Oban.enqueue`` (one INSERT per job), bulk is ``enqueue_many`` (one multi-row
statement per call).
"""

from __future__ import annotations

import asyncio
import signal
import time
from typing import Any

from oban import Oban, worker
from psycopg_pool import AsyncConnectionPool

from benchmarks.drivers import protocol

QUEUE = "default"
DEFAULT_LIMIT = 64


class _BenchWorker:
    async def process(self, job: Any) -> None:
        protocol.STATS.job(job.args.get("sent"))


#: What ``@worker`` makes of it (``new`` builds a job); decorated by a call, so its type is Oban's.
BenchWorker: Any = worker(queue=QUEUE, max_attempts=1)(_BenchWorker)


async def pool(dsn: str, size: int = 10) -> AsyncConnectionPool:
    opened = AsyncConnectionPool(dsn, min_size=1, max_size=size, open=False)
    await opened.open()
    return opened


async def run(args) -> None:
    dsn: str = args.dsn
    if args.command == "setup":
        from oban.schema import install_sql

        connections = await pool(dsn, 1)
        async with connections.connection() as conn:
            await conn.execute(install_sql())
        await connections.close()
        return
    if args.command == "work":
        await work(dsn, args.concurrency or args.limit)
        return
    producers = getattr(args, "producers", 1)
    connections = await pool(dsn, max(producers, 1))
    oban = Oban(pool=connections)  # client mode: no queues, no leadership
    if args.command == "enqueue":

        async def make():
            async def enqueue() -> None:
                await oban.enqueue(BenchWorker.new({}))

            async def close() -> None:
                return None

            return enqueue, close

        rate = await protocol.async_rate(producers, args.count // producers, make)
        protocol.emit(rate=rate)
    elif args.command == "bulk":
        await oban.enqueue(BenchWorker.new({}))
        started = time.perf_counter()
        if args.atomic:
            async with connections.connection() as conn, conn.transaction():
                await oban.enqueue_many([BenchWorker.new({}) for _ in range(args.count)], conn=conn)
        else:
            for n in protocol.chunks(args.count, args.chunk):
                await oban.enqueue_many([BenchWorker.new({}) for _ in range(n)])
        protocol.emit(rate=args.count / (time.perf_counter() - started))
    elif args.command == "latency":
        sent = 0
        started = time.perf_counter()
        async for _ in protocol.async_paced(args.rate, args.seconds):
            await oban.enqueue(BenchWorker.new({"sent": time.time()}))
            sent += 1
        protocol.emit(sent=sent, seconds=time.perf_counter() - started)
    await connections.close()


async def work(dsn: str, limit: int) -> None:
    connections = await pool(dsn)
    oban = Oban(pool=connections, queues={QUEUE: limit})
    stop = asyncio.Event()
    loop = asyncio.get_running_loop()
    loop.add_signal_handler(signal.SIGTERM, stop.set)
    loop.add_signal_handler(signal.SIGINT, stop.set)
    async with oban:
        await stop.wait()
    await connections.close()


def main() -> None:
    p = protocol.parser(__doc__ or "")
    p.add_argument("--limit", type=int, default=DEFAULT_LIMIT, help="the queue's limit")
    asyncio.run(run(p.parse_args()))


if __name__ == "__main__":
    # Oban resolves a job's worker by its import path: run from the module's importable name.
    import importlib

    importlib.import_module("benchmarks.drivers.oban_driver").main()
