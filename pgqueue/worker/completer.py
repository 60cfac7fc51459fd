"""The completer: writes attempt outcomes in batches, fenced by lease token.

Outcomes accumulate while a write is in flight and go out together in the next one, so under
load a batch holds everything that finished during one round trip and the number of statements
per job falls as throughput rises; when idle, an outcome is written at once. A write that fails
(database down) is kept and retried: an outcome is never dropped, and a write that arrives after
the lease was lost changes nothing (the token no longer matches) and is logged as stale. A
write retried because its reply was lost (a crash or failover during the commit) that finds
nothing to write is logged at INFO as already written when the lease surely still held
(:mod:`pgqueue.worker.leases`): its first try committed.

One bad row must not stall the rest: a batch that fails on a row is written in parts around
it (:mod:`pgqueue.worker.bad_rows`). What the worker knows of its claims (a COMMIT still on its
way, a claim that never committed, a queue to wake) is the claim ledger's
(:mod:`pgqueue.worker.claim_ledger`), asked before an outcome is written.
"""

from __future__ import annotations

import asyncio
import functools
import logging
from collections.abc import Callable

import psycopg

from pgqueue.handler.steps import SLEEP
from pgqueue.rules.log_actions import Action, fields
from pgqueue.worker import written_log
from pgqueue.worker.array_params import int_array
from pgqueue.worker.bad_rows import BreakerCounts, RowIsolation
from pgqueue.worker.claim_ledger import ClaimLedger
from pgqueue.worker.leases import LeaseClock
from pgqueue.worker.outcome import (
    CANCEL_REQUESTED,
    Outcome,
    Written,
    ack_params,
    acked,
    cancel_instead,
    fail_params,
    failed,
    park_sleep_params,
    park_wait_params,
    parked,
)
from pgqueue.worker.service import Service
from pgqueue.worker.store import WorkerStore

MAX_BATCH = 1000


def _by_id(outcome: Outcome) -> int:
    return outcome.job.id


def _first_try(outcome: Outcome) -> str:
    """What the database made of ``outcome`` when its first try committed (as fail_jobs and
    ack_jobs decide; a cancel requested meanwhile is the one thing not known here)."""
    kind, job = outcome.kind, outcome.job
    if kind == "ack":
        return "succeeded"
    if kind == "cancelled":
        return "cancelled"
    if kind == "park":
        return "parked"
    if kind in ("fail", "no_retry") or (kind == "error" and job.attempt >= job.max_attempts):
        return "dead"
    return "retry"


def _first_try_committed(outcome: Outcome, row: tuple[int, str] | None) -> bool | None:
    """What the job's row (lease token, state; None: gone) says of a retried write's first
    try, assuming nobody else touched the job meanwhile: True, it is what the first try left;
    None, the first try cannot have committed (an ack deletes the row); False, the database
    does not know this worker's claim (a failover to a standby that had not received it)."""
    if row is None:
        return True  # acked, or dead-lettered (or retried, then finished elsewhere)
    token, state = row
    if token < outcome.job.lease_token:
        return False
    if outcome.kind == "ack":
        return None
    if token > outcome.job.lease_token or state != "running":
        return True
    return None


