"""Durable sleeps and waits, the handler's side: ``ctx.sleep()``, ``ctx.sleep_until()``,
``ctx.wait_for_event()`` (and their ``_async`` forms).

A sleep or a wait is a step of the job (its place in the run, like :mod:`pgqueue.handler.steps`,
kind ``sleep`` or ``wait``). Reached for the first time, it ends the run: the handler raises
:class:`JobParked`, a ``BaseException`` (so that a handler's ``except Exception`` does not catch
it), which the worker catches; the worker's completer then parks the job in one statement fenced
by its lease token (``park_sleep`` / ``park_for_event`` in ``pgqueue/db/queries/durable.sql``):
the job is ``scheduled`` until its wake time, holds no lease, slot or connection, and the attempt
does not count. When it runs again, its steps replay from their checkpoints up to the sleep,
which is over (its row is in the checkpoints), or the wait, which returns the event's payload
(an emit completed it) or raises :class:`~pgqueue.EventTimeout`.

Only a worker that parks jobs may be asked to: its transaction host says so
(``parks_jobs = True``); elsewhere these calls raise :class:`~pgqueue.StepError` before anything
is recorded.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from datetime import datetime, timedelta
from typing import TYPE_CHECKING, Any

from pgqueue.db import durable
from pgqueue.errors import EventTimeout, InvalidJobError, StepError
from pgqueue.handler.steps import SLEEP, WAIT, StepRun, host_of
from pgqueue.rules.payload import check_name

if TYPE_CHECKING:
    from pgqueue.handler.job_context import JobContext
    from pgqueue.handler.job_transaction import TransactionHost

#: The longest a sleep or a wait may be (a wait without a timeout parks for a hundred years).
MAX_SECONDS = 100 * 365 * 24 * 3600.0


@dataclass(eq=False)
class JobParked(BaseException):
    """Raised by a handler's sleep or wait: the worker parks the job (see the module
    docstring). ``kind``: ``sleep`` (wake at ``until``, else ``delay`` seconds from now by the
    database's clock) or ``wait`` (for ``event``, at most ``timeout`` seconds from when it first
    parked; None: no timeout). What the completer passes to ``park_sleep`` / ``park_for_event``."""

    job_id: int
    lease_token: int
    kind: str
    seq: int
    name: str
    delay: float | None = None
    until: datetime | None = None
    event: str | None = None
    timeout: float | None = None

    def __str__(self) -> str:
        what = f"until {self.until}" if self.until else f"for {self.delay}s"
        if self.kind == WAIT:
            what = f"for event {self.event!r}"
        return f"job {self.job_id} parks: {self.kind} {self.name!r} {what}"


def _seconds(value: float | timedelta, what: str) -> float:
    seconds = value.total_seconds() if isinstance(value, timedelta) else value
    if (
        isinstance(seconds, bool)
        or not isinstance(seconds, int | float)
        or not math.isfinite(seconds)
    ):
        raise InvalidJobError(f"{what} must be a number of seconds or a timedelta, got {value!r}")
    if seconds < 0 or seconds > MAX_SECONDS:
        raise InvalidJobError(f"{what} must be between 0 and 100 years, got {seconds:g}s")
    return float(seconds)


def _aware(when: datetime, what: str) -> datetime:
    if not isinstance(when, datetime):
        raise InvalidJobError(f"{what} must be a datetime, got {type(when).__name__}")
    if when.tzinfo is None:
        raise InvalidJobError(f"{what} must be timezone-aware (a naive datetime has no instant)")
    return when


def _parking_host(ctx: JobContext, what: str) -> TransactionHost:
    host = host_of(ctx, what)
    if not getattr(host, "parks_jobs", False):
        raise StepError(
            f"{what} parks the job, and this worker does not park jobs yet: durable sleeps and "
            "waits are coming (see docs/guide/durable.md); use ctx.step() checkpoints meanwhile"
        )
    return host


@dataclass(frozen=True)
class SleepCall:
    """A sleep as the handler asked for it, checked."""

    name: str
    repeat: bool  # a sleep without a name of its own: sleep#1, sleep#2, ...
    delay: float | None
    until: datetime | None


def sleep_call(
    seconds: float | timedelta | None, until: datetime | None, name: str | None
) -> SleepCall:
    if until is not None:
        when = _aware(until, "sleep_until()'s time")
        return SleepCall(name or "sleep", name is None, None, when)
    assert seconds is not None
    return SleepCall(name or "sleep", name is None, _seconds(seconds, "sleep()'s duration"), None)


def sleep_step(ctx: JobContext, run: StepRun, call: SleepCall) -> None:
    """The sleep's place in the run: over when the checkpoints hold it, else the job parks."""
    seq, full, recorded = run.place(call.name, SLEEP, repeat=call.repeat)
    if recorded is not None and recorded.state != durable.FAILED:
        return  # parked and woken: the sleep is over
    raise JobParked(ctx.id, ctx.job.lease_token, SLEEP, seq, full, call.delay, call.until)


@dataclass(frozen=True)
class WaitCall:
    """A wait as the handler asked for it, checked."""

    event: str
    timeout: float | None


def wait_call(event: str, timeout: float | timedelta | None) -> WaitCall:
    check_name(event, "an event's name")
    return WaitCall(
        event, None if timeout is None else _seconds(timeout, "wait_for_event()'s timeout")
    )


def wait_step(ctx: JobContext, run: StepRun, call: WaitCall) -> Any:
    """The wait's place in the run: the event's payload when an emit completed it,
    :class:`~pgqueue.EventTimeout` when it timed out, else the job parks (again: a wait whose
    timeout came parks once more, and the database settles it)."""
    seq, full, recorded = run.place(f"wait:{call.event}", WAIT, repeat=True)
    if recorded is not None and recorded.state == durable.SUCCEEDED:
        return recorded.result
    if recorded is not None and recorded.state == durable.TIMED_OUT:
        raise EventTimeout(
            f"job {ctx.id} waited for event {call.event!r} past its timeout"
            + (f" ({call.timeout:g}s)" if call.timeout is not None else "")
        )
    raise JobParked(
        ctx.id, ctx.job.lease_token, WAIT, seq, full, event=call.event, timeout=call.timeout
    )


def check_parking(ctx: JobContext, what: str) -> None:
    """Refuse before anything is recorded when the worker cannot park the job."""
    _parking_host(ctx, what)
