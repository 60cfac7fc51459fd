"""The completer: writes attempt outcomes in batches, fenced by lease token.

Outcomes accumulate while a write is in flight and go out together in the next one, so under
load a batch holds everything that finished during one round trip and the number of statements
per job falls as throughput rises; when idle, an outcome is written at once. A write that fails
(database down) is kept and retried: an outcome is never dropped, and a write that arrives after
the lease was lost changes nothing (the token no longer matches) and is logged as stale.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Callable

from pgqueue.worker.db import WorkerDB, int_array
from pgqueue.worker.outcome import Outcome
from pgqueue.worker.service import Service

MAX_BATCH = 1000


def _by_id(outcome: Outcome) -> int:
    return outcome.job.id


# What fail_jobs decided, in the words of the logs.
_VERBS = {"retry": "rescheduled", "dead": "dead-lettered", "cancelled": "cancelled"}
# Outcome kinds a circuit breaker counts as failures.
_FAILURES = ("error", "fail", "no_retry")


class Completer(Service):
    name = "completer"

    def __init__(self, db: WorkerDB, breaker_tasks: frozenset[str] = frozenset()) -> None:
        super().__init__()
        self.db = db
        # Tasks with a circuit breaker: their outcomes are also counted in
        # pgqueue.circuit_breakers (one more statement per batch that has any).
        self.breaker_tasks = breaker_tasks
        #: Called with the task's name when its circuit breaker opens (the worker hands back
        #: the task's prefetched jobs, which were claimed before the trip).
        self.on_breaker_open: Callable[[str], None] | None = None
        self.pending: list[Outcome] = []
        self.in_flight: list[Outcome] = []
        self._write_lock: asyncio.Lock | None = None

    def interval(self) -> float:
        return 60.0  # woken by submit(); the interval is only a safety net

    def submit(self, outcome: Outcome) -> None:
        self.pending.append(outcome)
        self.wake()

    def held(self) -> list[tuple[int, int]]:
        """Jobs whose outcome is not written yet: their leases must still be extended."""
        return [(o.job.id, o.job.lease_token) for o in (*self.in_flight, *self.pending)]

    def idle(self) -> bool:
        return not self.pending and not self.in_flight

    async def run_once(self) -> None:
        # One writer at a time: shutdown's final flush must wait for a write in flight (which
        # it would otherwise miss, and which cancelling the service would then abandon).
        if self._write_lock is None:
            self._write_lock = asyncio.Lock()
        async with self._write_lock:
            await self._write_pending()

    async def _write_pending(self) -> None:
        while self.pending:
            batch, self.pending = self.pending[:MAX_BATCH], self.pending[MAX_BATCH:]
            self.in_flight = batch
            try:
                await self._write(batch)
            except BaseException:
                self.pending = batch + self.pending
                raise
            finally:
                self.in_flight = []

    async def _write(self, batch: list[Outcome]) -> None:
        # Sorted by id: every statement that locks several jobs takes them in the same order,
        # so a heartbeat and a write of overlapping jobs cannot deadlock.
        batch = sorted(batch, key=_by_id)
        acks = [o for o in batch if o.kind == "ack"]
        others = [o for o in batch if o.kind != "ack"]
        breaker: list[tuple[Outcome, bool]] = []
        report: list[tuple[Outcome, str]] = []
        if acks:
            rows = await self.db.fetch(
                "ack_jobs",
                {
                    "ids": int_array([o.job.id for o in acks]),
                    "tokens": int_array([o.job.lease_token for o in acks]),
                    # NULL when no job keeps a result (most batches): unnest pads with NULLs.
                    "results": (
                        [o.result for o in acks]
                        if any(o.result is not None for o in acks)
                        else None
                    ),
                },
            )
            # A job cancelled while its handler ran is recorded as cancelled by ack_jobs.
            done: dict[int, bool] = {row[0]: row[1] for row in rows}
            for outcome in acks:
                cancelled = done.get(outcome.job.id)
                if cancelled is None:
                    report.append((outcome, "stale"))
                else:
                    report.append((outcome, "cancelled" if cancelled else "succeeded"))
                    if not cancelled and outcome.job.task in self.breaker_tasks:
                        breaker.append((outcome, False))
        if others:
            rows = await self.db.fetch(
                "fail_jobs",
                {
                    "ids": [o.job.id for o in others],
                    "tokens": [o.job.lease_token for o in others],
                    "kinds": [o.kind for o in others],
                    "delays": [o.delay for o in others],
                    "errors": [o.error for o in others],
                },
            )
            decided: dict[int, str] = {row[0]: row[1] for row in rows}
            for outcome in others:
                written = decided.get(outcome.job.id, "stale")
                report.append((outcome, written))
                if (
                    outcome.job.task in self.breaker_tasks
                    and outcome.kind in _FAILURES
                    and written in ("retry", "dead")
                ):
                    breaker.append((outcome, True))
        self.observer.jobs_written(report)
        if self.log.isEnabledFor(logging.INFO) or any(w == "stale" for _, w in report):
            for outcome, written in report:
                self._log_written(outcome, written)
        if breaker:
            await self._record_breakers(breaker)

    async def _record_breakers(self, outcomes: list[tuple[Outcome, bool]]) -> None:
        rows = await self.db.fetch(
            "record_breaker_outcomes",
            {
                "tasks": [o.job.task for o, _ in outcomes],
                "ids": [o.job.id for o, _ in outcomes],
                "tokens": [o.job.lease_token for o, _ in outcomes],
                "failed": [failed for _, failed in outcomes],
            },
        )
        for task, before, after in rows:
            if before != after:
                self.log.warning("circuit breaker %s task=%s (was %s)", after, task, before)
                if after == "open" and self.on_breaker_open is not None:
                    self.on_breaker_open(task)

    def _log_written(self, outcome: Outcome, written: str) -> None:
        job = outcome.job
        if written == "stale":
            self.log.warning(
                "stale %s ignored: lease no longer held job_id=%s task=%s attempt=%s "
                "lease_token=%s",
                outcome.kind,
                job.id,
                job.task,
                job.attempt,
                job.lease_token,
            )
        elif written == "succeeded":
            self.log.info(
                "job succeeded job_id=%s task=%s queue=%s attempt=%s duration=%.3fs",
                job.id,
                job.task,
                job.queue,
                job.attempt,
                outcome.duration,
            )
        else:
            self.log.info(
                "job %s job_id=%s task=%s queue=%s attempt=%s outcome=%s delay=%.3fs",
                _VERBS.get(written, written),
                job.id,
                job.task,
                job.queue,
                job.attempt,
                outcome.kind,
                outcome.delay,
            )
