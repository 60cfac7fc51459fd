"""The reaper service: runs ``pgqueue.reap()`` every few seconds.

The SQL function does the work (expired leases back to the queue with backoff, or to the dead
letters), so the same recovery runs from any worker, from ``pgq reaper`` (this same service,
supervised on its own: pgqueue/cli/worker_cmds.py), or from pg_cron.
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import signal

from pgqueue.db.startup import check_database_async
from pgqueue.errors import DatabaseUnavailableError
from pgqueue.rules.log_actions import Action, Seconds, fields
from pgqueue.worker.observer import WorkerObserver
from pgqueue.worker.service import Outage, Service
from pgqueue.worker.store import WorkerDB, WorkerStore, application_name
from pgqueue.worker.supervisor import Supervisor

REAP_BATCH = 1000
# What pg_stat_activity shows after "pgqueue reaper" for a standalone reaper: its process.
_ID = f"pid-{os.getpid()}"


class Reaper(Service):
    name = "reaper"

    def __init__(self, store: WorkerStore, *, every: float, batch: int = REAP_BATCH) -> None:
        super().__init__()
        self.store = store
        self.every = every
        self.batch = batch
        #: Jobs recovered since start.
        self.recovered = 0

    def interval(self) -> float:
        return self.every

    async def run_once(self) -> None:
        await self.reap()

    async def reap(self) -> int:
        """One pass: batches of ``batch`` until a batch comes back short. How many jobs were
        recovered."""
        # The reaper's queries load with its first pass, once the worker's first claim is done.
        from pgqueue.db import admin

        total = 0
        while True:
            recovered = await self.store.drive(admin.reap(self.batch))
            if recovered:
                total += recovered
                self.recovered += recovered
                self.observer.jobs_reaped(recovered)
                self.log.warning(
                    "recovered jobs with expired leases",
                    extra=fields(Action.REAPER_RECOVERED, count=recovered),
                )
            if recovered < self.batch:
                return total


async def reap_once(dsn: str) -> int:
    """``pgq reaper --once``: one pass; how many jobs were recovered."""
    await check_database_async(dsn)
    store = WorkerDB(dsn, size=1, application_name=application_name(dsn, "reaper", _ID))
    await store.open()
    try:
        return await Reaper(store, every=0).reap()
    finally:
        await store.close()


async def reap_forever(dsn: str, *, every: float) -> None:
    """``pgq reaper``: the worker's reaper service on its own, supervised as in a worker (the
    same backoff through outages), until SIGTERM or SIGINT. A DSN the server rejects for good
    or a schema at the wrong revision ends it at once; an outage is waited out."""
    with contextlib.suppress(DatabaseUnavailableError):
        await check_database_async(dsn)
    store = WorkerDB(dsn, size=1, application_name=application_name(dsn, "reaper", _ID))
    supervisor = Supervisor(WorkerObserver())
    reaper = supervisor.add(Reaper(store, every=every), Outage(store.explain))
    stopped = asyncio.Event()
    loop = asyncio.get_running_loop()
    for signum in (signal.SIGTERM, signal.SIGINT):
        loop.add_signal_handler(signum, stopped.set)
    await store.open()
    reaper.log.info("reaper started", extra=fields(Action.REAPER_STARTED, interval=Seconds(every)))
    try:
        supervisor.start()
        await stopped.wait()
    finally:
        await supervisor.stop()
        await store.close()
        for signum in (signal.SIGTERM, signal.SIGINT):
            loop.remove_signal_handler(signum)
    reaper.log.info(
        "reaper stopped", extra=fields(Action.REAPER_STOPPED, recovered=reaper.recovered)
    )
