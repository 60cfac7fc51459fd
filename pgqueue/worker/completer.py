"""The completer: writes attempt outcomes in batches, fenced by lease token.

Outcomes accumulate while a write is in flight and go out together in the next one, so under
load a batch holds everything that finished during one round trip and the number of statements
per job falls as throughput rises; when idle, an outcome is written at once. A write that fails
(database down) is kept and retried: an outcome is never dropped, and a write that arrives after
the lease was lost changes nothing (the token no longer matches) and is logged as stale. A
write retried because its reply was lost (a crash or failover during the commit) that finds
nothing to write is logged at INFO as already written when the lease surely still held
(:mod:`pgqueue.worker.leases`): its first try committed.

One bad row must not stall the rest. Each statement is atomic, so when a batch fails on a row
(a data error, a constraint, an error a trigger raised: a hand-edited row, an id another row
already holds), its outcomes are written again in halves until the failing ones stand alone,
and every other outcome is written on the way (the common path is unchanged: one statement per
batch; a bad row costs about two statements per halving). Errors that are not about a row (a
privilege missing after an upgrade) would fail every job alike: those outcomes are kept and
tried again, as through an outage. A
job whose write fails alone goes to the dead letters with the reason (``dead_letter_unwritable``;
under a fresh id when its own is taken: the row holding the id is never changed). If even that
fails, the job is logged with the error and its lease is ended (``expire_unwritable``), so the
reaper takes it at once: retried while attempts remain, else dead-lettered or, if nothing can
record it there either, parked for an hour (see ``pgqueue.reap``). Nothing stays running with a
lease extended forever, and nothing is deleted without a record.
"""

from __future__ import annotations

import asyncio
import logging
import math
from collections.abc import Callable

import psycopg

from pgqueue.rules.options import MAX_DURATION
from pgqueue.worker.leases import LeaseClock
from pgqueue.worker.outcome import Outcome
from pgqueue.worker.service import Service
from pgqueue.worker.store import TRANSIENT_ERRORS, WorkerStore, int_array

MAX_BATCH = 1000
# A retry delay the database can add to now() (a backoff callable may return anything).
_MAX_DELAY = MAX_DURATION.total_seconds()
# How much of an error goes into a log line or a dead letter's reason.
_MAX_LOGGED = 300
_MAX_PROBLEM = 1000


def _by_id(outcome: Outcome) -> int:
    return outcome.job.id


def _delay(seconds: float) -> float:
    if math.isnan(seconds):
        return 0.0
    return min(max(seconds, 0.0), _MAX_DELAY)


def _problem(exc: psycopg.Error) -> str:
    """A database error in one line: class, message, detail (the key or row it is about)."""
    diag = exc.diag
    text = diag.message_primary or str(exc)
    if diag.message_detail:
        text += f" ({diag.message_detail})"
    return f"{type(exc).__name__}: {' '.join(text.split())}"[:_MAX_PROBLEM]


def _about_the_row(exc: psycopg.Error) -> bool:
    """Whether the error is about the data written (so about that job) rather than the
    database or its set-up: a data exception (SQLSTATE class 22), a constraint violation (23),
    an error a trigger raised (P0), or psycopg refusing to send a value. Only those make a job
    go to the dead letters; others (a missing privilege after an upgrade, say) would hit every
    job alike, and the job is kept until they are fixed."""
    if exc.sqlstate is None:
        return isinstance(exc, psycopg.DataError)
    return exc.sqlstate[:2] in ("22", "23", "P0")


def _first_try(outcome: Outcome) -> str:
    """What the database made of ``outcome`` when its first try committed (as fail_jobs and
    ack_jobs decide; a cancel requested meanwhile is the one thing not known here)."""
    kind, job = outcome.kind, outcome.job
    if kind == "ack":
        return "succeeded"
    if kind == "cancelled":
        return "cancelled"
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


def _log_value(text: str) -> str:
    """``text`` as the last value of a log line: one line, clipped, and with ``=`` escaped
    where the JSON formatter would take ``word=...`` for a field of its own."""
    text = " ".join(text.split())
    if len(text) > _MAX_LOGGED:
        text = text[: _MAX_LOGGED - 3] + "..."
    return " ".join(
        word.replace("=", "\\=", 1) if word.partition("=")[0].isidentifier() else word
        for word in text.split(" ")
    )


