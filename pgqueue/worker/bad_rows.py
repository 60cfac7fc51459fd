"""One bad row must not stall the rest: isolating the outcomes a batch write fails on.

Each statement is atomic, so when a batch fails on a row (a data error, a constraint, an error
a trigger raised: a hand-edited row, an id another row already holds), its outcomes are written
again in halves until the failing ones stand alone, and every other outcome is written on the
way (the common path is unchanged: one statement per batch; a bad row costs about two
statements per halving). Errors that are not about a row (a privilege missing after an upgrade)
would fail every job alike: those outcomes are kept and tried again, as through an outage.

A job whose write fails alone goes to the dead letters with the reason
(``dead_letter_unwritable``; under a fresh id when its own is taken: the row holding the id is
never changed). If even that fails, the job is logged with the error and its lease is ended
(``expire_unwritable``), so the reaper takes it at once: retried while attempts remain, else
dead-lettered or, if nothing can record it there either, parked for an hour (see
``pgqueue.reap``). Nothing stays running with a lease extended forever, and nothing is deleted
without a record.

Circuit breakers' counts (:class:`BreakerCounts`) live here too: they follow what was written,
and a failure to record them must not stall the outcomes behind them either.
"""

from __future__ import annotations

import logging
from collections.abc import Awaitable, Callable

import psycopg

from pgqueue.rules.log_actions import Action, fields
from pgqueue.worker import written_log
from pgqueue.worker.outcome import Outcome, Written
from pgqueue.worker.store import TRANSIENT_ERRORS, WorkerStore
from pgqueue.worker.written_log import log_value

# How much of an error goes into a dead letter's reason.
_MAX_PROBLEM = 1000
# Outcome kinds a circuit breaker counts as failures.
_FAILURES = ("error", "fail", "no_retry")


def problem(exc: psycopg.Error) -> str:
    """A database error in one line: class, message, detail (the key or row it is about)."""
    diag = exc.diag
    text = diag.message_primary or str(exc)
    if diag.message_detail:
        text += f" ({diag.message_detail})"
    return f"{type(exc).__name__}: {' '.join(text.split())}"[:_MAX_PROBLEM]


def about_the_row(exc: psycopg.Error) -> bool:
    """Whether the error is about the data written (so about that job) rather than the
    database or its set-up: a data exception (SQLSTATE class 22), a constraint violation (23),
    an error a trigger raised (P0), or psycopg refusing to send a value. Only those make a job
    go to the dead letters; others (a missing privilege after an upgrade, say) would hit every
    job alike, and the job is kept until they are fixed."""
    if exc.sqlstate is None:
        return isinstance(exc, psycopg.DataError)
    return exc.sqlstate[:2] in ("22", "23", "P0")


