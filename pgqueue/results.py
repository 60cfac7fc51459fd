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
clear error instead of crashing anything.

``pgq.result(job_id, timeout=...)`` LISTENs on ``pgqueue_results`` (the history and dead-letter
triggers notify the ids of jobs that finished, a few hundred ids per NOTIFY), reads the job's
state, and re-reads it only when its id is announced (or every few seconds as insurance), so
waiting costs no polling. The waiting logic is one plan shared by the sync and async APIs.
"""

from __future__ import annotations

import time
from typing import Any

from pgqueue.db.plan import Plan, Query, Wait
from pgqueue.errors import (
    JobCancelledError,
    JobDeadError,
    JobNotFoundError,
    ResultTimeoutError,
    ResultUnavailableError,
)

#: Re-read the job this often even without a notification (insurance, not the mechanism).
RECHECK_SECONDS = 10.0


def wait_for_result(job_id: int, timeout: float | None) -> Plan[Any]:
    """Return the job's result once it succeeded; raise if it ended dead or cancelled, if it
    does not keep its result, or if ``timeout`` seconds pass first (None: wait for ever).

    Run on its own autocommit connection: it LISTENs before the first read, so an outcome
    committed in between is never missed.
    """
    if timeout is not None and timeout < 0:
        raise ValueError("timeout must not be negative")
    yield Query("listen_results")
    deadline = None if timeout is None else time.monotonic() + timeout
    while True:
        rows = yield Query("job_outcome", {"job_id": job_id})
        finished, value = outcome(job_id, rows)
        if finished:
            return value
        now = time.monotonic()
        if deadline is not None and now >= deadline:
            raise ResultTimeoutError(f"job {job_id} did not finish within {timeout:g}s")
        wake_at = now + RECHECK_SECONDS
        if deadline is not None:
            wake_at = min(wake_at, deadline)
        while (remaining := wake_at - time.monotonic()) > 0:
            notes = yield Wait(remaining)
            if any(mentions(payload, job_id) for (payload,) in notes):
                break


def mentions(payload: str, job_id: int) -> bool:
    return str(job_id) in payload.split(",")


def outcome(job_id: int, rows: list[tuple[Any, ...]]) -> tuple[bool, Any]:
    """(True, result) for a job that succeeded; (False, None) while it is live; raises for
    every other case, saying which."""
    if not rows:
        raise JobNotFoundError(
            f"job {job_id} not found: unknown id, or it finished and its record is gone "
            "(only jobs that keep their result can be asked for it)"
        )
    place, state, keeps, result, error, expired = rows[0]
    if place == "live":
        if not keeps:
            raise ResultUnavailableError(
                f"job {job_id} does not keep its result: enqueue it with result_ttl=... "
                "(or declare the task with @pgq.task(result_ttl=...))"
            )
        return False, None
    if place == "dead":
        raise JobDeadError(job_id, "dead", error)
    if state == "cancelled":
        raise JobCancelledError(job_id, "cancelled", error)
    if not keeps:
        raise ResultUnavailableError(
            f"job {job_id} succeeded but did not keep its result (enqueue it with result_ttl=...)"
        )
    if expired:
        raise ResultUnavailableError(f"the result of job {job_id} has expired")
    return True, result