class Completer(Service):
    name = "completer"

    def __init__(
        self,
        store: WorkerStore,
        breaker_tasks: frozenset[str] = frozenset(),
        leases: LeaseClock | None = None,
        ledger: ClaimLedger | None = None,
    ) -> None:
        super().__init__()
        self.store = store
        #: Tells a retried write whose first try committed from one whose lease was lost.
        self.leases = leases
        #: The worker's claims: asked before an outcome is written, and it hands back the
        #: outcomes it held while their claim's COMMIT was on its way.
        self.ledger = ledger if ledger is not None else ClaimLedger()
        self.ledger.release = self.submit
        self.isolation = RowIsolation(store, self.log)
        # Tasks with a circuit breaker: their outcomes are also counted in
        # pgqueue.circuit_breakers (one more statement per batch that has any).
        self.breakers = BreakerCounts(breaker_tasks, self.log)
        self.pending: list[Outcome] = []
        #: The batch being written, less what is written already (its leases stay extended).
        self.in_flight: list[Outcome] = []
        self._notified = False
        #: Called after each batch is written, with whether the write notified queues for such
        #: jobs (the fetcher of a worker held back by a limit claims again).
        self.on_written: Callable[[bool], None] | None = None
        self._write_lock: asyncio.Lock | None = None
        #: Called after parks were written (durable sleeps and waits): the fetcher claims
        #: again, so it reads when the next scheduled job (a parked one) is due.
        self.on_parked: Callable[[], None] | None = None

    @property
    def on_breaker_open(self) -> Callable[[str], None] | None:
        """Called with the task's name when its circuit breaker opens (the worker hands back
        the task's prefetched jobs, which were claimed before the trip)."""
        return self.breakers.on_open

    @on_breaker_open.setter
    def on_breaker_open(self, callback: Callable[[str], None] | None) -> None:
        self.breakers.on_open = callback

    def interval(self) -> float:
        return 60.0  # woken by submit(); the interval is only a safety net

    def submit(self, outcome: Outcome) -> None:
        admission = self.ledger.admit(outcome)
        if admission == "held":
            return  # its claim's COMMIT is on its way: the ledger hands it back after
        if admission == "not ours":
            self.log.warning(
                "claim did not commit; outcome not written",
                extra=fields(
                    Action.OUTCOME_UNCLAIMED,
                    job_id=outcome.job.id,
                    task=outcome.job.task,
                    attempt=outcome.job.attempt,
                ),
            )
            return
        self.pending.append(outcome)
        self.wake()

    def held(self) -> list[tuple[int, int]]:
        """Jobs whose outcome is not written yet: their leases must still be extended."""
        return [
            (o.job.id, o.job.lease_token)
            for o in (*self.in_flight, *self.pending)
            if o.written is None
        ]

    def idle(self) -> bool:
        return not self.pending and not self.in_flight and not self.ledger.committing()

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
            # Sorted by id: every statement that locks several jobs takes them in the same
            # order, so a heartbeat and a write of overlapping jobs cannot deadlock.
            self.in_flight = sorted(batch, key=_by_id)
            report: Written = []
            logged: set[int] = set()
            self._notified = False
            try:
                await self._write(report, logged)
            except BaseException:
                # What is not written yet. A write cut off without a reply may have committed.
                for outcome in self.in_flight:
                    outcome.ambiguous = True
                self.pending = self.in_flight + self.pending
                raise
            finally:
                self.in_flight = []
                self._report(report, logged)
            if self.on_written is not None:
                self.on_written(self._notified)
            if self.breakers:
                await self.breakers.record(self.store)
        if self.breakers:  # left over from an outage
            await self.breakers.record(self.store)

    async def _write(self, report: Written, logged: set[int]) -> None:
        acks = [o for o in self.in_flight if o.kind == "ack" and o.written is None]
        parks = [o for o in self.in_flight if o.kind == "park" and o.written is None]
        sleeps = [o for o in parks if o.park is not None and o.park.kind == SLEEP]
        waits = [o for o in parks if o.park is None or o.park.kind != SLEEP]
        others = [o for o in self.in_flight if o.kind not in ("ack", "park")]
        if len(acks) + len(parks) + len(others) < len(self.in_flight):
            self._written_by_handlers(report)

        def written(chunk: list[Outcome], part: Written) -> None:
            self._done(chunk)
            report.extend(part)
            self.breakers.count(part)

        def park_written(chunk: list[Outcome], part: Written) -> None:
            # A job whose cancel was requested while it ran is not parked: it is written
            # cancelled with the other outcomes (below), still under its lease.
            cancelled = {id(o) for o, what in part if what == CANCEL_REQUESTED}
            for outcome in chunk:
                if id(outcome) in cancelled:
                    cancel_instead(outcome)
                    others.append(outcome)
            written(
                [o for o in chunk if id(o) not in cancelled],
                [(o, what) for o, what in part if id(o) not in cancelled],
            )

        async def statement(name: str, chunk: list[Outcome]) -> Written:
            part = await self._statement(name, chunk)
            if any(o.ambiguous for o in chunk):
                part = await self._settle_retried(part, logged)
            return part

        kept: psycopg.Error | None = None

        async def write(
            name: str, part: list[Outcome], told: Callable[[list[Outcome], Written], None]
        ) -> None:
            nonlocal kept
            if part:
                error = await self.isolation.write(
                    name, part, functools.partial(statement, name), told, logged
                )
                kept = error or kept

        await write("ack_jobs", acks, written)
        await write("park_sleeps", sleeps, park_written)
        await write("park_for_events", waits, park_written)
        if parks and self.on_parked is not None:
            self.on_parked()
        others.sort(key=_by_id)  # with the parks a cancel request overtook
        await write("fail_jobs", others, written)
        if kept is not None:
            raise kept  # the service logs it and tries again after a backoff

    def _written_by_handlers(self, report: Written) -> None:
        """Outcomes their handlers' own transactions wrote (ctx.transaction()): reported as
        written, never written again (the job has left the table)."""
        done = [o for o in self.in_flight if o.written is not None]
        written: Written = [(o, o.written) for o in done if o.written is not None]
        # A committed completion notified its queue when it took a limit's last place.
        self._notified |= self.ledger.woken([o for o, what in written if what != "stale"])
        self._done(done)
        report.extend(written)
        self.breakers.count(written)

    async def _statement(self, name: str, chunk: list[Outcome]) -> Written:
        if name == "park_sleeps":
            return parked(chunk, await self.store.fetch("park_sleeps", park_sleep_params(chunk)))
        if name == "park_for_events":
            rows = await self.store.fetch("park_for_events", park_wait_params(chunk))
            return parked(chunk, rows)
        wake = self.ledger.to_wake(chunk)
        written = await self._outcomes(name, chunk, wake)
        if wake is not None:
            self._notified |= self.ledger.woken(chunk)
        return written

    async def _outcomes(self, name: str, chunk: list[Outcome], wake: list[str] | None) -> Written:
        if name == "ack_jobs":
            params = ack_params(chunk)
            if wake is None:
                rows = await self.store.fetch("ack_jobs", params)
            else:
                rows = await self.store.fetch("ack_jobs_waking", {**params, "wake": wake})
            return acked(chunk, rows)
        rows = await self.store.fetch("fail_jobs", fail_params(chunk, wake))
        return failed(chunk, rows)

    async def _settle_retried(self, written: Written, logged: set[int]) -> Written:
        """A retry of a write cut off without a reply found nothing to write: did the first
        try commit, or was the lease lost? While the lease surely held
        (:mod:`pgqueue.worker.leases`) nobody else can have touched the job, so what the row
        shows now decides; one statement, only on this rare path."""
        retried = [o for o, what in written if what == "stale" and o.ambiguous]
        if not retried:
            return written
        rows = await self.store.fetch(
            "locate_jobs", {"ids": int_array([o.job.id for o in retried])}
        )
        now: dict[int, tuple[int, str]] = {row[0]: (row[1], row[2]) for row in rows}
        settled: Written = []
        for outcome, what in written:
            settled_as = what
            if what == "stale" and outcome.ambiguous:
                logged.add(id(outcome))
                verdict = _first_try_committed(outcome, now.get(outcome.job.id))
                if verdict is None:
                    # The row says the lease was lost.
                    written_log.outcome_written(self.log, outcome, "stale")
                elif not verdict:
                    written_log.claim_unknown(self.log, outcome)
                elif self.leases is not None and self.leases.surely_held(outcome.job):
                    settled_as = _first_try(outcome)
                    written_log.first_try(self.log, outcome)
                else:
                    written_log.unknown_first_try(self.log, outcome)
            settled.append((outcome, settled_as))
        return settled

    def _done(self, chunk: list[Outcome]) -> None:
        """Written: these outcomes' leases need no more heartbeats, nor a retry."""
        if len(chunk) == len(self.in_flight):
            self.in_flight = []  # chunk is a subset of in_flight: all of it
        else:
            written = {id(o) for o in chunk}
            self.in_flight = [o for o in self.in_flight if id(o) not in written]

    def _report(self, report: Written, logged: set[int]) -> None:
        if not report:
            return
        self.observer.jobs_written(report)
        if self.log.isEnabledFor(logging.INFO) or any(w == "stale" for _, w in report):
            for outcome, written in report:
                if id(outcome) not in logged:
                    written_log.outcome_written(self.log, outcome, written)