# What fail_jobs decided, in the words of the logs.
_VERBS = {"retry": "rescheduled", "dead": "dead-lettered", "cancelled": "cancelled"}
# Why fail_jobs dead-lettered a job, by outcome kind.
_DEAD_BECAUSE = {
    "error": "max attempts reached",
    "fail": "Fail raised",
    "no_retry": "the retry policy excludes the error",
}
# Outcome kinds a circuit breaker counts as failures.
_FAILURES = ("error", "fail", "no_retry")

Written = list[tuple[Outcome, str]]


class Completer(Service):
    name = "completer"

    def __init__(
        self,
        store: WorkerStore,
        breaker_tasks: frozenset[str] = frozenset(),
        leases: LeaseClock | None = None,
    ) -> None:
        super().__init__()
        self.store = store
        #: Tells a retried write whose first try committed from one whose lease was lost.
        self.leases = leases
        # Tasks with a circuit breaker: their outcomes are also counted in
        # pgqueue.circuit_breakers (one more statement per batch that has any).
        self.breaker_tasks = breaker_tasks
        #: Called with the task's name when its circuit breaker opens (the worker hands back
        #: the task's prefetched jobs, which were claimed before the trip).
        self.on_breaker_open: Callable[[str], None] | None = None
        self.pending: list[Outcome] = []
        #: The batch being written, less what is written already (its leases stay extended).
        self.in_flight: list[Outcome] = []
        # Breaker outcomes of written jobs, not yet counted (kept through an outage).
        self._breakers: list[tuple[Outcome, bool]] = []
        #: (id, lease token) of held jobs that took the last free place under a concurrency
        #: limit: the statement that writes their outcomes also notifies their queues.
        self._wakes: set[tuple[int, int]] = set()
        self._notified = False
        #: Called after each batch is written, with whether the write notified queues for such
        #: jobs (the fetcher of a worker held back by a limit claims again).
        self.on_written: Callable[[bool], None] | None = None
        self._write_lock: asyncio.Lock | None = None
        #: Claims whose COMMIT is still on its way (the fetcher starts an idle worker's jobs
        #: as soon as the claim's rows arrive): None while it is, or the outcomes that arrived
        #: meanwhile. Nothing is written under such a lease until its claim committed.
        self._uncommitted: dict[tuple[int, int], list[Outcome] | None] = {}
        #: Claims whose COMMIT failed: the lease was never ours, and after a server crash its
        #: token may be handed out again, so nothing about these attempts is ever written.
        self._not_ours: set[tuple[int, int]] = set()

    def interval(self) -> float:
        return 60.0  # woken by submit(); the interval is only a safety net

    def submit(self, outcome: Outcome) -> None:
        key = (outcome.job.id, outcome.job.lease_token)
        if outcome.written in ("succeeded", "cancelled"):
            # Its handler's transaction completed the job, having found the row running under
            # this lease: the claim committed, whatever its COMMIT's reply said.
            self._not_ours.discard(key)
            self.pending.append(outcome)
            self.wake()
            return
        if key in self._uncommitted:
            self._uncommitted[key] = [*(self._uncommitted[key] or ()), outcome]
            return
        if key in self._not_ours:
            self._not_ours.discard(key)
            self.log.warning(
                "claim did not commit; outcome not written job_id=%s task=%s attempt=%s",
                outcome.job.id,
                outcome.job.task,
                outcome.job.attempt,
            )
            return
        self.pending.append(outcome)
        self.wake()

    def claim_pending(self, keys: list[tuple[int, int]]) -> None:
        """These (id, lease token) were claimed by a transaction not committed yet: hold
        their outcomes until :meth:`claim_committed` or :meth:`claim_failed`."""
        for key in keys:
            self._uncommitted[key] = None

    def claim_committed(self, keys: list[tuple[int, int]]) -> None:
        for key in keys:
            for outcome in self._uncommitted.pop(key, None) or ():
                self.submit(outcome)

    def claim_failed(
        self, keys: list[tuple[int, int]], still_running: set[tuple[int, int]]
    ) -> None:
        """The claim's COMMIT failed (or its fate is unknown): drop what these attempts
        produced, and what those ``still_running`` will."""
        for key in keys:
            for outcome in self._uncommitted.pop(key, None) or ():
                self._not_ours.add(key)
                self.submit(outcome)  # logged and dropped
            if key in still_running:
                self._not_ours.add(key)

    def forget_not_ours(self, held: set[tuple[int, int]]) -> None:
        """Forget failed claims whose handlers have returned without an outcome."""
        self._not_ours &= held

    def not_ours(self) -> set[tuple[int, int]]:
        """Held jobs whose claim has not committed (or never did): no heartbeat for them."""
        return self._not_ours | self._uncommitted.keys()

    def wake_on_exit(self, job_id: int, lease_token: int) -> None:
        """Notify this job's queue when its outcome is written (see ack_jobs_waking)."""
        self._wakes.add((job_id, lease_token))

    def waking(self) -> int:
        """How many held jobs will notify their queues when written."""
        return len(self._wakes)

    def keep_wakes(self, held: set[tuple[int, int]]) -> None:
        """Forget the jobs not in ``held`` (plus what waits here to be written): a job whose
        lease was lost, or that was handed back, never gets an outcome written."""
        self._wakes &= held | set(self.held())

    def held(self) -> list[tuple[int, int]]:
        """Jobs whose outcome is not written yet: their leases must still be extended."""
        return [
            (o.job.id, o.job.lease_token)
            for o in (*self.in_flight, *self.pending)
            if o.written is None
        ]

    def claim_unsettled(self, job_id: int, lease_token: int) -> bool:
        """Whether the claim of this lease has not committed, or never did (see
        :meth:`claim_pending`)."""
        key = (job_id, lease_token)
        return key in self._uncommitted or key in self._not_ours

    def wakes(self, job_id: int, lease_token: int) -> bool:
        """Whether this job's exit notifies its queue (see :meth:`wake_on_exit`)."""
        return (job_id, lease_token) in self._wakes

    def idle(self) -> bool:
        return not self.pending and not self.in_flight and not self._uncommitted

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
            if self._breakers:
                await self._record_breakers()
        if self._breakers:  # left over from an outage
            await self._record_breakers()

    async def _write(self, report: Written, logged: set[int]) -> None:
        acks = [o for o in self.in_flight if o.kind == "ack" and o.written is None]
        others = [o for o in self.in_flight if o.kind != "ack"]
        if len(acks) + len(others) < len(self.in_flight):
            self._written_by_handlers(report)
        kept = None
        if acks:
            kept = await self._write_isolating("ack_jobs", acks, report, logged)
        if others:
            kept = await self._write_isolating("fail_jobs", others, report, logged) or kept
        if kept is not None:
            raise kept  # the service logs it and tries again after a backoff

    def _written_by_handlers(self, report: Written) -> None:
        """Outcomes their handlers' own transactions wrote (ctx.transaction()): reported as
        written, never written again (the job has left the table)."""
        done = [o for o in self.in_flight if o.written is not None]
        written: Written = [(o, o.written) for o in done if o.written is not None]
        # A committed completion notified its queue when it took a limit's last place.
        self._woken([o for o, what in written if what != "stale"])
        self._done(done)
        report.extend(written)
        self._count_breakers(written)

    async def _write_isolating(
        self, name: str, outcomes: list[Outcome], report: Written, logged: set[int]
    ) -> psycopg.Error | None:
        """Write ``outcomes`` with one statement; if it fails on a row, in halves, until each
        outcome that cannot be written stands alone. Returns an error that is not about a row
        (its outcomes stay in ``in_flight``, to be tried again); raises transient ones."""
        chunks = [outcomes]
        kept: psycopg.Error | None = None
        while chunks:
            chunk = chunks.pop()
            try:
                written = await self._statement(name, chunk)
                if any(o.ambiguous for o in chunk):
                    written = await self._settle_retried(written, logged)
            except TRANSIENT_ERRORS:
                raise
            except psycopg.Error as exc:
                if not _about_the_row(exc):
                    # It would fail every job alike (a privilege missing after an upgrade):
                    # splitting cannot help. Kept, with what else fails, until it is fixed.
                    kept = kept or exc
                    continue
                if len(chunk) > 1:
                    if chunk is outcomes:
                        self.log.warning(
                            "batch write failed; writing it in parts to isolate the failing "
                            "job(s) statement=%s jobs=%s error=%s",
                            name,
                            len(chunk),
                            _log_value(_problem(exc)),
                        )
                    half = len(chunk) // 2
                    chunks += [chunk[half:], chunk[:half]]  # the lower ids first
                    continue
                outcome = chunk[0]
                written = [(outcome, await self._unwritable(outcome, exc))]
                logged.add(id(outcome))
            self._done(chunk)
            report.extend(written)
            self._count_breakers(written)
        return kept

    async def _statement(self, name: str, chunk: list[Outcome]) -> Written:
        wake = self._to_wake(chunk)
        written = await self._outcomes(name, chunk, wake)
        if wake is not None:
            self._woken(chunk)
        return written

    async def _outcomes(self, name: str, chunk: list[Outcome], wake: list[str] | None) -> Written:
        if name == "ack_jobs":
            params = {
                "ids": int_array([o.job.id for o in chunk]),
                "tokens": int_array([o.job.lease_token for o in chunk]),
                # NULL when no job keeps a result (most batches): unnest pads with NULLs.
                "results": (
                    [o.result for o in chunk] if any(o.result is not None for o in chunk) else None
                ),
            }
            if wake is None:
                rows = await self.store.fetch("ack_jobs", params)
            else:
                rows = await self.store.fetch("ack_jobs_waking", {**params, "wake": wake})
            # A job cancelled while its handler ran is recorded as cancelled by ack_jobs.
            done: dict[int, bool] = {row[0]: row[1] for row in rows}
            written: Written = []
            for outcome in chunk:
                cancelled = done.get(outcome.job.id)
                if cancelled is None:
                    written.append((outcome, "stale"))
                else:
                    written.append((outcome, "cancelled" if cancelled else "succeeded"))
            return written
        rows = await self.store.fetch(
            "fail_jobs",
            {
                "ids": [o.job.id for o in chunk],
                "tokens": [o.job.lease_token for o in chunk],
                "kinds": [o.kind for o in chunk],
                "delays": [_delay(o.delay) for o in chunk],
                "errors": [o.error for o in chunk],
                "wake": wake,
            },
        )
        decided: dict[int, str] = {row[0]: row[1] for row in rows}
        return [(o, decided.get(o.job.id, "stale")) for o in chunk]

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
                    self._log_written(outcome, "stale")  # the row says the lease was lost
                elif not verdict:
                    self._log_claim_unknown(outcome)
                elif self.leases is not None and self.leases.surely_held(outcome.job):
                    settled_as = _first_try(outcome)
                    self._log_first_try(outcome)
                else:
                    self._log_unknown_first_try(outcome)
            settled.append((outcome, settled_as))
        return settled

    def _to_wake(self, chunk: list[Outcome]) -> list[str] | None:
        """The queues of the jobs in ``chunk`` that took a limit's last free place (their write
        notifies them), or None (most batches: nothing is held back by a limit)."""
        if not self._wakes:
            return None
        queues = {o.job.queue for o in chunk if (o.job.id, o.job.lease_token) in self._wakes}
        return sorted(queues) if queues else None

    def _woken(self, chunk: list[Outcome]) -> None:
        """``chunk`` is written: its notifications went out with it."""
        if self._wakes:
            for o in chunk:
                key = (o.job.id, o.job.lease_token)
                if key in self._wakes:
                    self._wakes.discard(key)
                    self._notified = True

    def _done(self, chunk: list[Outcome]) -> None:
        """Written: these outcomes' leases need no more heartbeats, nor a retry."""
        if len(chunk) == len(self.in_flight):
            self.in_flight = []  # chunk is a subset of in_flight: all of it
        else:
            written = {id(o) for o in chunk}
            self.in_flight = [o for o in self.in_flight if id(o) not in written]

    async def _unwritable(self, outcome: Outcome, exc: psycopg.Error) -> str:
        """An outcome whose write fails on its own: dead-letter the job with the reason, or
        if that fails too, end its lease so the reaper takes it over. Transient errors are
        raised (the outcome is kept and tried again)."""
        job = outcome.job
        problem = _problem(exc)
        fenced = {"id": job.id, "token": job.lease_token}
        try:
            rows = await self.store.fetch(
                "dead_letter_unwritable",
                {**fenced, "kind": outcome.kind, "error": outcome.error, "problem": problem},
            )
        except TRANSIENT_ERRORS:
            raise
        except psycopg.Error as again:
            self.log.error(
                "outcome could not be written, nor the job dead-lettered; its lease is ended "
                "so the reaper takes it job_id=%s task=%s queue=%s attempt=%s outcome=%s "
                "dead_letter_error=%s error=%s",
                job.id,
                job.task,
                job.queue,
                job.attempt,
                outcome.kind,
                _log_value(_problem(again)),
                _log_value(problem),
            )
            try:
                await self.store.fetch("expire_unwritable", {**fenced, "problem": problem})
            except TRANSIENT_ERRORS:
                raise
            except psycopg.Error as third:
                # Not held here any more either way: its lease runs out without heartbeats.
                self.log.error(
                    "could not end the lease; it expires on its own job_id=%s error=%s",
                    job.id,
                    _log_value(_problem(third)),
                )
            return "stale"  # this worker's write changed nothing
        if not rows:
            self._log_written(outcome, "stale")
            return "stale"
        self.log.error(
            "outcome could not be written; job dead-lettered with the reason job_id=%s "
            "task=%s queue=%s attempt=%s outcome=%s dead_letter_id=%s error=%s",
            job.id,
            job.task,
            job.queue,
            job.attempt,
            outcome.kind,
            rows[0][0],
            _log_value(problem),
        )
        return "dead"

    def _count_breakers(self, written: Written) -> None:
        if not self.breaker_tasks:
            return
        for outcome, what in written:
            if outcome.job.task not in self.breaker_tasks:
                continue
            if what == "succeeded" and outcome.kind == "ack":
                self._breakers.append((outcome, False))
            elif outcome.kind in _FAILURES and what in ("retry", "dead"):
                self._breakers.append((outcome, True))

    def _report(self, report: Written, logged: set[int]) -> None:
        if not report:
            return
        self.observer.jobs_written(report)
        if self.log.isEnabledFor(logging.INFO) or any(w == "stale" for _, w in report):
            for outcome, written in report:
                if id(outcome) not in logged:
                    self._log_written(outcome, written)

    async def _record_breakers(self) -> None:
        outcomes = self._breakers
        try:
            rows = await self.store.fetch(
                "record_breaker_outcomes",
                {
                    "tasks": [o.job.task for o, _ in outcomes],
                    "ids": [o.job.id for o, _ in outcomes],
                    "tokens": [o.job.lease_token for o, _ in outcomes],
                    "failed": [failed for _, failed in outcomes],
                },
            )
        except TRANSIENT_ERRORS:
            raise  # kept: counted after the outage
        except psycopg.Error as exc:
            # Counts only steer the breaker; they must not stall the outcomes behind them.
            self._breakers = []
            self.log.error(
                "circuit breaker outcomes not recorded jobs=%s error=%s",
                len(outcomes),
                _log_value(_problem(exc)),
            )
            return
        self._breakers = []
        for task, before, after in rows:
            if before != after:
                self.log.warning("circuit breaker %s task=%s (was %s)", after, task, before)
                if after == "open" and self.on_breaker_open is not None:
                    self.on_breaker_open(task)

    def _log_first_try(self, outcome: Outcome) -> None:
        job = outcome.job
        self.log.info(
            "%s already written: the first try committed, its reply was lost job_id=%s "
            "task=%s queue=%s attempt=%s lease_token=%s",
            outcome.kind,
            job.id,
            job.task,
            job.queue,
            job.attempt,
            job.lease_token,
        )

    def _log_claim_unknown(self, outcome: Outcome) -> None:
        job = outcome.job
        self.log.warning(
            "%s ignored: the database does not know this worker's claim (lost in a failover "
            "to a standby that had not received it?); the job runs again job_id=%s task=%s "
            "attempt=%s lease_token=%s",
            outcome.kind,
            job.id,
            job.task,
            job.attempt,
            job.lease_token,
        )

    def _log_unknown_first_try(self, outcome: Outcome) -> None:
        job = outcome.job
        self.log.warning(
            "%s found nothing to write after a lost reply: the first try committed, or the "
            "lease expired meanwhile and another worker took the job over job_id=%s task=%s "
            "attempt=%s lease_token=%s",
            outcome.kind,
            job.id,
            job.task,
            job.attempt,
            job.lease_token,
        )

    def _log_written(self, outcome: Outcome, written: str) -> None:
        job = outcome.job
        if written == "stale" and outcome.written is not None:
            self.log.warning(
                "lease lost: the job's transaction was rolled back, nothing written job_id=%s "
                "task=%s attempt=%s lease_token=%s",
                job.id,
                job.task,
                job.attempt,
                job.lease_token,
            )
        elif written == "stale":
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
            # The error comes last: its text may hold anything, and the JSON formatter reads
            # every word after the last key=value as part of that value.
            line = "job %s job_id=%s task=%s queue=%s attempt=%s max_attempts=%s outcome=%s " + (
                "delay=%.3fs" if written == "retry" else "reason=%s"
            )
            detail: object = (
                _delay(outcome.delay)
                if written == "retry"
                else _DEAD_BECAUSE.get(outcome.kind, outcome.kind)
                if written == "dead"
                else "cancelled"
            )
            args: list[object] = [
                _VERBS.get(written, written),
                job.id,
                job.task,
                job.queue,
                job.attempt,
                job.max_attempts,
                outcome.kind,
                detail,
            ]
            if outcome.summary:
                line += " error=%s"
                args.append(_log_value(outcome.summary))
            self.log.info(line, *args)
