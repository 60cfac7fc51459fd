"""The reaper service: runs ``pgqueue.reap()`` every few seconds.

The SQL function does the work (expired leases back to the queue with backoff, or to the dead
letters), so the same recovery runs from any worker, from ``pgq reaper``, or from pg_cron.
"""

from __future__ import annotations

from pgqueue.worker.service import Service
from pgqueue.worker.store import WorkerDB

REAP_BATCH = 1000


class Reaper(Service):
    name = "reaper"

    def __init__(self, db: WorkerDB, *, every: float) -> None:
        super().__init__()
        self.db = db
        self.every = every

    def interval(self) -> float:
        return self.every

    async def run_once(self) -> None:
        while True:
            rows = await self.db.fetch("reap", {"max_jobs": REAP_BATCH})
            recovered = int(rows[0][0])
            if recovered:
                self.observer.jobs_reaped(recovered)
                self.log.warning("recovered jobs with expired leases count=%s", recovered)
            if recovered < REAP_BATCH:
                return
