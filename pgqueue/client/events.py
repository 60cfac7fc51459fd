"""``pgq.emit_event()``: emit an event that durable jobs wait for (``ctx.wait_for_event``).

The emit is one statement, ``pgqueue.emit_event(name, payload, keep)``, on the caller's
connection (``conn=``, inside its transaction) or a pooled one: the event is visible, and the
jobs waiting for it are woken, when that transaction commits; a rolled-back emit wakes nobody.
The first emit of a name wins: later ones (while the event is kept) change nothing and return
False. The event is kept (``keep``, default: the history retention, at least a day) so that a
job that waits for it later still gets it.
"""

from __future__ import annotations

from datetime import timedelta
from typing import Any

from pgqueue.db import durable
from pgqueue.db.plan import Plan, Runner
from pgqueue.errors import InvalidJobError
from pgqueue.rules.options import to_timedelta
from pgqueue.rules.payload import check_name, dumps


def emit_plan(name: str, payload: Any, *, keep: float | timedelta | None, limit: int) -> Plan[bool]:
    """The emit checked: a name (1 to 200 characters), a JSON payload within ``limit`` bytes
    (typed values stored as :mod:`pgqueue.rules.codec` stores them), a positive ``keep``."""
    check_name(name, "an event's name")
    text = None if payload is None else dumps(payload, limit=limit, what="the event's payload")
    kept = None if keep is None else to_timedelta(keep, "an event's keep")
    if kept is not None and kept <= timedelta(0):
        raise InvalidJobError(f"an event's keep must be positive, got {keep!r}")
    return durable.emit_event(name, text, kept)


def emit_event(
    pgq: Runner,
    name: str,
    payload: Any = None,
    *,
    conn: object | None = None,
    keep: float | timedelta | None = None,
    limit: int,
) -> bool:
    """Emit ``name`` with ``payload`` (see the module docstring). True: this emit won."""
    return pgq.run(emit_plan(name, payload, keep=keep, limit=limit), conn)


async def emit_event_async(
    pgq: Runner,
    name: str,
    payload: Any = None,
    *,
    conn: object | None = None,
    keep: float | timedelta | None = None,
    limit: int,
) -> bool:
    """The async form of :func:`emit_event`."""
    return await pgq.run_async(emit_plan(name, payload, keep=keep, limit=limit), conn)
