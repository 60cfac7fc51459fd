"""The completer's log lines about outcomes written: one line per job, ``key=value`` fields.

The error comes last in a line: its text may hold anything, and the JSON formatter reads every
word after the last ``key=value`` as part of that value (see :func:`log_value`).
"""

from __future__ import annotations

import logging

from pgqueue.worker.outcome import Outcome, clamped_delay

# How much of an error goes into a log line.
_MAX_LOGGED = 300
# What fail_jobs decided, in the words of the logs.
_VERBS = {"retry": "rescheduled", "dead": "dead-lettered", "cancelled": "cancelled"}
# Why fail_jobs dead-lettered a job, by outcome kind.
_DEAD_BECAUSE = {
    "error": "max attempts reached",
    "fail": "Fail raised",
    "no_retry": "the retry policy excludes the error",
}


def log_value(text: str) -> str:
    """``text`` as the last value of a log line: one line, clipped, and with ``=`` escaped
    where the JSON formatter would take ``word=...`` for a field of its own."""
    text = " ".join(text.split())
    if len(text) > _MAX_LOGGED:
        text = text[: _MAX_LOGGED - 3] + "..."
    return " ".join(
        word.replace("=", "\\=", 1) if word.partition("=")[0].isidentifier() else word
        for word in text.split(" ")
    )


def first_try(log: logging.Logger, outcome: Outcome) -> None:
    _claim_line(
        log,
        logging.INFO,
        outcome,
        "%s already written: the first try committed, its reply was lost",
        outcome.kind,
        queue=True,
    )


def claim_unknown(log: logging.Logger, outcome: Outcome) -> None:
    _claim_line(
        log,
        logging.WARNING,
        outcome,
        "%s ignored: the database does not know this worker's claim (lost in a failover "
        "to a standby that had not received it?); the job runs again",
        outcome.kind,
    )


def unknown_first_try(log: logging.Logger, outcome: Outcome) -> None:
    _claim_line(
        log,
        logging.WARNING,
        outcome,
        "%s found nothing to write after a lost reply: the first try committed, or the "
        "lease expired meanwhile and another worker took the job over",
        outcome.kind,
    )


def _claim_line(
    log: logging.Logger,
    level: int,
    outcome: Outcome,
    message: str,
    *args: object,
    queue: bool = False,
) -> None:
    """``message`` (with ``args``), then the fields that name the job and the claim whose
    outcome it is."""
    job = outcome.job
    fields: dict[str, object] = {"job_id": job.id, "task": job.task}
    if queue:
        fields["queue"] = job.queue
    fields["attempt"] = job.attempt
    fields["lease_token"] = job.lease_token
    line = message + "".join(f" {name}=%s" for name in fields)
    log.log(level, line, *args, *fields.values(), stacklevel=2)


def outcome_written(log: logging.Logger, outcome: Outcome, written: str) -> None:
    job = outcome.job
    if written == "stale" and outcome.written is not None:
        _claim_line(
            log,
            logging.WARNING,
            outcome,
            "lease lost: the job's transaction was rolled back, nothing written",
        )
    elif written == "stale":
        _claim_line(
            log, logging.WARNING, outcome, "stale %s ignored: lease no longer held", outcome.kind
        )
    elif written == "succeeded":
        log.info(
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
        park = outcome.park
        detail: object = (
            clamped_delay(outcome.delay)
            if written == "retry"
            else _DEAD_BECAUSE.get(outcome.kind, outcome.kind)
            if written == "dead"
            else park.kind  # sleep or wait
            if written == "parked" and park is not None
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
        if written == "parked" and park is not None and park.event is not None:
            line += " event=%s"
            args.append(log_value(park.event))
        if outcome.summary:
            line += " error=%s"
            args.append(log_value(outcome.summary))
        log.info(line, *args)