class RowIsolation:
    """Writes a batch with one statement, or in halves around the rows that fail."""

    def __init__(self, store: WorkerStore, log: logging.Logger) -> None:
        self.store = store
        self.log = log

    async def write(
        self,
        name: str,
        outcomes: list[Outcome],
        statement: Callable[[list[Outcome]], Awaitable[Written]],
        written: Callable[[list[Outcome], Written], None],
        logged: set[int],
    ) -> psycopg.Error | None:
        """Write ``outcomes`` with ``statement``; if it fails on a row, in halves, until each
        outcome that cannot be written stands alone (dead-lettered). ``written`` is told of
        each part written. Returns an error that is not about a row (its outcomes are left
        unwritten, to be tried again); raises transient ones."""
        chunks = [outcomes]
        kept: psycopg.Error | None = None
        while chunks:
            chunk = chunks.pop()
            try:
                report = await statement(chunk)
            except TRANSIENT_ERRORS:
                raise
            except psycopg.Error as exc:
                if not about_the_row(exc):
                    # It would fail every job alike (a privilege missing after an upgrade):
                    # splitting cannot help. Kept, with what else fails, until it is fixed.
                    kept = kept or exc
                    continue
                if len(chunk) > 1:
                    if chunk is outcomes:
                        self.log.warning(
                            "batch write failed; writing it in parts to isolate the failing job(s)",
                            extra=fields(
                                Action.BATCH_SPLIT,
                                statement=name,
                                jobs=len(chunk),
                                error=log_value(problem(exc)),
                            ),
                        )
                    half = len(chunk) // 2
                    chunks += [chunk[half:], chunk[:half]]  # the lower ids first
                    continue
                outcome = chunk[0]
                report = [(outcome, await self.dead_letter(outcome, exc))]
                logged.add(id(outcome))
            written(chunk, report)
        return kept

    async def dead_letter(self, outcome: Outcome, exc: psycopg.Error) -> str:
        """An outcome whose write fails on its own: dead-letter the job with the reason, or
        if that fails too, end its lease so the reaper takes it over. Transient errors are
        raised (the outcome is kept and tried again)."""
        job = outcome.job
        why = problem(exc)
        fenced = {"id": job.id, "token": job.lease_token}
        try:
            rows = await self.store.fetch(
                "dead_letter_unwritable",
                {**fenced, "kind": outcome.kind, "error": outcome.error, "problem": why},
            )
        except TRANSIENT_ERRORS:
            raise
        except psycopg.Error as again:
            self.log.error(
                "outcome could not be written, nor the job dead-lettered; its lease is ended "
                "so the reaper takes it",
                extra=fields(
                    Action.OUTCOME_UNWRITABLE,
                    job_id=job.id,
                    task=job.task,
                    queue=job.queue,
                    attempt=job.attempt,
                    outcome=outcome.kind,
                    dead_letter_error=log_value(problem(again)),
                    error=log_value(why),
                ),
            )
            try:
                await self.store.fetch("expire_unwritable", {**fenced, "problem": why})
            except TRANSIENT_ERRORS:
                raise
            except psycopg.Error as third:
                # Not held here any more either way: its lease runs out without heartbeats.
                self.log.error(
                    "could not end the lease; it expires on its own",
                    extra=fields(
                        Action.LEASE_END_FAILED, job_id=job.id, error=log_value(problem(third))
                    ),
                )
            return "stale"  # this worker's write changed nothing
        if not rows:
            written_log.outcome_written(self.log, outcome, "stale")
            return "stale"
        self.log.error(
            "outcome could not be written; job dead-lettered with the reason",
            extra=fields(
                Action.OUTCOME_DEAD_LETTERED,
                job_id=job.id,
                task=job.task,
                queue=job.queue,
                attempt=job.attempt,
                outcome=outcome.kind,
                dead_letter_id=rows[0][0],
                error=log_value(why),
            ),
        )
        return "dead"


class BreakerCounts:
    """Outcomes of tasks with a circuit breaker, counted in ``pgqueue.circuit_breakers`` (one
    more statement per batch that has any); kept through an outage."""

    def __init__(self, tasks: frozenset[str], log: logging.Logger) -> None:
        self.tasks = tasks
        self.log = log
        self._pending: list[tuple[Outcome, bool]] = []
        #: Called with the task's name when its circuit breaker opens (the worker hands back
        #: the task's prefetched jobs, which were claimed before the trip).
        self.on_open: Callable[[str], None] | None = None

    def count(self, written: Written) -> None:
        if not self.tasks:
            return
        for outcome, what in written:
            if outcome.job.task not in self.tasks:
                continue
            if what == "succeeded" and outcome.kind == "ack":
                self._pending.append((outcome, False))
            elif outcome.kind in _FAILURES and what in ("retry", "dead"):
                self._pending.append((outcome, True))

    def __bool__(self) -> bool:
        return bool(self._pending)

    async def record(self, store: WorkerStore) -> None:
        outcomes = self._pending
        try:
            rows = await store.fetch(
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
            self._pending = []
            self.log.error(
                "circuit breaker outcomes not recorded",
                extra=fields(
                    Action.BREAKER_NOT_RECORDED, jobs=len(outcomes), error=log_value(problem(exc))
                ),
            )
            return
        self._pending = []
        for task, before, after in rows:
            if before != after:
                self.log.warning(
                    "circuit breaker %s (was %s)",
                    after,
                    before,
                    extra=fields(Action.BREAKER_CHANGED, task=task),
                )
                if after == "open" and self.on_open is not None:
                    self.on_open(task)
