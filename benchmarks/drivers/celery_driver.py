"""Celery's benchmark driver (runs in ``benchmarks/.peers-venv-redis``; see ``protocol``).

    python -m benchmarks.drivers.celery_driver --pool prefork --dsn DSN work [--concurrency N]

Redis broker (``$BENCH_REDIS_URL``), configured with the settings Celery's optimizing guide gives
for many short tasks: a large prefetch (``worker_prefetch_multiplier`` 64), no result backend
(``task_ignore_result``), rate limits off, and the worker without gossip, mingle and heartbeat
events. ``task_acks_late``: a job is acknowledged after it ran, as pgqueue's are. The worker is
``celery worker`` itself (``worker_main``), with the prefork pool (concurrency = cores, its
default) or the threads pool (64 threads). Celery has no batch enqueue and no ``async def`` tasks.
"""

from __future__ import annotations

import os
import time
from datetime import UTC, datetime

from celery import Celery, signals

from benchmarks.drivers import jobs, protocol

app = Celery("bench", broker=os.environ.get("BENCH_REDIS_URL", "redis://127.0.0.1:6379/0"))
app.conf.update(
    task_acks_late=True,
    worker_prefetch_multiplier=64,
    task_ignore_result=True,
    worker_disable_rate_limits=True,
    broker_connection_retry_on_startup=True,
    worker_hijack_root_logger=False,
)


@app.task(name="bench.noop")
def noop(sent: float | None = None, due: float | None = None) -> None:
    protocol.STATS.job(sent, due)


@app.task(name="bench.sleep_sync")
def sleep_sync() -> None:
    protocol.STATS.job()
    jobs.sleep_sync()


@app.task(name="bench.row")
def row() -> None:
    protocol.STATS.job()
    jobs.write_row()


TASKS = {"noop": noop, "sleep_sync": sleep_sync, "row": row}


@signals.worker_process_shutdown.connect
def _dump(**_: object) -> None:
    # A prefork child leaves through os._exit: atexit handlers never run there.
    protocol.STATS.dump()


def work(pool: str, concurrency: int) -> None:
    if pool == "prefork":
        # Each child runs one job at a time: one connection each for the row jobs.
        os.environ["BENCH_APP_POOL"] = "1"
    slots = concurrency or (os.cpu_count() or 1 if pool == "prefork" else 64)
    app.worker_main(
        [
            "worker",
            "--pool",
            pool,
            "--concurrency",
            str(slots),
            "--loglevel",
            "WARNING",
            "--without-gossip",
            "--without-mingle",
            "--without-heartbeat",
        ]
    )


def main() -> None:
    p = protocol.parser(__doc__ or "")
    p.add_argument("--pool", choices=("prefork", "threads"), default="prefork")
    args = p.parse_args()
    if args.command == "setup":
        return
    if args.command == "enqueue":

        def make():
            return noop.delay

        rate = protocol.threaded_rate(args.producers, args.count // args.producers, make)
        protocol.emit(rate=rate)
    elif args.command == "bulk":
        # No batch API: one message per call (only the drains' fills use this).
        task = TASKS[args.task]
        started = time.perf_counter()
        for _ in range(args.count):
            task.delay()
        protocol.emit(rate=args.count / (time.perf_counter() - started))
    elif args.command == "latency":
        sent = 0
        started = time.perf_counter()
        for _ in protocol.paced(args.rate, args.seconds):
            noop.delay(sent=time.time())
            sent += 1
        protocol.emit(sent=sent, seconds=time.perf_counter() - started)
    elif args.command == "schedule":
        started = time.perf_counter()
        for batch in protocol.due_batches(args.count, args.start_at, args.over):
            for due in batch:
                noop.apply_async(kwargs={"due": due}, eta=datetime.fromtimestamp(due, UTC))
        protocol.emit(
            rate=args.count / (time.perf_counter() - started),
            late=max(0.0, time.time() - args.start_at),
        )
    elif args.command == "work":
        work(args.pool, args.concurrency)


if __name__ == "__main__":
    main()
