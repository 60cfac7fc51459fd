"""pgqueue's words, declared once: a job's states, the places a job lives, what an attempt
amounts to, why a handler is asked to stop, and the states of a ``ctx.transaction()`` block.

Each is a ``Literal`` type (so a misspelt value is a type error where it is written) and the
tuple of its values, derived from the type (so code that lists them never respells them). The
dashboard receives them from the server, and ``tests/unit/test_vocabulary.py`` holds them against
the CHECK constraints of ``migrations/schema.sql``.

The job state machine. A job is a row in one of three tables, its *place*:

- ``pgqueue.jobs`` (``live``), in one of the live states:

  - ``waiting``: a workflow step whose parents have not all succeeded yet;
  - ``scheduled``: its ``run_at`` is in the future (a delay, a retry's backoff);
  - ``ready``: a worker may claim it now;
  - ``running``: claimed, with a lease (``lease_expires_at``) and a ``lease_token``.

- ``pgqueue.job_history`` (``history``), finished: ``succeeded`` (kept when it keeps its
  result, belongs to a workflow or history is on; otherwise a succeeded job is deleted) or
  ``cancelled``.
- ``pgqueue.dead_letters`` (``dead``): it failed for good (its attempts spent, ``Fail``, an
  undecodable argument); its state is ``dead``.

A job that pgqueue handed out an id for and that is in none of them (a succeeded job that kept
nothing, or a kept result pruned) is ``gone``.

The state machine (finished jobs leave ``pgqueue.jobs``)::

    scheduled --(run_at <= now)--> ready --claim--> running --ack-----------> (deleted)
        ^                            ^                 |  \\--cancel requested-> job_history
        |                            |                 |                         (cancelled)
        +---- error, attempts left / Retry ------------+
        |                            |                 +--Fail / no attempts--> dead_letters
        |                            +---- release ----+   (graceful shutdown,     |
        +---- reaper: lease expired, attempts left ----+    attempt not burned)   replay
                                                      \\--lease expired, no        |
                                                          attempts -> dead_letters  v
                                                                                  ready

    waiting --(every parent succeeded: settled in the parent's ack)--> ready / scheduled
        \\--(a parent ended dead or cancelled)--> job_history (cancelled)

A successful ack deletes the row; it records it in job_history too (with the return value)
when the job keeps its result (result_ttl, workflow members) or history is switched on.

Every transition out of ``running`` is a statement fenced by ``lease_token``: only the holder
of the current claim can make it, so a worker that lost its lease (stalled, partitioned,
reaped) changes nothing. All times come from the database clock.
"""

from __future__ import annotations

from typing import Literal, get_args

#: Where a job lives while it may still run (``pgqueue.jobs.state``).
LiveState = Literal["waiting", "scheduled", "ready", "running"]
#: A finished job in ``pgqueue.job_history``.
HistoryState = Literal["succeeded", "cancelled"]
#: How a job finished (``unique_states``, ``pgqueue.idempotency_keys.state``).
FinishedState = Literal["succeeded", "dead", "cancelled"]
#: A job in ``pgqueue.dead_letters``.
DeadState = Literal["dead"]
#: Every state a job can be in, wherever it lives.
JobState = Literal[LiveState, HistoryState, DeadState]

LIVE_STATES: tuple[LiveState, ...] = get_args(LiveState)
HISTORY_STATES: tuple[HistoryState, ...] = get_args(HistoryState)
FINISHED_STATES: tuple[FinishedState, ...] = get_args(FinishedState)
JOB_STATES: tuple[JobState, ...] = get_args(JobState)

#: The table a job is in (``live``: ``pgqueue.jobs``, ``history``: ``pgqueue.job_history``,
#: ``dead``: ``pgqueue.dead_letters``), or ``gone``: handed out, yet in none of them.
Place = Literal["live", "history", "dead", "gone"]
PLACES: tuple[Place, ...] = get_args(Place)
#: The places that are tables, and the table each is.
PLACE_TABLES: dict[Place, str] = {
    "live": "jobs",
    "history": "job_history",
    "dead": "dead_letters",
}

#: What one attempt amounts to, as the completer writes it: ``ack`` (succeeded), ``error``
#: (raised: retried while attempts remain, else dead), ``retry`` (``Retry``: again, after its
#: delay, attempts permitting), ``fail`` (``Fail`` or unrunnable: dead now), ``cancelled``
#: (stopped on request), ``no_retry`` (raised an error its retry policy does not retry: dead),
#: ``park`` (a durable sleep or wait: the job leaves the worker until it wakes, attempt given back).
OutcomeKind = Literal["ack", "error", "retry", "fail", "cancelled", "no_retry", "park"]
OUTCOME_KINDS: tuple[OutcomeKind, ...] = get_args(OutcomeKind)

#: Why a handler is asked to stop: ``cancelled`` (an operator cancelled the job), ``lease lost``
#: (the job was reaped or re-claimed, so this worker no longer owns it), ``timeout`` (it ran past
#: the task's timeout), ``shutdown`` (the worker is stopping and will give the job back).
CancelReason = Literal["cancelled", "lease lost", "timeout", "shutdown"]
CANCEL_REASONS: tuple[CancelReason, ...] = get_args(CancelReason)


def cancel_reason(value: object) -> CancelReason:
    """``value`` (read from a message between processes) as a cancel reason; raises
    ValueError for anything else."""
    for reason in CANCEL_REASONS:
        if value == reason:
            return reason
    raise ValueError(f"not a cancel reason: {value!r}")


#: A ``ctx.transaction()`` block's state (None on the context: no block, or one that ended
#: without writing): ``open`` (the handler writes; the lease is still extended), ``completing``
#: (the completion was sent; the row is locked by the block's transaction), ``committed`` (the
#: job is complete), ``lost`` (the completion found the lease lost: rolled back), ``unknown``
#: (the COMMIT's reply was lost and its fate could not be learned).
TransactionState = Literal["open", "completing", "committed", "lost", "unknown"]
TRANSACTION_STATES: tuple[TransactionState, ...] = get_args(TransactionState)

#: A workflow's state, as ``pgqueue.workflow_overview`` derives it from its jobs.
WorkflowState = Literal["running", "failing", "failed", "succeeded"]
WORKFLOW_STATES: tuple[WorkflowState, ...] = get_args(WorkflowState)

#: A circuit breaker's state (``pgqueue.circuit_breakers.state``).
BreakerState = Literal["closed", "open", "half_open"]
BREAKER_STATES: tuple[BreakerState, ...] = get_args(BreakerState)
