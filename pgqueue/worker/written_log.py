"""The completer's log lines about outcomes written: one line per job, its fields in ``extra=``.

The error comes last in a line: its text may hold anything (spaces, ``=``), and in a text line
it runs to the end.
"""

from __future__ import annotations

import logging

from pgqueue.rules.log_actions import Action, Seconds, fields
from pgqueue.worker.outcome import Outcome, clamped_delay

# How much of an error goes into a log line.
_MAX_LOGGED = 300
# What fail_jobs decided, in the words of the logs, and the action of each.
_VERBS = {"retry": "rescheduled", "dead": "dead-lettered", "cancelled": "cancelled"}
_ACTIONS = {
    "retry": Action.JOB_RESCHEDULED,
    "dead": Action.JOB_DEAD_LETTERED,
    "cancelled": Action.JOB_CANCELLED,
    "parked": Action.JOB_PARKED,
}
# Why fail_jobs dead-lettered a job, by outcome kind.
_DEAD_BECAUSE = {
    "error": "max attempts reached",
    "fail": "Fail raised",
    "no_retry": "the retry policy excludes the error",
}


def log_value(text: str) -> str:
    """``text`` as the last value of a log line: one line, clipped."""
    text = " ".join(text.split())
    if len(text) > _MAX_LOGGED:
        text = text[: _MAX_LOGGED - 3] + "..."
    return text


def first_try(log: logging.Logger, outcome: Outcome) -> None:
    _claim_line(
        log,
        logging.INFO,
        outcome,
        Action.OUTCOME_FIRST_TRY,
        "%s already written: the first try committed, its reply was lost",
        outcome.kind,
        queue=True,
    )


def claim_unknown(log: logging.Logger, outcome: Outcome) -> None:
    _claim_line(
        log,
        logging.WARNING,
        outcome,
        Action.OUTCOME_CLAIM_UNKNOWN,
        "%s ignored: the database does not know this worker's claim (lost in a failover "
        "to a standby that had not received it?); the job runs again",
        outcome.kind,
    )


def unknown_first_try(log: logging.Logger, outcome: Outcome) -> None:
    _claim_line(
        log,
        logging.WARNING,
        outcome,
        Action.OUTCOME_FIRST_TRY_UNKNOWN,
        "%s found nothing to write after a lost reply: the first try committed, or the "
        "lease expired meanwhile and another worker took the job over",
        outcome.kind,
    )


def _claim_line(
    log: logging.Logger,
    level: int,
    outcome: Outcome,
    action: Action,
    message: str,
    *args: object,
    queue: bool = False,
) -> None:
    """``message`` (with ``args``), then the fields that name the job and the claim whose
    outcome it is."""
    job = outcome.job
    names: dict[str, object] = {"job_id": job.id, "task": job.task}
    if queue:
        names["queue"] = job.queue
    names["attempt"] = job.attempt
    names["lease_token"] = job.lease_token
    log.log(level, message, *args, extra=fields(action, **names), stacklevel=2)


def outcome_written(log: logging.Logger, outcome: Outcome, written: str) -> None:
    job = outcome.job
    if written == "stale" and outcome.written is not None:
        _claim_line(
            log,
            logging.WARNING,
            outcome,
            Action.OUTCOME_STALE,
            "lease lost: the job's transaction was rolled back, nothing written",
        )
    elif written == "stale":
        _claim_line(
            log,
            logging.WARNING,
            outcome,
            Action.OUTCOME_STALE,
            "stale %s ignored: lease no longer held",
            outcome.kind,
        )
    elif written == "succeeded":
        log.info(
            "job succeeded",
            extra=fields(
                Action.JOB_SUCCEEDED,
                job_id=job.id,
                task=job.task,
                queue=job.queue,
                attempt=job.attempt,
                duration=Seconds(outcome.duration),
            ),
        )
    else:
        park = outcome.park
        said: dict[str, object] = {
            "job_id": job.id,
            "task": job.task,
            "queue": job.queue,
            "attempt": job.attempt,
            "max_attempts": job.max_attempts,
            "outcome": outcome.kind,
        }
        if written == "retry":
            said["delay"] = Seconds(clamped_delay(outcome.delay))
        else:
            said["reason"] = (
                _DEAD_BECAUSE.get(outcome.kind, outcome.kind)
                if written == "dead"
                else park.kind  # sleep or wait
                if written == "parked" and park is not None
                else "cancelled"
            )
        if written == "parked" and park is not None and park.event is not None:
            said["event"] = log_value(park.event)
        if outcome.summary:  # last: its text may hold anything
            said["error"] = log_value(outcome.summary)
        action = _ACTIONS.get(written, Action.JOB_CANCELLED)
        log.info("job %s", _VERBS.get(written, written), extra=fields(action, **said))
