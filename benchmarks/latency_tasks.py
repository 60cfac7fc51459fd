"""Both sides of `benchmarks.latency`: the worker's two no-op tasks with stage timestamps, and
the producer; and the sleeping tasks of `benchmarks.sleep_jobs`.

    PGQUEUE_DSN=... BENCH_STAGES_FILE=/tmp/stages pgq work benchmarks.latency_tasks:pgq
    python -m benchmarks.latency_tasks DSN TASK JOBS RATE OUT
    python -m benchmarks.latency_tasks steady DSN TASK RATE SECONDS START_AT OUT
    python -m benchmarks.latency_tasks raw DSN RATE SECONDS START_AT OUT

The module imports nothing of the benchmarks package, so `benchmarks.latency` can run a copy of
it against another checkout's pgqueue (``--tree``).

With ``BENCH_STAGES_FILE`` set, importing this module wraps three worker methods (before the
worker builds its services, so the listener's callback is the wrapped one) and writes one line
per event, wall clock (the producer runs in another process on the same machine):

* ``wake <t>``: the listener passed a notification on (``Fetcher.wake``);
* ``fetch <t>``: the fetcher's ``run_once`` began;
* ``claim <sent> <rows> <ids...>``: a ``claim_jobs`` statement: sent, its rows back (before
  its COMMIT returned, for an idle worker's claim), the jobs it took;
* ``start <t> <id>``: a handler began (written by the tasks themselves).
"""

from __future__ import annotations

import asyncio
import atexit
import json
import os
import sys
import threading
import time
from collections.abc import Callable
from typing import IO, Any

from pgqueue import PgQueue, current_job

pgq = PgQueue()
_lock = threading.Lock()
_out: list[IO[str]] = []  # the stages file, opened by the first event


def _write(line: str) -> None:
    path = os.environ.get("BENCH_STAGES_FILE")
    if not path:
        return
    with _lock:
        if not _out:
            _out.append(open(path, "a", buffering=1))  # noqa: SIM115 - open until exit
        _out[0].write(line + "\n")


@pgq.task(name="latency.async")
async def async_job() -> None:
    _write(f"start {time.time():.6f} {current_job().id}")


@pgq.task(name="latency.sync")
def sync_job() -> None:
    _write(f"start {time.time():.6f} {current_job().id}")


#: Per batch of sleeping jobs: [first started, last ended, count, seconds inside the handlers],
#: written as ``span`` lines
#: at exit (`benchmarks.sleep_jobs` times a drain from inside, as `benchmarks.compare` does).
_spans: dict[int, list[float]] = {}


def _count(batch: int, started: float) -> None:
    with _lock:
        span = _spans.setdefault(batch, [started, 0.0, 0, 0.0])
        span[1] = time.time()
        span[2] += 1
        span[3] += span[1] - started


@atexit.register
def _write_spans() -> None:
    for batch, (first, last, count, inside) in _spans.items():
        _write(f"span {first:.6f} {last:.6f} {int(count)} {batch} {inside:.6f}")


@pgq.task(name="latency.sleep_sync")
def sleep_sync(seconds: float, batch: int = 0) -> None:
    started = time.time()
    time.sleep(seconds)
    _count(batch, started)


@pgq.task(name="latency.sleep_async")
async def sleep_async(seconds: float, batch: int = 0) -> None:
    started = time.time()
    await asyncio.sleep(seconds)
    _count(batch, started)


def _instrument() -> None:
    from pgqueue.worker.fetcher import Fetcher
    from pgqueue.worker.store import WorkerDB

    wake, run_once, fetch = Fetcher.wake, Fetcher.run_once, WorkerDB.fetch
    early: Any = getattr(WorkerDB, "before_commit", None)  # a base without it: None

    def timed_wake(self: Fetcher) -> None:
        _write(f"wake {time.time():.6f}")
        wake(self)

    async def timed_run_once(self: Fetcher) -> None:
        _write(f"fetch {time.time():.6f}")
        await run_once(self)

    def claimed(sent: float, rows: list[Any]) -> None:
        ids = " ".join(str(row[0]) for row in rows)
        _write(f"claim {sent:.6f} {time.time():.6f} {ids}")

    async def timed_fetch(self: WorkerDB, name: str, *args: Any, **kwargs: Any) -> Any:
        if name != "claim_jobs":
            return await fetch(self, name, *args, **kwargs)
        sent = time.time()
        rows = await fetch(self, name, *args, **kwargs)
        claimed(sent, rows)
        return rows

    async def timed_early(self: WorkerDB, name: str, *args: Any, **kwargs: Any) -> Any:
        sent = time.time()
        rows, *rest = await early(self, name, *args, **kwargs)
        if name == "claim_jobs":
            claimed(sent, rows)
        return (rows, *rest)

    Fetcher.wake = timed_wake  # type: ignore[method-assign,assignment]
    Fetcher.run_once = timed_run_once  # type: ignore[method-assign]
    WorkerDB.fetch = timed_fetch  # type: ignore[method-assign]
    if early is not None:
        WorkerDB.before_commit = timed_early  # type: ignore[method-assign]


