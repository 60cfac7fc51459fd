"""What every driver does, the same way for every system (standard library only).

A driver is a small command line with these subcommands, all taking ``--dsn``:

``setup``
    install the system's schema in an empty database.
``enqueue --producers P --count N``
    N jobs, one per transaction, from P concurrent producers; prints the rate.
``bulk --count N [--chunk C] [--atomic] [--task KIND]``
    N jobs through the system's batch API (C per call; default all in one call); prints the rate.
    ``--atomic``: in one transaction (one call of a batch API already is). Systems without a
    batch API loop over single enqueues (their fill is never timed as "bulk").
``latency --rate R --seconds S``
    enqueues one job per transaction at a steady R jobs/s, each carrying the producer's clock
    (``time.time()`` taken just before the call). The steady-load workloads run several of these
    at once.
``schedule --count N --start-at T --over S``
    N no-op jobs due at evenly spaced wall-clock times from T to T + S, each carrying its due
    time (the batch API where the system has one); prints ``{"rate", "late"}`` (``late``: how
    many seconds after T the last one was written, if it was).
``work``
    a worker process that runs until SIGTERM. Its handlers count jobs; at exit it writes
    ``{"first", "first_cpu", "last", "count", "buckets"}`` (wall-clock times of the first and
    last job it ran, the process's CPU time when the first started, jobs started per 100 ms) to
    ``$BENCH_STATS_DIR/<pid>.json``, and jobs carrying ``sent`` append ``now - sent`` (seconds)
    to ``$BENCH_LATENCY_FILE`` (jobs carrying ``due``: ``d now - due``). ``now`` is taken first
    thing in the handler; both clocks are ``time.time()`` on the same machine
    (``CLOCK_MONOTONIC`` is not comparable across processes).

The job kinds (``--task``): ``noop``; ``sleep_sync`` and ``sleep_async`` (10 ms of
``time.sleep`` / ``asyncio.sleep``: I/O-bound jobs); ``row`` (one row into the application
table ``bench_rows`` through the worker process's connection pool, ``benchmarks.drivers.jobs``).

Results are printed as one line ``BENCH-RESULT {json}`` so logs can share stdout.
Throughput of a drain is measured from inside the handlers (first job started to last job run,
over all processes), so process start-up, imports and shutdown never count for any system.
"""

from __future__ import annotations

import argparse
import atexit
import json
import os
import threading
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import IO, Any

RESULT_PREFIX = "BENCH-RESULT "
#: The job kinds a driver's ``bulk --task`` enqueues (see the module docstring).
TASKS = ("noop", "sleep_sync", "sleep_async", "row")
#: How long an I/O-bound job waits.
SLEEP = 0.010
PRODUCERS_READY_TIMEOUT = 60.0


class JobStats:
    """Per-process counters the handlers update: cheap enough to not matter per job."""

    def __init__(self) -> None:
        self.first: float | None = None
        #: The process's CPU time (``time.process_time``) when its first job started.
        self.first_cpu: float | None = None
        self.last = 0.0
        self.count = 0
        #: Jobs started per 100 ms (wall clock), so a drain's rate can leave out its ramps.
        self.buckets: dict[int, int] = {}
        self._latency: IO[str] | None = None
        self._lock = threading.Lock()
        atexit.register(self.dump)

    def job(self, sent: float | None = None, due: float | None = None) -> None:
        now = time.time()
        if self.first is None:
            self.first = now
            self.first_cpu = time.process_time()
        self.last = now
        self.count += 1
        bucket = int(now * 10)
        self.buckets[bucket] = self.buckets.get(bucket, 0) + 1
        if sent is not None:
            self._record_latency(f"{now - sent:.6f}\n")
        elif due is not None:
            self._record_latency(f"d {now - due:.6f}\n")

    def _record_latency(self, line: str) -> None:
        with self._lock:
            if self._latency is None:
                path = os.environ.get("BENCH_LATENCY_FILE")
                if not path:
                    return
                self._latency = open(path, "a", buffering=1)  # noqa: SIM115 - open until exit
            self._latency.write(line)

    def dump(self) -> None:
        directory = os.environ.get("BENCH_STATS_DIR")
        if not directory or self.first is None:
            return
        data = {
            "first": self.first,
            "first_cpu": self.first_cpu,
            "last": self.last,
            "count": self.count,
            "buckets": self.buckets,
        }
        Path(directory, f"{os.getpid()}.json").write_text(json.dumps(data))


STATS = JobStats()


def emit(**result: Any) -> None:
    print(RESULT_PREFIX + json.dumps(result), flush=True)


