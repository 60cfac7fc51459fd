"""Hooks for watching a worker from the inside (metrics, tracing, tests).

Subclass :class:`WorkerObserver`, override what you need, and pass instances to
``Worker(..., observers=[...])``. Hooks run on the worker's event loop and must be quick and
must not raise (an exception is logged and otherwise ignored).

The worker reports whole batches (``jobs_started``, ``jobs_written``: one call per claim or
write, not per job); their default implementations call the per-job hooks, so an observer
overrides whichever level suits it.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass

from pgqueue.handler.job_context import ClaimedJob
from pgqueue.rules.log_actions import Action, fields
from pgqueue.worker.outcome import Outcome

log = logging.getLogger("pgqueue.worker.observer")

#: What the database made of an outcome: the job succeeded, was rescheduled, dead-lettered,
#: cancelled, or the write was stale (the lease had been lost, so it changed nothing).
Written = str


class WorkerObserver:
    def job_started(self, job: ClaimedJob) -> None:
        """A job was claimed and its handler is starting."""

    def job_written(self, outcome: Outcome, written: Written) -> None:
        """An attempt's outcome reached the database (``written``: succeeded, retry, dead,
        cancelled, parked (a durable sleep or wait), stale)."""

    def jobs_started(self, jobs: list[ClaimedJob]) -> None:
        """One claim's jobs (calls :meth:`job_started` for each unless overridden)."""
        for job in jobs:
            self.job_started(job)

    def jobs_written(self, written: list[tuple[Outcome, Written]]) -> None:
        """One write's outcomes (calls :meth:`job_written` for each unless overridden)."""
        for outcome, what in written:
            self.job_written(outcome, what)

    def lease_lost(self, job: ClaimedJob) -> None:
        """A heartbeat found that this worker no longer holds the job."""

    def jobs_reaped(self, count: int) -> None:
        """This worker's reaper recovered ``count`` jobs with expired leases."""

    def db_error(self, service: str) -> None:
        """A service hit a database error (it will retry)."""

    def maintained(self, action: str, relation: str, reclaimed: int) -> None:
        """The maintenance service ran ``action`` (vacuum, reindex, drop: a leftover of a failed
        REINDEX; gave_up: a lock or statement timeout) on ``relation``, reclaiming
        ``reclaimed`` bytes."""

    def loop_stalled(self, seconds: float) -> None:
        """The event loop has not run for ``seconds`` (a handler blocks it); called once per
        stall, from the watchdog's thread (see :mod:`pgqueue.worker.watchdog`)."""


@dataclass
class WorkerStats(WorkerObserver):
    """Running totals, reported to pgqueue.workers with every heartbeat."""

    claimed: int = 0
    succeeded: int = 0
    retried: int = 0
    dead: int = 0
    cancelled: int = 0
    lost: int = 0
    stale: int = 0
    reaped: int = 0
    db_errors: int = 0
    loop_stalls: int = 0

    def job_started(self, job: ClaimedJob) -> None:
        self.claimed += 1

    def jobs_started(self, jobs: list[ClaimedJob]) -> None:
        self.claimed += len(jobs)

    def job_written(self, outcome: Outcome, written: Written) -> None:
        if written == "succeeded":
            self.succeeded += 1
        elif written == "retry":
            self.retried += 1
        elif written == "dead":
            self.dead += 1
        elif written == "cancelled":
            self.cancelled += 1
        elif written != "parked":  # a park is not a finished attempt
            self.stale += 1

    def lease_lost(self, job: ClaimedJob) -> None:
        self.lost += 1

    def jobs_reaped(self, count: int) -> None:
        self.reaped += count

    def db_error(self, service: str) -> None:
        self.db_errors += 1

    def loop_stalled(self, seconds: float) -> None:
        self.loop_stalls += 1

    def as_params(self) -> dict[str, int]:
        return {
            "succeeded": self.succeeded,
            "retried": self.retried,
            "dead": self.dead,
            "cancelled": self.cancelled,
            "lost": self.lost,
        }


class Observers(WorkerObserver):
    """Fans every hook out to several observers, isolating their failures."""

    def __init__(self, observers: list[WorkerObserver]) -> None:
        self.observers = observers

    def _each(self, name: str, *args: object) -> None:
        for observer in self.observers:
            try:
                getattr(observer, name)(*args)
            except Exception:
                log.exception(
                    "observer hook failed",
                    extra=fields(Action.OBSERVER_FAILED, hook=name, observer=repr(observer)),
                )

    def job_started(self, job: ClaimedJob) -> None:
        self._each("job_started", job)

    def job_written(self, outcome: Outcome, written: Written) -> None:
        self._each("job_written", outcome, written)

    def jobs_started(self, jobs: list[ClaimedJob]) -> None:
        if jobs:
            self._each("jobs_started", jobs)

    def jobs_written(self, written: list[tuple[Outcome, Written]]) -> None:
        if written:
            self._each("jobs_written", written)

    def lease_lost(self, job: ClaimedJob) -> None:
        self._each("lease_lost", job)

    def jobs_reaped(self, count: int) -> None:
        self._each("jobs_reaped", count)

    def db_error(self, service: str) -> None:
        self._each("db_error", service)

    def maintained(self, action: str, relation: str, reclaimed: int) -> None:
        self._each("maintained", action, relation, reclaimed)

    def loop_stalled(self, seconds: float) -> None:
        self._each("loop_stalled", seconds)
