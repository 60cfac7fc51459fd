"""pgqueue's benchmark driver (see ``benchmarks.drivers.protocol``), and its worker app.

    python -m benchmarks.drivers.pgqueue_driver --dsn DSN enqueue --producers 8 --count 8000
    python -m pgqueue.cli work benchmarks.drivers.pgqueue_driver:pgq --concurrency 64

Producers use the sync API from threads (the API most applications call); bulk uses
``enqueue_many`` (COPY). The worker is a real ``pgq work`` process (see ``work_command``).
``--sync-tasks``: the no-op and row jobs are plain ``def`` tasks (run on the worker's handler
threads) instead of ``async def``.
"""

from __future__ import annotations

import time
from datetime import UTC, datetime

from benchmarks.drivers import jobs, protocol
from pgqueue import PgQueue
from pgqueue.db import migrate

pgq = PgQueue()
TASK = "bench.job"
#: The same no-op as a plain function (thread pool): `benchmarks.profile_drain --sync`.
SYNC_TASK = "bench.sync_job"
DEFAULT_CONCURRENCY = 64


@pgq.task(name=TASK)
async def job(sent: float | None = None, due: float | None = None) -> None:
    protocol.STATS.job(sent, due)


@pgq.task(name=SYNC_TASK)
def sync_job(sent: float | None = None, due: float | None = None) -> None:
    protocol.STATS.job(sent, due)


@pgq.task(name="bench.sleep_sync")
def sleep_sync() -> None:
    protocol.STATS.job()
    jobs.sleep_sync()


@pgq.task(name="bench.sleep_async")
async def sleep_async() -> None:
    protocol.STATS.job()
    await jobs.sleep_async()


@pgq.task(name="bench.row")
async def row() -> None:
    protocol.STATS.job()
    await jobs.write_row_async()


@pgq.task(name="bench.sync_row")
def sync_row() -> None:
    protocol.STATS.job()
    jobs.write_row()


def tasks(sync: bool) -> dict[str, object]:
    """The task of every job kind (``protocol.TASKS``) for async or sync no-op and row jobs."""
    return {
        "noop": sync_job if sync else job,
        "sleep_sync": sleep_sync,
        "sleep_async": sleep_async,
        "row": sync_row if sync else row,
    }


def work_command(python: str, concurrency: int) -> list[str]:
    """The worker as users run it: ``pgq work`` (DSN from ``PGQUEUE_DSN``)."""
    return [
        python,
        "-m",
        "pgqueue.cli",
        "work",
        "benchmarks.drivers.pgqueue_driver:pgq",
        "--concurrency",
        str(concurrency or DEFAULT_CONCURRENCY),
        "--log-level",
        "WARNING",
    ]


def main(argv: list[str] | None = None) -> None:
    p = protocol.parser(__doc__ or "")
    p.add_argument("--sync-tasks", action="store_true", help="def no-op and row tasks")
    args = p.parse_args(argv)
    dsn: str = args.dsn
    kinds = tasks(args.sync_tasks)
    noop = kinds["noop"]
    if args.command == "setup":
        migrate.upgrade(dsn)
    elif args.command == "enqueue":

        def make():
            app = PgQueue(dsn, pool_size=1)
            return lambda: app.enqueue(noop.name, {})  # type: ignore[attr-defined]

        rate = protocol.threaded_rate(args.producers, args.count // args.producers, make)
        protocol.emit(rate=rate)
    elif args.command == "bulk":
        with PgQueue(dsn, pool_size=1) as app:
            app.enqueue_many([])  # open the pool before the clock starts
            app.enqueue(TASK, {})
            task = kinds[args.task]
            started = time.perf_counter()
            for n in protocol.chunks(args.count, args.chunk):
                app.enqueue_many([task.s() for _ in range(n)])  # type: ignore[attr-defined]
            protocol.emit(rate=args.count / (time.perf_counter() - started))
    elif args.command == "latency":
        with PgQueue(dsn, pool_size=1) as app:
            sent = 0
            started = time.perf_counter()
            for _ in protocol.paced(args.rate, args.seconds):
                app.enqueue(noop.name, {"sent": time.time()})  # type: ignore[attr-defined]
                sent += 1
            protocol.emit(sent=sent, seconds=time.perf_counter() - started)
    elif args.command == "schedule":
        with PgQueue(dsn, pool_size=1) as app:
            started = time.perf_counter()
            for batch in protocol.due_batches(args.count, args.start_at, args.over):
                app.enqueue_many(
                    [
                        noop.s(due=d, run_at=datetime.fromtimestamp(d, UTC))  # type: ignore[attr-defined]
                        for d in batch
                    ]
                )
            protocol.emit(
                rate=args.count / (time.perf_counter() - started),
                late=max(0.0, time.time() - args.start_at),
            )
    elif args.command == "work":
        # The worker embedded through the Python API (``benchmarks.startup``'s ``pgqueue_api``,
        # beside the peers' drivers, which embed theirs): the harness's figures run `pgq work`
        # itself (work_command).
        from pgqueue.worker import Worker, WorkerSettings

        Worker(
            pgq, WorkerSettings(concurrency=args.concurrency or DEFAULT_CONCURRENCY), dsn=dsn
        ).run_sync()


if __name__ == "__main__":
    main()