def parser(description: str) -> argparse.ArgumentParser:
    """The common command line; drivers add their own ``work`` options."""
    p = argparse.ArgumentParser(description=description)
    p.add_argument("--dsn", required=True)
    sub = p.add_subparsers(dest="command", required=True)
    sub.add_parser("setup")
    enqueue = sub.add_parser("enqueue")
    enqueue.add_argument("--producers", type=int, default=1)
    enqueue.add_argument("--count", type=int, required=True)
    bulk = sub.add_parser("bulk")
    bulk.add_argument("--count", type=int, required=True)
    bulk.add_argument("--chunk", type=int, default=0, help="jobs per call (0: all in one)")
    bulk.add_argument("--task", choices=TASKS, default="noop")
    bulk.add_argument(
        "--atomic",
        action="store_true",
        help="all jobs in one transaction (a drain's fill: workers must see them at once)",
    )
    latency = sub.add_parser("latency")
    latency.add_argument("--rate", type=float, required=True)
    latency.add_argument("--seconds", type=float, required=True)
    schedule = sub.add_parser("schedule")
    schedule.add_argument("--count", type=int, required=True)
    schedule.add_argument("--start-at", type=float, required=True, help="wall clock, seconds")
    schedule.add_argument("--over", type=float, required=True, help="seconds")
    work = sub.add_parser("work")
    work.add_argument("--concurrency", type=int, default=0, help="0: the driver's default")
    return p


def chunks(count: int, chunk: int) -> Iterator[int]:
    """Sizes of the calls that make up a bulk enqueue of ``count`` jobs."""
    size = chunk or count
    done = 0
    while done < count:
        n = min(size, count - done)
        yield n
        done += n


def due_times(count: int, start_at: float, over: float) -> list[float]:
    """Wall-clock due times of ``schedule``: evenly spaced from ``start_at`` over ``over``."""
    step = over / count if count else 0.0
    return [start_at + i * step for i in range(count)]


def due_batches(
    count: int, start_at: float, over: float, chunk: int = 5_000
) -> Iterator[list[float]]:
    """:func:`due_times` in batches of ``chunk`` (earliest first), for batch APIs."""
    dues = due_times(count, start_at, over)
    for i in range(0, count, chunk):
        yield dues[i : i + chunk]


def _send_times(rate: float, seconds: float) -> Iterator[float]:
    """``perf_counter()`` times at which to send: a steady ``rate`` for ``seconds``."""
    start = time.perf_counter()
    for i in range(1, int(rate * seconds) + 1):
        yield start + i / rate


def paced(rate: float, seconds: float) -> Iterator[None]:
    """Yields ``rate`` times a second for ``seconds`` (sleeping in between, catching up if
    late), stopping at ``seconds`` even if behind: a producer that cannot keep the rate sends
    fewer jobs, it does not run longer."""
    deadline = time.perf_counter() + seconds
    for next_at in _send_times(rate, seconds):
        yield
        now = time.perf_counter()
        if now >= deadline:
            return
        time.sleep(max(0.0, next_at - now))


def threaded_rate(
    producers: int, per_producer: int, make: Callable[[], Callable[[], object]]
) -> float:
    """Jobs/s of ``producers`` threads each calling their ``make()``-built enqueue function
    ``per_producer`` times, timed from a common start (connections opened before)."""
    barrier = threading.Barrier(producers + 1, timeout=PRODUCERS_READY_TIMEOUT)
    errors: list[BaseException] = []

    def producer() -> None:
        try:
            enqueue = make()
            enqueue()  # warm up: connection open, statements prepared
        except BaseException as exc:
            errors.append(exc)
            barrier.abort()
            raise
        barrier.wait()
        try:
            for _ in range(per_producer):
                enqueue()
        except BaseException as exc:
            errors.append(exc)
            raise

    threads = [threading.Thread(target=producer) for _ in range(producers)]
    for t in threads:
        t.start()
    barrier.wait()
    started = time.perf_counter()
    for t in threads:
        t.join()
    elapsed = time.perf_counter() - started
    if errors:
        raise RuntimeError(f"producer failed: {errors[0]!r}") from errors[0]
    return producers * per_producer / elapsed


async def async_rate(producers: int, per_producer: int, make: Callable[[], Any]) -> float:
    """The asyncio twin of :func:`threaded_rate`. ``await make()`` returns ``(enqueue, close)``
    for one producer with its own connection: ``await enqueue()`` writes one job in its own
    transaction, ``await close()`` releases the connection afterwards."""
    import asyncio

    producers_ = [await make() for _ in range(producers)]
    for enqueue, _ in producers_:
        await enqueue()  # warm up: connection open, statements prepared

    async def producer(enqueue: Callable[[], Any]) -> None:
        for _ in range(per_producer):
            await enqueue()

    started = time.perf_counter()
    await asyncio.gather(*(producer(enqueue) for enqueue, _ in producers_))
    elapsed = time.perf_counter() - started
    for _, close in producers_:
        await close()
    return producers * per_producer / elapsed


async def async_paced(rate: float, seconds: float) -> Any:
    """The asyncio twin of :func:`paced` (an async iterator)."""
    import asyncio

    deadline = time.perf_counter() + seconds
    for next_at in _send_times(rate, seconds):
        yield
        now = time.perf_counter()
        if now >= deadline:
            return
        await asyncio.sleep(max(0.0, next_at - now))
