"""PgQueuer's benchmark driver (runs in the peers' virtualenv; see ``protocol``).

Configured as PgQueuer's own benchmark tool and docs recommend for throughput: the asyncpg
driver (documented as about twice as fast as psycopg), uvloop, and per worker process
``--consumers`` QueueManagers (default 5, each on its own connection) dequeuing in batches of
``--batch-size`` (default 10). Bulk enqueue passes lists to ``Queries.enqueue`` (one statement).
"""

from __future__ import annotations

import asyncio
import signal
import time

import asyncpg
import uvloop
from pgqueuer import PgQueuer
from pgqueuer.db import AsyncpgDriver
from pgqueuer.models import Job
from pgqueuer.queries import Queries

from benchmarks.drivers import protocol

ENTRYPOINT = "bench.job"


async def queries(dsn: str) -> tuple[Queries, asyncpg.Connection]:
    conn = await asyncpg.connect(dsn=dsn)
    return Queries(AsyncpgDriver(conn)), conn


async def work(dsn: str, consumers: int, batch_size: int) -> None:
    apps: list[PgQueuer] = []
    for _ in range(consumers):
        app = PgQueuer(AsyncpgDriver(await asyncpg.connect(dsn=dsn)))

        @app.entrypoint(ENTRYPOINT)
        async def job(job: Job) -> None:
            protocol.STATS.job(float(job.payload) if job.payload else None)

        apps.append(app)

    def stop() -> None:
        for app in apps:
            app.shutdown.set()

    loop = asyncio.get_running_loop()
    loop.add_signal_handler(signal.SIGTERM, stop)
    loop.add_signal_handler(signal.SIGINT, stop)
    await asyncio.gather(*(app.run(batch_size=batch_size) for app in apps))


async def run(args) -> None:
    dsn: str = args.dsn
    if args.command == "setup":
        q, conn = await queries(dsn)
        await q.install()
        await conn.close()
    elif args.command == "enqueue":

        async def make():
            q, conn = await queries(dsn)
            return (lambda: q.enqueue(ENTRYPOINT, None)), conn.close

        rate = await protocol.async_rate(args.producers, args.count // args.producers, make)
        protocol.emit(rate=rate)
    elif args.command == "bulk":
        q, conn = await queries(dsn)
        await q.enqueue(ENTRYPOINT, None)
        started = time.perf_counter()
        for n in protocol.chunks(args.count, args.chunk):
            await q.enqueue([ENTRYPOINT] * n, [None] * n, [0] * n)
        protocol.emit(rate=args.count / (time.perf_counter() - started))
        await conn.close()
    elif args.command == "latency":
        q, conn = await queries(dsn)
        sent = 0
        started = time.perf_counter()
        async for _ in protocol.async_paced(args.rate, args.seconds):
            await q.enqueue(ENTRYPOINT, repr(time.time()).encode())
            sent += 1
        protocol.emit(sent=sent, seconds=time.perf_counter() - started)
        await conn.close()
    elif args.command == "work":
        await work(dsn, args.consumers, args.batch_size)


def main() -> None:
    p = protocol.parser(__doc__ or "")
    p.add_argument("--consumers", type=int, default=5, help="QueueManagers per process")
    p.add_argument("--batch-size", type=int, default=10)
    uvloop.run(run(p.parse_args()))


if __name__ == "__main__":
    main()
