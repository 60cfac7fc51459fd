"""The worker side of `benchmarks.latency`: two no-op tasks and, when asked, stage timestamps.

    PGQUEUE_DSN=... BENCH_STAGES_FILE=/tmp/stages pgq work benchmarks.latency_tasks:pgq

With ``BENCH_STAGES_FILE`` set, importing this module wraps three worker methods (before the
worker builds its services, so the listener's callback is the wrapped one) and writes one line
per event, wall clock (the producer runs in another process on the same machine):

* ``wake <t>``: the listener passed a notification on (``Fetcher.wake``);
* ``fetch <t>``: the fetcher's ``run_once`` began;
* ``claim <sent> <returned> <ids...>``: a ``claim_jobs`` statement and the jobs it took;
* ``start <t> <id>``: a handler began (written by the tasks themselves).
"""

from __future__ import annotations

import os
import threading
import time
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


def _instrument() -> None:
    from pgqueue.worker.db import WorkerDB
    from pgqueue.worker.fetcher import Fetcher

    wake, run_once, fetch = Fetcher.wake, Fetcher.run_once, WorkerDB.fetch

    def timed_wake(self: Fetcher) -> None:
        _write(f"wake {time.time():.6f}")
        wake(self)

    async def timed_run_once(self: Fetcher) -> None:
        _write(f"fetch {time.time():.6f}")
        await run_once(self)

    async def timed_fetch(self: WorkerDB, name: str, *args: Any, **kwargs: Any) -> Any:
        if name != "claim_jobs":
            return await fetch(self, name, *args, **kwargs)
        sent = time.time()
        rows = await fetch(self, name, *args, **kwargs)
        ids = " ".join(str(row[0]) for row in rows)
        _write(f"claim {sent:.6f} {time.time():.6f} {ids}")
        return rows

    Fetcher.wake = timed_wake  # type: ignore[method-assign,assignment]
    Fetcher.run_once = timed_run_once  # type: ignore[method-assign]
    WorkerDB.fetch = timed_fetch  # type: ignore[method-assign]


if os.environ.get("BENCH_STAGES_FILE"):
    _instrument()
