"""``PgQueue``'s scheduling and flow-control methods, mixed into :class:`~pgqueue.PgQueue`:
queue and task settings, circuit breakers, cron schedules, fan-out, and the start-up sync of
what the code declares. Kept apart from ``client.py`` so that module stays about enqueueing and
connections.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from typing import TYPE_CHECKING, Any, TypeVar

from pgqueue import flow
from pgqueue import schedules as cron
from pgqueue.db import plan as plans
from pgqueue.declarations import declarations
from pgqueue.enqueue import JobId, JobSpec
from pgqueue.errors import InvalidJobError
from pgqueue.flow import UNSET
from pgqueue.payload import check_name
from pgqueue.schedules import Schedule

if TYPE_CHECKING:
    from pgqueue.db.connections import AsyncConnectionArg, ConnectionArg
    from pgqueue.tasks import JobCall, Task

T = TypeVar("T")


class FlowControlMixin:
    tasks: dict[str, Task[..., Any]]
    #: event name -> tasks subscribed with ``@pgq.task(on=...)`` (see :meth:`publish`)
    subscriptions: dict[str, list[Task[..., Any]]]
    #: schedules declared with ``@pgq.periodic``; workers write them at start-up
    schedules: dict[str, Schedule]

    if TYPE_CHECKING:  # provided by PgQueue

        def run(
            self, plan: plans.Plan[T], conn: ConnectionArg | None = None, *, atomic: bool = False
        ) -> T: ...

        async def run_async(
            self,
            plan: plans.Plan[T],
            conn: AsyncConnectionArg | None = None,
            *,
            atomic: bool = False,
        ) -> T: ...

        def spec(
            self,
            task: str | Task[..., Any],
            args: Mapping[str, Any] | None,
            options: Mapping[str, Any],
        ) -> JobSpec: ...

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

    # -- fan-out -----------------------------------------------------------------------------

    def _event_specs(self, event: str, payload: Mapping[str, Any] | None) -> list[JobSpec]:
        check_name(event, "event name")
        if payload is not None and not isinstance(payload, Mapping):
            raise InvalidJobError(
                f"an event payload must be a JSON object (a mapping), got {type(payload).__name__}"
            )
        return [task.s(**dict(payload or {})).spec() for task in self.subscriptions.get(event, [])]

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

    # -- flow control ------------------------------------------------------------------------

    def configure_queue(
        self,
        queue: str,
        *,
        weight: Any = UNSET,
        max_depth: Any = UNSET,
        concurrency_limit: Any = UNSET,
        rate_limit: Any = UNSET,
        conn: ConnectionArg | None = None,
    ) -> dict[str, Any]:
        """Change a queue's flow-control settings (arguments left out stay as they are; None
        clears one): ``weight`` (fair share of a worker's slots), ``max_depth`` (backpressure),
        ``concurrency_limit`` (running at once, fleet-wide), ``rate_limit`` (``"20/s"``)."""
        return self.run(
            flow.configure_queue(
                queue,
                weight=weight,
                max_depth=max_depth,
                concurrency_limit=concurrency_limit,
                rate_limit=rate_limit,
            ),
            conn,
        )

    def configure_task(
        self,
        task: str,
        *,
        concurrency_limit: Any = UNSET,
        key_limit: Any = UNSET,
        rate_limit: Any = UNSET,
        conn: ConnectionArg | None = None,
    ) -> dict[str, Any]:
        """Change a task's limits in the database (the next worker start re-applies what the
        code declares for that task)."""
        return self.run(
            flow.configure_task(
                task,
                concurrency_limit=concurrency_limit,
                key_limit=key_limit,
                rate_limit=rate_limit,
            ),
            conn,
        )

    def queue_settings(self) -> list[dict[str, Any]]:
        """Every configured queue's settings (``pgqueue.queues``): paused, weight, max depth,
        limits."""
        return self.run(flow.list_queue_settings())

    def task_limits(self) -> list[dict[str, Any]]:
        """Every task's limits (``pgqueue.task_limits``): concurrency, per-key limit, rate."""
        return self.run(flow.list_task_limits())

    def circuit_breakers(self) -> list[dict[str, Any]]:
        """Every task's breaker (view ``pgqueue.circuit_breaker_status``)."""
        return self.run(flow.list_breakers())

    def reset_breaker(self, task: str) -> bool:
        """Close a task's breaker now (its jobs are claimed again)."""
        return self.run(flow.set_breaker(task, "closed"))

    def trip_breaker(self, task: str, seconds: float | None = None) -> bool:
        """Open a task's breaker by hand for ``seconds`` (default: its cooldown)."""
        return self.run(flow.set_breaker(task, "open", seconds))

    def sync_declarations(self, conn: ConnectionArg | None = None) -> None:
        """Write what the code declares (task limits, breakers, ``@periodic`` schedules) to
        the database. Workers do this at start-up."""
        self.run(declarations(self), conn, atomic=True)

    async def sync_declarations_async(self, conn: AsyncConnectionArg | None = None) -> None:
        """The async twin of :meth:`sync_declarations`."""
        await self.run_async(declarations(self), conn, atomic=True)

    # -- schedules ---------------------------------------------------------------------------

    def schedule(
        self,
        name: str,
        cron_expression: str,
        task: str | Task[..., Any],
        args: Mapping[str, Any] | None = None,
        *,
        tz: str = "UTC",
        missed: str = "skip",
        grace: float = 60.0,
        max_catch_up: int = 100,
        queue: str | None = None,
        priority: int | None = None,
        max_attempts: int | None = None,
        conn: ConnectionArg | None = None,
    ) -> None:
        """Create or update a cron schedule from code at run time (a row in
        ``pgqueue.schedules``; running workers pick it up)."""
        spec = self.spec(task, args, {"queue": queue, "priority": priority,
                                      "max_attempts": max_attempts})  # fmt: skip
        definition = Schedule(
            name=name,
            cron=cron_expression,
            task=spec.task,
            args=dict(args or {}),
            tz=tz,
            queue=spec.queue,
            priority=spec.priority,
            max_attempts=spec.max_attempts,
            missed=missed,
            grace=grace,
            max_catch_up=max_catch_up,
        )
        self.run(cron.save([definition], from_code=False), conn, atomic=True)

    def unschedule(self, name: str, *, conn: ConnectionArg | None = None) -> bool:
        """Delete the schedule ``name``; False if there was none."""
        return self.run(cron.delete(name), conn)

    def pause_schedule(self, name: str, *, conn: ConnectionArg | None = None) -> bool:
        """Pause the schedule ``name`` (no ticks are enqueued until resumed); False if there is
        none."""
        return self.run(cron.set_paused(name, True), conn, atomic=True)

    def resume_schedule(self, name: str, *, conn: ConnectionArg | None = None) -> bool:
        """Resume at the next tick from now (ticks while paused are not caught up)."""
        return self.run(cron.set_paused(name, False), conn, atomic=True)

    def list_schedules(self) -> list[dict[str, Any]]:
        """Every schedule (``pgqueue.schedules``): expression, time zone, next tick, paused, ticks
        enqueued and skipped."""
        return self.run(cron.list_schedules())
