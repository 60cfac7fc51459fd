"""What every driver does, the same way for every system (standard library only).

A driver is a small command line with these subcommands, all taking ``--dsn``:

``setup``
    install the system's schema in an empty database.
``enqueue --producers P --count N``
    N jobs, one per transaction, from P concurrent producers; prints the rate.
``bulk --count N [--chunk C] [--atomic]``
    N jobs through the system's batch API (C per call; default all in one call); prints the rate.
    ``--atomic``: in one transaction (one call of a batch API already is).
``latency --rate R --seconds S``
    enqueues one job per transaction at a steady R jobs/s, each carrying the producer's clock.
``work``
    a worker process that runs until SIGTERM. Its no-op handler counts jobs; at exit it writes
    ``{"first", "last", "count"}`` (wall-clock times of the first and last job it ran) to
    ``$BENCH_STATS_DIR/<pid>.json``, and jobs carrying ``sent`` append ``now - sent`` (seconds)
    to ``$BENCH_LATENCY_FILE``.

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
PRODUCERS_READY_TIMEOUT = 60.0


class JobStats:
    """Per-process counters the handlers update: cheap enough to not matter per job."""

    def __init__(self) -> None:
        self.first: float | None = None
        self.last = 0.0
        self.count = 0
        self._latency: IO[str] | None = None
        self._lock = threading.Lock()
        atexit.register(self.dump)

    def job(self, sent: float | None = None) -> None:
        now = time.time()
        if self.first is None:
            self.first = now
        self.last = now
        self.count += 1
        if sent is not None:
            self._record_latency(now - sent)

    def _record_latency(self, delay: float) -> None:
        with self._lock:
            if self._latency is None:
                path = os.environ.get("BENCH_LATENCY_FILE")
                if not path:
                    return
                self._latency = open(path, "a", buffering=1)  # noqa: SIM115 - open until exit
            self._latency.write(f"{delay:.6f}\n")

    def dump(self) -> None:
        directory = os.environ.get("BENCH_STATS_DIR")
        if not directory or self.first is None:
            return
        data = {"first": self.first, "last": self.last, "count": self.count}
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
    bulk.add_argument(
        "--atomic",
        action="store_true",
        help="all jobs in one transaction (a drain's fill: workers must see them at once)",
    )
    latency = sub.add_parser("latency")
    latency.add_argument("--rate", type=float, required=True)
    latency.add_argument("--seconds", type=float, required=True)
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


def _send_times(rate: float, seconds: float) -> Iterator[float]:
    """``perf_counter()`` times at which to send: a steady ``rate`` for ``seconds``."""
    start = time.perf_counter()
    for i in range(1, int(rate * seconds) + 1):
        yield start + i / rate


def paced(rate: float, seconds: float) -> Iterator[None]:
    """Yields ``rate`` times a second for ``seconds`` (sleeping in between, catching up if
    late)."""
    for next_at in _send_times(rate, seconds):
        yield
        time.sleep(max(0.0, next_at - time.perf_counter()))


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

    for next_at in _send_times(rate, seconds):
        yield
        await asyncio.sleep(max(0.0, next_at - time.perf_counter()))
