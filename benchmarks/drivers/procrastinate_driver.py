"""Procrastinate's benchmark driver (runs in the peers' virtualenv; see ``protocol``).

Configured for throughput as its docs describe: an async task (so ``concurrency`` applies:
``--concurrency`` coroutines per worker process, default 10), LISTEN/NOTIFY on, and
``delete_jobs="successful"`` (the documented way to keep finished jobs out of the job table).
Bulk enqueue uses ``batch_defer_async``. Producers share one psycopg pool with one connection
per producer.
"""

from __future__ import annotations

import asyncio
import time

from procrastinate import App, PsycopgConnector

from benchmarks.drivers import protocol

TASK = "bench.job"
DEFAULT_CONCURRENCY = 10


def make_app(dsn: str, pool_size: int) -> App:
    app = App(connector=PsycopgConnector(conninfo=dsn, min_size=1, max_size=pool_size))

    @app.task(name=TASK)
    async def job(sent: float | None = None) -> None:
        protocol.STATS.job(sent)

    return app


async def run(args) -> None:
    dsn: str = args.dsn
    if args.command == "work":
        concurrency = args.concurrency or DEFAULT_CONCURRENCY
        # The worker needs a connection per concurrent fetch plus LISTEN; leave headroom.
        app = make_app(dsn, concurrency + 2)
    else:
        app = make_app(dsn, max(1, getattr(args, "producers", 1)))
    job = app.tasks[TASK]
    async with app.open_async():
        if args.command == "setup":
            await app.schema_manager.apply_schema_async()
        elif args.command == "enqueue":

            async def make():
                async def close() -> None:
                    return None

                return job.defer_async, close

            rate = await protocol.async_rate(args.producers, args.count // args.producers, make)
            protocol.emit(rate=rate)
        elif args.command == "bulk":
            await job.defer_async()
            started = time.perf_counter()
            for n in protocol.chunks(args.count, args.chunk):
                await job.batch_defer_async(*({} for _ in range(n)))
            protocol.emit(rate=args.count / (time.perf_counter() - started))
        elif args.command == "latency":
            sent = 0
            started = time.perf_counter()
            async for _ in protocol.async_paced(args.rate, args.seconds):
                await job.defer_async(sent=time.time())
                sent += 1
            protocol.emit(sent=sent, seconds=time.perf_counter() - started)
        elif args.command == "work":
            await app.run_worker_async(
                concurrency=args.concurrency or DEFAULT_CONCURRENCY,
                delete_jobs="successful",
                listen_notify=True,
                install_signal_handlers=True,
            )


def main() -> None:
    asyncio.run(run(protocol.parser(__doc__ or "").parse_args()))


if __name__ == "__main__":
    main()
