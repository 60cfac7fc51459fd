"""``PgQueue``'s events (a base class of :class:`~pgqueue.PgQueue`): :meth:`publish` enqueues
one job for every task subscribed to an event (``@pgq.task(on=...)``)."""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from typing import TYPE_CHECKING, Any

from pgqueue.db.connections import AsyncConnectionArg, ConnectionArg
from pgqueue.errors import InvalidJobError
from pgqueue.rules.job_specs import JobId, JobSpec
from pgqueue.rules.payload import check_name

if TYPE_CHECKING:
    from pgqueue.rules.tasks import JobCall, Task


class EventMethods:
    """:meth:`publish` and :meth:`publish_async`."""

    if TYPE_CHECKING:  # PgQueue's (see pgqueue.client.core)
        subscriptions: dict[str, list[Task[..., Any]]]

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
