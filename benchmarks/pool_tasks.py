"""Tasks the pool benchmark runs: `pgq work benchmarks.pool_tasks:pgq --pool thread|process`."""

from __future__ import annotations

import time

from pgqueue import PgQueue

pgq = PgQueue()


@pgq.task(name="pools.noop")
def noop() -> None:
    return None


@pgq.task(name="pools.sleep")
def sleep(seconds: float) -> None:
    time.sleep(seconds)
