"""Durable jobs in the database: step checkpoints, events, parking a job (``durable.sql``).

Each function is a plan (:mod:`pgqueue.db.plan`), so a sync and an async handler, the client and
the CLI share it. What a checkpoint costs: :func:`write_step` is one statement, fenced by the
job's lease token; :func:`load_steps` one query, the first time a run calls ``ctx.step``.
"""

from __future__ import annotations

from datetime import datetime, timedelta
from typing import Any, NamedTuple

from psycopg.rows import class_row, dict_row

from pgqueue.db.plan import Plan, Runner, fetch_all, fetch_first, fetch_value, fetch_values

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
    worker_id: str,
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
    one statement, written only while ``token`` is the job's lease, held by ``worker_id``.
    False: the lease was lost (or the step had succeeded already), nothing written."""
    params = {
        "id": job_id,
        "token": token,
        "worker": worker_id,
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


def parked_on(state: str | None, steps: list[dict[str, Any]]) -> dict[str, Any] | None:
    """What a parked job waits for, from its steps (``job_steps``' rows): ``{"kind": "sleep",
    "until": wake}`` or ``{"kind": "wait", "event": name, "until": timeout}`` while the job is
    ``scheduled`` and its last step is a sleep or wait still ``waiting``; else None."""
    if state != "scheduled" or not steps:
        return None
    last = steps[-1]
    if last.get("state") != WAITING or last.get("kind") not in ("sleep", "wait"):
        return None
    parked = {"kind": last["kind"], "until": last.get("wake_at")}
    if last["kind"] == "wait":
        parked["event"] = last.get("event")
    return parked


def job_detail(pgq: Runner, job_id: int) -> dict[str, Any] | None:
    """``views.job_detail`` with the job's durable ``steps`` (empty for a plain job) and what
    it is ``parked`` on (:func:`parked_on`): ``pgq jobs show`` and the dashboard's job page."""
    from pgqueue.db import views

    job = views.job_detail(pgq, job_id)
    if job is not None:
        job["steps"] = pgq.run(job_steps(job_id))
        job["parked"] = parked_on(job.get("state"), job["steps"])
    return job


class ParkedJobs(NamedTuple):
    """Parked jobs of one queue (``parked_jobs``): sleeping, and waiting for an event."""

    queue: str
    sleeping: int
    waiting: int


def parked_jobs() -> Plan[list[ParkedJobs]]:
    """Parked jobs per queue (the metrics' gauges); queues with none are left out."""
    return (yield from fetch_all("parked_jobs", row=class_row(ParkedJobs)))
