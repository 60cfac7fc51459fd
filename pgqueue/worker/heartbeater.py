"""The heartbeater: one statement per interval extends the leases of every job held here.

A job missing from the statement's result was lost: reaped after a stall, or re-claimed. Its
handler is told to stop, and nothing this worker writes about it later can take effect (the
fencing token moved on). A job flagged ``cancel_requested`` has its handler stopped too. A job
whose row another transaction had locked (this worker's own ack of it, most often) is in the
result but not extended: the statement never waits for a row, so it cannot deadlock with the
writes of the jobs it extends. Such a job is tried again a second later, alone (with any other
job skipped with it), and every second after until its row is free: a row an operator's
transaction keeps locked for longer than the lease would otherwise wait up to a whole interval
once it is free, while its lease may already have run out and the reaper may take it first.

A lost lease is reported once: a sync handler cannot be interrupted, so its job stays held
here until the thread returns, and without remembering the loss every later beat would count
it again (and stop the handler again). Lost leases are no longer sent: there is nothing left
to extend.
"""

from __future__ import annotations

import time
from datetime import timedelta

from pgqueue.handler.job_context import JobContext
from pgqueue.rules.log_actions import Action, fields
from pgqueue.worker.array_params import int_array
from pgqueue.worker.counts import JobCounts
from pgqueue.worker.holdings import Holdings
from pgqueue.worker.leases import LeaseClock
from pgqueue.worker.observer import WorkerStats
from pgqueue.worker.service import Service
from pgqueue.worker.store import TRANSIENT_ERRORS, WorkerStore

#: Seconds after a beat that skipped a locked row before that row is tried again (alone).
SKIPPED_AGAIN_AFTER = 1.0


class Heartbeater(Service):
    name = "heartbeater"

    def __init__(
        self,
        store: WorkerStore,
        holdings: Holdings,
        stats: WorkerStats,
        *,
        worker_id: str,
        lease: float,
        counts: JobCounts | None = None,
        leases: LeaseClock | None = None,
    ) -> None:
        super().__init__()
        self.store = store
        self.holdings = holdings
        self.stats = stats
        self.worker_id = worker_id
        self.lease = lease
        self.counts = counts or JobCounts()
        self.leases = leases or LeaseClock(lease)
        #: (id, token) of leases found lost whose handler has not returned yet.
        self.lost: set[tuple[int, int]] = set()
        #: (id, token) of leases the last beat found held but could not extend (their row was
        #: locked): tried again, alone, SKIPPED_AGAIN_AFTER seconds later.
        self.skipped: set[tuple[int, int]] = set()
        #: When the next beat of every lease is due (monotonic): beats of skipped leases alone
        #: come in between.
        self.full_due = 0.0

    def beat_all_now(self) -> None:
        """Beat at once, every lease (not only skipped ones): the listener has just started
        listening, and a cancel sent meanwhile is read from every held job's row."""
        self.full_due = 0.0
        self.wake()

    def interval(self) -> float:
        every = self.lease / 3
        return min(every, SKIPPED_AGAIN_AFTER) if self.skipped else every

    async def run_once(self, timeout: float = 30.0, *, full: bool = False) -> None:
        held = self.holdings.leases()
        if self.lost:
            # Forget losses whose handler has returned (their pair is held nowhere any more).
            self.lost.intersection_update(held)
            held = [pair for pair in held if pair not in self.lost]
        sent_at = time.monotonic()
        again = bool(self.skipped) and not full and sent_at < self.full_due
        if again:
            # Only the leases skipped last time and still held; counts wait for the next full
            # beat, and so does the progress of the jobs not sent.
            held = [pair for pair in held if pair in self.skipped]
            if not held:
                self.skipped.clear()  # written or lost meanwhile: nothing to try again
                return
        counted = {} if again else self.counts.take()
        # Progress reported since the last beat: written by this same statement for the jobs it
        # sends, kept for a later beat for the others (a job whose claim's COMMIT is still on
        # its way, which no beat sends until it committed; a beat of skipped leases alone).
        sending = set(held)
        reported: list[tuple[JobContext, str]] = []
        for ctx, text in self.holdings.progress():
            if (ctx.id, ctx.job.lease_token) in sending:
                reported.append((ctx, text))
            else:
                ctx.keep_progress(text)
        try:
            rows = await self.store.fetch(
                "heartbeat",
                {
                    "worker_id": self.worker_id,
                    "lease": timedelta(seconds=self.lease),
                    "ids": int_array([job_id for job_id, _ in held]),
                    "tokens": int_array([token for _, token in held]),
                    "concurrency": self.holdings.slots,
                    **self.stats.as_params(),
                    **JobCounts.as_params(counted),
                    "progress_ids": int_array(ctx.id for ctx, _ in reported) if reported else None,
                    "progress": [text for _, text in reported] if reported else None,
                },
                timeout=timeout,
            )
        except BaseException:
            self.counts.restore(counted)  # flushed with the next heartbeat instead
            for ctx, text in reported:
                ctx.keep_progress(text)
            raise
        # (id, token) -> cancel_requested, for every job still held, extended or not: a row
        # another transaction had locked was skipped (see the statement), not lost.
        alive: dict[tuple[int, int], bool] = {(row[0], row[1]): row[2] for row in rows}
        skipped = [(row[0], row[1]) for row in rows if not row[3]]
        extended = [(row[0], row[1]) for row in rows if row[3]]
        if again:
            self.leases.extend(sent_at, extended)
        else:
            self.leases.beat(sent_at, extended, kept=skipped)
            self.full_due = sent_at + self.lease / 3
        self.skipped = set(skipped)
        if skipped and reported:
            # Not written with a lease this beat: the next one writes it.
            waiting = set(skipped)
            for ctx, text in reported:
                if (ctx.id, ctx.job.lease_token) in waiting:
                    ctx.keep_progress(text)
        for job_id, token in held:
            cancel_requested = alive.get((job_id, token))
            if cancel_requested is None:
                self._lost(job_id, token)
            elif cancel_requested and (job := self.holdings.job((job_id, token))):
                self.holdings.stop((job_id, token), "cancelled")
                self.log.info(
                    "cancel requested; stopping handler",
                    extra=fields(
                        Action.JOB_CANCEL_REQUESTED,
                        job_id=job_id,
                        task=job.task,
                        attempt=job.attempt,
                    ),
                )

    def _lost(self, job_id: int, token: int) -> None:
        job = self.holdings.job((job_id, token))
        if job is None:
            return  # finished and written meanwhile: not lost
        if self.holdings.completing((job_id, token)):
            return  # its own transaction completed it (or is completing it): not lost
        self.lost.add((job_id, token))
        self.observer.lease_lost(job)
        self.log.warning(
            "lease lost; stopping handler",
            extra=fields(
                Action.LEASE_LOST,
                job_id=job_id,
                task=job.task,
                attempt=job.attempt,
                lease_token=token,
            ),
        )
        self.holdings.stop((job_id, token), "lease lost")

    async def flush(self) -> None:
        """At shutdown: report the last counts and totals once (best effort, quick)."""
        try:
            await self.run_once(timeout=2.0, full=True)
        except TRANSIENT_ERRORS:
            self.log.warning(
                "could not flush the last job counts; they are not recorded",
                extra=fields(Action.WORKER_COUNTS_UNFLUSHED),
            )
