"""Dramatiq's benchmark driver (runs in ``benchmarks/.peers-venv-redis``; see ``protocol``).

Redis broker (``$BENCH_REDIS_URL``) with its default middleware plus ``AsyncIO`` (for the
``async def`` actor). The worker is one process with ``--concurrency`` threads (default 64):
``dramatiq.Worker`` in process, what ``dramatiq --processes 1 --threads 64`` runs in its one
worker process, with its default prefetch (2 jobs per thread) and idle poll back-off (up to
1 s, ``dramatiq_worker_timeout``). Dramatiq has no batch enqueue.
"""

from __future__ import annotations

import os
import signal
import threading
import time

import dramatiq
from dramatiq.brokers.redis import RedisBroker
from dramatiq.middleware import AsyncIO

from benchmarks.drivers import jobs, protocol

broker = RedisBroker(url=os.environ.get("BENCH_REDIS_URL", "redis://127.0.0.1:6379/0"))
broker.add_middleware(AsyncIO())
dramatiq.set_broker(broker)


@dramatiq.actor(actor_name="noop", max_retries=0)
def noop(sent: float | None = None, due: float | None = None) -> None:
    protocol.STATS.job(sent, due)


@dramatiq.actor(actor_name="sleep_sync", max_retries=0)
def sleep_sync() -> None:
    protocol.STATS.job()
    jobs.sleep_sync()


@dramatiq.actor(actor_name="sleep_async", max_retries=0)
async def sleep_async() -> None:
    protocol.STATS.job()
    await jobs.sleep_async()


@dramatiq.actor(actor_name="row", max_retries=0)
def row() -> None:
    protocol.STATS.job()
    jobs.write_row()


TASKS = {"noop": noop, "sleep_sync": sleep_sync, "sleep_async": sleep_async, "row": row}


def work(threads: int) -> None:
    stopping = threading.Event()
    signal.signal(signal.SIGTERM, lambda *_: stopping.set())
    signal.signal(signal.SIGINT, lambda *_: stopping.set())
    broker.emit_after("process_boot")  # what the CLI does first (starts the AsyncIO loop)
    worker = dramatiq.Worker(broker, worker_threads=threads)
    worker.start()
    stopping.wait()
    worker.stop()
    broker.close()


def main() -> None:
    args = protocol.parser(__doc__ or "").parse_args()
    if args.command == "setup":
        return
    if args.command == "enqueue":

        def make():
            return noop.send

        rate = protocol.threaded_rate(args.producers, args.count // args.producers, make)
        protocol.emit(rate=rate)
    elif args.command == "bulk":
        task = TASKS[args.task]
        started = time.perf_counter()
        for _ in range(args.count):
            task.send()
        protocol.emit(rate=args.count / (time.perf_counter() - started))
    elif args.command == "latency":
        sent = 0
        started = time.perf_counter()
        for _ in protocol.paced(args.rate, args.seconds):
            noop.send(sent=time.time())
            sent += 1
        protocol.emit(sent=sent, seconds=time.perf_counter() - started)
    elif args.command == "schedule":
        started = time.perf_counter()
        for batch in protocol.due_batches(args.count, args.start_at, args.over):
            for due in batch:
                delay = max(0, int((due - time.time()) * 1000))
                noop.send_with_options(kwargs={"due": due}, delay=delay)
        protocol.emit(
            rate=args.count / (time.perf_counter() - started),
            late=max(0.0, time.time() - args.start_at),
        )
    elif args.command == "work":
        work(args.concurrency or 64)


if __name__ == "__main__":
    main()