if os.environ.get("BENCH_STAGES_FILE"):
    _instrument()


def produce(dsn: str, task: str, jobs: int, rate: float) -> dict[int, tuple[float, float]]:
    """Job id -> (sent, the enqueue returned), one job per transaction at ``rate`` jobs/s."""
    sent: dict[int, tuple[float, float]] = {}
    with PgQueue(dsn, pool_size=1) as app:
        app.enqueue_many([])  # open the pool before the clock starts
        start = time.monotonic()
        for i in range(jobs):
            delay = start + i / rate - time.monotonic()
            if delay > 0:
                time.sleep(delay)
            t0 = time.time()
            job_id = app.enqueue(task, {})
            sent[int(job_id)] = (t0, time.time())
    return sent


def _paced(
    enqueue: Callable[[], int], rate: float, seconds: float, start_at: float
) -> list[tuple[int, float, float]]:
    """``enqueue`` at ``rate`` a second for ``seconds`` from ``start_at`` (wall clock: the
    producers of `benchmarks.steady` start together, whenever their imports end), catching up
    if late; one that falls behind sends fewer jobs, it does not run longer. [job id, sent,
    returned] per call."""
    sent: list[tuple[int, float, float]] = []
    time.sleep(max(0.0, start_at - time.time()))
    start = time.monotonic() - max(0.0, time.time() - start_at)
    deadline = start + seconds
    for i in range(int(rate * seconds)):
        now = time.monotonic()
        if now >= deadline:
            break
        delay = start + i / rate - now
        if delay > 0:
            time.sleep(delay)
        t0 = time.time()
        job_id = enqueue()
        sent.append((job_id, t0, time.time()))
    return sent


def _threads() -> int:
    """Producer threads per process (``BENCH_PRODUCER_THREADS``, default 1), sharing its rate."""
    return int(os.environ.get("BENCH_PRODUCER_THREADS", "1"))


def _in_threads(
    make: Callable[[], Callable[[], int]], rate: float, seconds: float, start_at: float
) -> list[tuple[int, float, float]]:
    """_paced in each of _threads() threads, at an even share of ``rate`` each, staggered
    over one period so that the calls arrive spread out, not in waves."""
    threads = _threads()
    sent: list[tuple[int, float, float]] = []
    share = rate / threads

    def run(n: int) -> None:
        sent.extend(_paced(make(), share, seconds, start_at + n / rate))

    running = [threading.Thread(target=run, args=(n,)) for n in range(threads)]
    for thread in running:
        thread.start()
    for thread in running:
        thread.join()
    return sent


def produce_steady(
    dsn: str, task: str, rate: float, seconds: float, start_at: float
) -> list[tuple[int, float, float]]:
    """One job per transaction with ``PgQueue.enqueue`` (see _paced), from _threads() threads
    sharing one client (``BENCH_GROUP_COMMIT=off``: without group commit)."""
    options: dict[str, Any] = {}
    if os.environ.get("BENCH_GROUP_COMMIT"):
        options["group_commit"] = os.environ["BENCH_GROUP_COMMIT"] == "on"
    with PgQueue(dsn, pool_size=_threads(), **options) as app:
        app.enqueue_many([])  # open the pool before the clock starts
        return _in_threads(lambda: lambda: int(app.enqueue(task, {})), rate, seconds, start_at)


def produce_raw(
    dsn: str, rate: float, seconds: float, start_at: float
) -> list[tuple[int, float, float]]:
    """A one-row INSERT per transaction into ``raw_steady`` (see _paced): the ceiling; a
    connection per thread (_threads())."""
    import psycopg

    insert = "INSERT INTO raw_steady (args) VALUES ('{}') RETURNING id"
    opened: list[psycopg.Connection[Any]] = []

    def make() -> Callable[[], int]:
        conn = psycopg.connect(dsn, autocommit=True)
        opened.append(conn)

        def enqueue() -> int:
            row = conn.execute(insert, prepare=True).fetchone()
            assert row is not None
            return int(row[0])

        return enqueue

    try:
        return _in_threads(make, rate, seconds, start_at)
    finally:
        for conn in opened:
            conn.close()


if __name__ == "__main__":
    if sys.argv[1] == "steady":
        dsn, task, rate, seconds, start_at, out = sys.argv[2:]
        result: Any = produce_steady(dsn, task, float(rate), float(seconds), float(start_at))
    elif sys.argv[1] == "raw":
        dsn, rate, seconds, start_at, out = sys.argv[2:]
        result = produce_raw(dsn, float(rate), float(seconds), float(start_at))
    else:
        dsn, task, jobs, rate, out = sys.argv[1:]
        result = produce(dsn, task, int(jobs), float(rate))
    with open(out, "w") as f:
        json.dump(result, f)
