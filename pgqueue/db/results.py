"""Job results: kept when a job that asked for it succeeds, waited for with LISTEN/NOTIFY.

Which succeeded jobs leave a row behind (the hot path stays one DELETE per ack batch otherwise):

* jobs with a ``result_ttl`` (the task's ``@pgq.task(result_ttl=...)`` or the call's
  ``enqueue(..., result_ttl=...)``): recorded in ``pgqueue.job_history`` with their return value
  (JSON), kept for at least that long;
* every workflow member (chain, group, chord, DAG, ``depends_on``): same, with the workflow's
  result TTL (1 day unless given), because dependents receive and inspect those results;
* every succeeded job, without its result, when ``pgqueue.retention.record_succeeded`` is on.

The worker serialises a return value only for jobs that keep it (the claim tells it), with the
same validation as arguments; a value that cannot be stored fails the job permanently with a
clear error instead of crashing anything. The stored result is plain JSON; a reader that
registered the task gets it back as its return annotation names (:mod:`pgqueue.rules.codec`).

``pgq.result(job_id, timeout=...)`` LISTENs on ``pgqueue_results`` (the history and dead-letter
triggers notify the ids of jobs that finished, a few hundred ids per NOTIFY), reads the job's
state, and re-reads it only when its id is announced (or every few seconds as insurance), so
waiting costs no polling. The waiting logic is one plan shared by the sync and async APIs.

A job that kept nothing leaves no row once it succeeded, yet it is still told apart from an
unknown id: an id the job id sequence has handed out (``pg_sequence_last_value``) that is in no
table gets :class:`ResultUnavailableError` (it finished without keeping its result, or its kept
result expired and was pruned); only an id beyond the sequence is :class:`JobNotFoundError`.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import Any, NamedTuple

from psycopg.rows import class_row

from pgqueue.db.plan import Plan, Query, Wait, fetch_first
from pgqueue.errors import (
    JobCancelledError,
    JobDeadError,
    JobNotFoundError,
    ResultTimeoutError,
    ResultUnavailableError,
)
from pgqueue.rules.durations import check_timeout
from pgqueue.rules.vocabulary import JobState, Place

#: Re-read the job this often even without a notification (insurance, not the mechanism).
RECHECK_SECONDS = 10.0

#: Turns a stored result of a task (by name) into what its return annotation names: the client
#: passes one that knows its registered tasks (a task it does not know: the JSON as stored).
DecodeResult = Callable[[str, Any], Any]


def wait_for_result(
    job_id: int,
    timeout: float | None,
    decode: DecodeResult | None = None,
    *,
    deadline: Deadline | None = None,
) -> Plan[Any]:
    """Return the job's result once it succeeded; raise if it ended dead or cancelled, if it
    does not keep its result, or if ``timeout`` seconds pass first (None: wait for ever).

    Run on its own autocommit connection: it LISTENs before the first read, so an outcome
    committed in between is never missed. (``result_async`` waits through a listener shared by
    the calls of one event loop instead: :mod:`pgqueue.db.results_listener`.) ``deadline``: one
    the caller started already (its ``timeout`` wins over the argument).
    """
    deadline = deadline or Deadline(job_id, timeout)
    yield Query("listen_results")
    while True:
        finished, value = yield from read_outcome(job_id, decode)
        if finished:
            return value
        wake_at = time.monotonic() + deadline.next_wait()
        while (remaining := wake_at - time.monotonic()) > 0:
            notes = yield Wait(remaining)
            if any(mentions(payload, job_id) for (payload,) in notes):
                break


def read_outcome(job_id: int, decode: DecodeResult | None = None) -> Plan[tuple[bool, Any]]:
    """One look at the job: (True, result) once it succeeded, (False, None) while it is live;
    raises for every other ending (see :func:`outcome`). ``decode`` types the result."""
    row = yield from fetch_first("job_outcome", {"job_id": job_id}, row=class_row(JobOutcomeRow))
    finished, value = outcome(job_id, row)
    if finished and decode is not None and row is not None and row.task is not None:
        value = decode(row.task, value)
    return finished, value


class Deadline:
    """How long a waiter for ``job_id`` may sleep before it looks again."""

    def __init__(self, job_id: int, timeout: float | None) -> None:
        timeout = check_timeout(timeout)  # before any read: a bad one is refused at once
        self.job_id = job_id
        self.timeout = timeout
        self.at = None if timeout is None else time.monotonic() + timeout

    def next_wait(self) -> float:
        """Seconds until the next look (at most the recheck interval); raises
        :class:`ResultTimeoutError` once the timeout has passed."""
        now = time.monotonic()
        if self.at is not None and now >= self.at:
            raise ResultTimeoutError(f"job {self.job_id} did not finish within {self.timeout:g}s")
        return RECHECK_SECONDS if self.at is None else min(RECHECK_SECONDS, self.at - now)


def mentions(payload: str, job_id: int) -> bool:
    return str(job_id) in payload.split(",")


class JobOutcomeRow(NamedTuple):
    """A row of ``job_outcome``: where the job is and how it ended there."""

    place: Place  # live, history, dead, or gone (handed out, yet in no table)
    state: JobState | None
    keeps: bool  # it keeps its result
    result: Any
    error: str | None  # the last error's message
    expired: bool  # its kept result has expired
    rank: int  # gone ranks last: a job in a table is never reported gone
    task: str | None  # None when gone


def outcome(job_id: int, row: JobOutcomeRow | None) -> tuple[bool, Any]:
    """(True, result) for a job that succeeded; (False, None) while it is live; raises for
    every other case, saying which."""
    if row is None:
        raise JobNotFoundError(f"job {job_id} not found: pgqueue never handed out that id")
    if row.place == "gone":
        # Handed out, yet in no table: a succeeded job that kept nothing (its ack was a plain
        # DELETE), or one whose kept result expired and was pruned.
        raise ResultUnavailableError(
            f"job {job_id} is no longer in the queue and did not keep its result: enqueue it "
            "with result_ttl=... (or declare the task with @pgq.task(result_ttl=...)) to keep "
            "it; a kept result also goes once it expired and was pruned, and an id whose "
            "enqueue rolled back names no job"
        )
    if row.place == "live":
        if not row.keeps:
            raise ResultUnavailableError(
                f"job {job_id} does not keep its result: enqueue it with result_ttl=... "
                "(or declare the task with @pgq.task(result_ttl=...))"
            )
        return False, None
    if row.place == "dead":
        raise JobDeadError(job_id, "dead", row.error)
    if row.state == "cancelled":
        raise JobCancelledError(job_id, "cancelled", row.error)
    if not row.keeps:
        raise ResultUnavailableError(
            f"job {job_id} succeeded but did not keep its result (enqueue it with result_ttl=...)"
        )
    if row.expired:
        raise ResultUnavailableError(f"the result of job {job_id} has expired")
    return True, row.result
