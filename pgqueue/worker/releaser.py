"""The releaser: hands claimed jobs back (``ready``, attempt not burned), fenced by lease token.

Two things hand jobs back. A graceful shutdown (:meth:`Releaser.drain`): prefetched jobs that
never started go back at once, running jobs get the grace period, and those still running then
are stopped and go back. A circuit breaker that opens (:meth:`Releaser.breaker_opened`, the
completer's channel to it): its task's prefetched jobs, claimed before the trip, go back rather
than run against a dependency known to be failing.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Awaitable, Callable
from typing import Any

from pgqueue.handler.job_context import ClaimedJob
from pgqueue.rules.log_actions import Action, Seconds, fields
from pgqueue.worker.completer import Completer
from pgqueue.worker.executor import Executor
from pgqueue.worker.service import RetryDelay
from pgqueue.worker.store import TRANSIENT_ERRORS, WorkerStore

log = logging.getLogger("pgqueue.worker")

# Shutdown's final writes (outcomes, releases) get this long to reach the database.
FINAL_WRITE_TIMEOUT = 10.0


async def final_write(
    write: Callable[[], Awaitable[Any]], what: str, timeout: float = FINAL_WRITE_TIMEOUT
) -> None:
    """Run ``write`` until it gets through the database, for up to ``timeout`` seconds; past
    that, log that the leases will expire instead (the reaper recovers the jobs)."""
    loop = asyncio.get_running_loop()
    deadline = loop.time() + timeout
    delay = RetryDelay(cap=1.0)
    while True:
        try:
            await write()
            return
        except TRANSIENT_ERRORS as exc:
            if loop.time() > deadline:
                log.error(
                    "could not write %s before exiting (leases will expire and the "
                    "reaper will recover the jobs)",
                    what,
                    extra=fields(Action.WORKER_RELEASE_FAILED, error=str(exc)[:200]),
                )
                return
            await asyncio.sleep(delay.next())


class Releaser:
    def __init__(self, store: WorkerStore, executor: Executor, completer: Completer) -> None:
        self.store = store
        self.executor = executor
        self.completer = completer
        self._background: set[asyncio.Task[None]] = set()

    async def release(self, jobs: list[ClaimedJob], why: str) -> None:
        """Hand ``jobs`` back, fenced by their lease tokens (a job whose lease moved on stays
        where it is)."""
        if not jobs:
            return
        rows: list[Any] = []

        async def release() -> None:
            rows.extend(
                await self.store.fetch(
                    "release_jobs",
                    {"ids": [j.id for j in jobs], "tokens": [j.lease_token for j in jobs]},
                )
            )

        await final_write(release, "released jobs")
        log.info(
            "released %s jobs",
            why,
            extra=fields(
                Action.WORKER_RELEASED, count=len(rows), ids=",".join(str(r[0]) for r in rows)
            ),
        )
        released = {row[0] for row in rows}
        for job in jobs:
            if job.id in released:
                log.info(
                    "job released",
                    extra=fields(
                        Action.JOB_RELEASED,
                        job_id=job.id,
                        task=job.task,
                        queue=job.queue,
                        attempt=job.attempt,
                    ),
                )

    def breaker_opened(self, task: str) -> None:
        """A breaker opened: its task's prefetched jobs (claimed before the trip) go back."""
        jobs = self.executor.release_waiting(task)
        if jobs:
            released = asyncio.get_running_loop().create_task(
                self.release(jobs, "prefetched (circuit breaker open)")
            )
            self._background.add(released)
            released.add_done_callback(self._background.discard)

    async def drain(self, grace: float) -> None:
        """Graceful shutdown: wait for running jobs, then hand back what did not finish."""
        executor = self.executor
        # Prefetched jobs that never started go back first: no reason to run them now.
        never_started = executor.release_waiting()
        if executor.running:
            log.info(
                "draining",
                extra=fields(
                    Action.WORKER_DRAINING, running=len(executor.running), grace=Seconds(grace)
                ),
            )
        finished = await executor.wait_idle(grace)
        unfinished = [] if finished else executor.stop_all("shutdown")
        if unfinished:
            # Let cancelled async handlers unwind; sync threads keep running but are released.
            await executor.wait_idle(min(1.0, grace) or 0.1)
        await final_write(self.completer.run_once, "outcomes")
        await self.release([*never_started, *(r.job for r in unfinished)], "unfinished")
