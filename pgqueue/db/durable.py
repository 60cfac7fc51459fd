"""Durable jobs in the database: step checkpoints, events, parking a job (``durable.sql``).

Each function is a plan (:mod:`pgqueue.db.plan`), so a sync and an async handler, the client and
the CLI share it. What a checkpoint costs: :func:`write_step` is one statement, fenced by the
job's lease token; :func:`load_steps` one query, the first time a run calls ``ctx.step``.
"""

from __future__ import annotations

from datetime import datetime, timedelta
from typing import Any, NamedTuple

from psycopg.rows import class_row, dict_row

from pgqueue.db.plan import Plan, fetch_all, fetch_first, fetch_value, fetch_values

#: What a step's row says it is (``job_steps.state``).
SUCCEEDED = "succeeded"
FAILED = "failed"
WAITING = "waiting"
TIMED_OUT = "timed_out"


class Checkpoint(NamedTuple):
    """A step a job recorded (a row of ``job_steps``, as ``load_steps`` reads it)."""

    seq: int
    name: str
    kind: str  # step, sleep, wait
    state: str
    attempts: int
    result: Any  # the step's JSON result (None unless succeeded)


def load_steps(job_id: int) -> Plan[list[Checkpoint]]:
    """Every step the job recorded, in the order they ran."""
    return (yield from fetch_all("load_steps", {"id": job_id}, row=class_row(Checkpoint)))


def write_step(
    job_id: int,
    token: int,
    *,
    seq: int,
    name: str,
    state: str,
    attempts: int,
    elapsed: float,
    result: str | None = None,
    error: str | None = None,
) -> Plan[bool]:
    """A step's checkpoint (``result``: its JSON) or its failure (``error``: a JSON object):
    one statement, written only while ``token`` is the job's lease. False: the lease was lost
    (or the step had succeeded already), nothing written."""
    params = {
        "id": job_id,
        "token": token,
        "seq": seq,
        "name": name,
        "state": state,
        "attempts": attempts,
        "elapsed": max(0.0, elapsed),
        "result": result,
        "error": error,
    }
    return bool((yield from fetch_values("write_step", params)))


def emit_event(name: str, payload: str | None, keep: timedelta | None = None) -> Plan[bool]:
    """``pgqueue.emit_event`` in the connection's transaction (``payload``: JSON text). True:
    this emit was the first of the name (still kept)."""
    won = yield from fetch_value("emit_event", {"name": name, "payload": payload, "keep": keep})
    return bool(won)


def park_sleep(
    job_id: int,
    token: int,
    *,
    seq: int,
    name: str,
    delay: float | None = None,
    until: datetime | None = None,
) -> Plan[datetime | None]:
    """Park a running job until ``until`` (else now + ``delay`` seconds, by the database's
    clock), its sleep recorded as step ``seq``: the wake time, or None if the lease was lost."""
    params = {
        "id": job_id,
        "token": token,
        "seq": seq,
        "name": name,
        "delay": delay if delay is not None else 0.0,
        "until": until,
    }
    wake: datetime | None = yield from fetch_value("park_sleep", params)
    return wake


class Wait(NamedTuple):
    """What ``park_for_event`` did: ``succeeded`` (``payload``: the event's), ``timed_out``,
    ``parked`` or ``lost``."""

    state: str
    payload: Any


def park_for_event(
    job_id: int,
    token: int,
    *,
    seq: int,
    name: str,
    event: str,
    timeout: float | None,
) -> Plan[Wait]:
    """A running job waits for ``event`` at most ``timeout`` seconds from when the wait was
    first parked (None: no timeout); see ``pgqueue.park_for_event``."""
    params = {
        "id": job_id,
        "token": token,
        "seq": seq,
        "name": name,
        "event": event,
        "timeout": None if timeout is None else timedelta(seconds=timeout),
    }
    row = yield from fetch_first("park_for_event", params, row=class_row(Wait))
    return row if row is not None else Wait("lost", None)


def job_steps(job_id: int) -> Plan[list[dict[str, Any]]]:
    """A job's steps as ``pgqueue.job_step_status`` shows them (``duration`` in seconds)."""
    return (yield from fetch_all("job_steps", {"id": job_id}, row=dict_row))
