"""``PgQueue``'s events (a base class of :class:`~pgqueue.PgQueue`), of two kinds.

- :meth:`~EventMethods.publish` enqueues one job for every task subscribed to an event
  (``@pgq.task(on=...)``).
- :meth:`~EventMethods.emit_event` emits an event that durable jobs wait for
  (``ctx.wait_for_event``). The emit is one statement, ``pgqueue.emit_event(name, payload,
  keep)``, on the caller's connection (``conn=``, inside its transaction) or a pooled one: the
  event is visible, and the jobs waiting for it are woken, when that transaction commits; a
  rolled-back emit wakes nobody. The first emit of a name wins: later ones (while the event is
  kept) change nothing and return False. The event is kept (``keep``, default: the history
  retention, at least a day) so that a job that waits for it later still gets it.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from datetime import timedelta
from typing import TYPE_CHECKING, Any, TypeVar

from pgqueue.db import durable
from pgqueue.db.connections import AsyncConnectionArg, ConnectionArg
from pgqueue.db.plan import Plan, Runner
from pgqueue.errors import InvalidJobError
from pgqueue.rules.job_specs import JobId, JobSpec
from pgqueue.rules.options import to_timedelta
from pgqueue.rules.payload import check_name, dumps

if TYPE_CHECKING:
    from pgqueue.rules.tasks import JobCall, Task

T = TypeVar("T")


def emit_plan(name: str, payload: Any, *, keep: float | timedelta | None, limit: int) -> Plan[bool]:
    """The emit checked: a name (1 to 200 characters), a JSON payload within ``limit`` bytes
    (typed values stored as :mod:`pgqueue.rules.codec` stores them), a positive ``keep``."""
    check_name(name, "an event's name")
    text = None if payload is None else dumps(payload, limit=limit, what="the event's payload")
    kept = None if keep is None else to_timedelta(keep, "an event's keep")
    if kept is not None and kept <= timedelta(0):
        raise InvalidJobError(f"an event's keep must be positive, got {keep!r}")
    return durable.emit_event(name, text, kept)


class EventMethods(Runner):
    """:meth:`publish` and :meth:`emit_event`, and their async twins."""

    if TYPE_CHECKING:  # PgQueue's (see pgqueue.client.core)
        subscriptions: dict[str, list[Task[..., Any]]]
        max_payload_bytes: int

        def enqueue_many(
            self,
            jobs: Iterable[JobCall | JobSpec],
            *,
            conn: ConnectionArg | None = None,
            wait_if_full: float | None = None,
        ) -> list[JobId]: ...

        async def enqueue_many_async(
            self,
            jobs: Iterable[JobCall | JobSpec],
            *,
            conn: AsyncConnectionArg | None = None,
            wait_if_full: float | None = None,
        ) -> list[JobId]: ...

    def publish(
        self,
        event: str,
        payload: Mapping[str, Any] | None = None,
        *,
        conn: ConnectionArg | None = None,
    ) -> list[JobId]:
        """Enqueue one job for every task subscribed to ``event`` (``@pgq.task(on=event)``),
        with ``payload`` as its arguments, in one transaction (the caller's with ``conn``).
        Every subscriber's arguments are checked before anything is written. Returns the job
        ids in subscription order ([] when nothing subscribes)."""
        specs = self._event_specs(event, payload)
        return self.enqueue_many(specs, conn=conn) if specs else []

    async def publish_async(
        self,
        event: str,
        payload: Mapping[str, Any] | None = None,
        *,
        conn: AsyncConnectionArg | None = None,
    ) -> list[JobId]:
        """The async twin of :meth:`publish`."""
        specs = self._event_specs(event, payload)
        return await self.enqueue_many_async(specs, conn=conn) if specs else []

    def _event_specs(self, event: str, payload: Mapping[str, Any] | None) -> list[JobSpec]:
        check_name(event, "event name")
        if payload is not None and not isinstance(payload, Mapping):
            raise InvalidJobError(
                f"an event payload must be a JSON object (a mapping), got {type(payload).__name__}"
            )
        return [task.s(**dict(payload or {})).spec() for task in self.subscriptions.get(event, [])]

    def emit_event(
        self,
        name: str,
        payload: Any = None,
        *,
        conn: ConnectionArg | None = None,
        keep: float | timedelta | None = None,
    ) -> bool:
        """Emit the event ``name`` with a JSON ``payload``, in ``conn``'s transaction (a
        rolled-back emit wakes nobody); the first emit of a name wins (True), later ones
        return False. ``keep``: how long it is kept for jobs that wait later (default: the
        history retention, at least a day). See :mod:`pgqueue.client.events`."""
        plan = emit_plan(name, payload, keep=keep, limit=self.max_payload_bytes)
        return self.run(plan, conn)

    async def emit_event_async(
        self,
        name: str,
        payload: Any = None,
        *,
        conn: AsyncConnectionArg | None = None,
        keep: float | timedelta | None = None,
    ) -> bool:
        """The async twin of :meth:`emit_event`."""
        plan = emit_plan(name, payload, keep=keep, limit=self.max_payload_bytes)
        return await self.run_async(plan, conn)
