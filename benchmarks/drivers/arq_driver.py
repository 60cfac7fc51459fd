"""arq's benchmark driver (runs in ``benchmarks/.peers-venv-arq``; see ``protocol``).

Redis (``$BENCH_REDIS_URL``); the worker is ``arq.worker.Worker`` in process (what ``arq
WorkerSettings`` runs) with ``max_jobs`` = ``--concurrency`` (default 64), ``keep_result`` 0 (no
result kept) and ``poll_delay`` 0.05 s: arq finds new jobs by polling its sorted set (its default
is 0.5 s). Jobs are coroutines only (no ``sleep_sync``); ``enqueue_job`` one at a time (no batch
API), ``_defer_until`` for scheduled jobs.
"""

from __future__ import annotations

import asyncio
import os
import time
from datetime import UTC, datetime
from typing import Any

from arq import create_pool
from arq.connections import RedisSettings
from arq.worker import Worker, func

from benchmarks.drivers import jobs, protocol

POLL_DELAY = 0.05


def settings() -> RedisSettings:
    return RedisSettings.from_dsn(os.environ.get("BENCH_REDIS_URL", "redis://127.0.0.1:6379/0"))


async def noop(ctx: dict[str, Any], sent: float | None = None, due: float | None = None) -> None:
    protocol.STATS.job(sent, due)


async def sleep_async(ctx: dict[str, Any]) -> None:
    protocol.STATS.job()
    await jobs.sleep_async()


async def row(ctx: dict[str, Any]) -> None:
    protocol.STATS.job()
    await jobs.write_row_async()


FUNCTIONS = {"noop": noop, "sleep_async": sleep_async, "row": row}


def work(slots: int) -> None:
    worker = Worker(
        functions=[func(f, name=name) for name, f in FUNCTIONS.items()],
        redis_settings=settings(),
        max_jobs=slots,
        keep_result=0,
        poll_delay=POLL_DELAY,
        max_tries=1,
    )
    worker.run()


async def run(args: Any) -> None:
    redis = await create_pool(settings())
    if args.command == "enqueue":

        async def make():
            async def close() -> None:
                return None

            return (lambda: redis.enqueue_job("noop")), close

        rate = await protocol.async_rate(args.producers, args.count // args.producers, make)
        protocol.emit(rate=rate)
    elif args.command == "bulk":
        started = time.perf_counter()
        for _ in range(args.count):
            await redis.enqueue_job(args.task)
        protocol.emit(rate=args.count / (time.perf_counter() - started))
    elif args.command == "latency":
        sent = 0
        started = time.perf_counter()
        async for _ in protocol.async_paced(args.rate, args.seconds):
            await redis.enqueue_job("noop", sent=time.time())
            sent += 1
        protocol.emit(sent=sent, seconds=time.perf_counter() - started)
    elif args.command == "schedule":
        started = time.perf_counter()
        for batch in protocol.due_batches(args.count, args.start_at, args.over):
            for due in batch:
                await redis.enqueue_job(
                    "noop", due=due, _defer_until=datetime.fromtimestamp(due, UTC)
                )
        protocol.emit(
            rate=args.count / (time.perf_counter() - started),
            late=max(0.0, time.time() - args.start_at),
        )
    await redis.aclose()


def main() -> None:
    args = protocol.parser(__doc__ or "").parse_args()
    if args.command == "setup":
        return
    if args.command == "work":
        work(args.concurrency or 64)
    else:
        asyncio.run(run(args))


if __name__ == "__main__":
    main()
