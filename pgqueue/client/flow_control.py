"""``pgq.flow``: flow control from code (the plans are in :mod:`pgqueue.db.flow_plans` and
:mod:`pgqueue.db.admin`; ``pgq queue``, ``pgq task``, ``pgq breaker``, ``pgq pause`` and
``pgq resume`` are the same operations on the command line)."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from pgqueue.client.part import Part
from pgqueue.db import admin, flow_plans
from pgqueue.rules.payload import check_name

if TYPE_CHECKING:
    from typing import Unpack

    from pgqueue.db.connections import AsyncConnectionArg, ConnectionArg
    from pgqueue.rules.flow_control import QueueChanges, TaskLimitChanges


class FlowControl(Part):
    """Flow control (``pgq.flow``): queue settings, task limits, pausing queues, circuit
    breakers. Every setting is a row in PostgreSQL that the claim reads, so it holds across
    all workers at once."""

    def configure_queue(
        self, queue: str, *, conn: ConnectionArg | None = None, **settings: Unpack[QueueChanges]
    ) -> dict[str, Any]:
        """Change a queue's settings (:class:`~pgqueue.rules.flow_control.QueueChanges`;
        left out: as it is, None: cleared): ``weight`` (fair share of a worker's slots),
        ``max_depth`` (backpressure), ``concurrency_limit`` (running at once, fleet-wide),
        ``rate_limit`` (``"20/s"``), ``fair`` (serve its keys round-robin: one key's backlog
        cannot hold back another key's jobs). Returns the queue's settings."""
        return self._client.run(flow_plans.configure_queue(queue, **settings), conn)

    async def configure_queue_async(
        self,
        queue: str,
        *,
        conn: AsyncConnectionArg | None = None,
        **settings: Unpack[QueueChanges],
    ) -> dict[str, Any]:
        """The async twin of :meth:`configure_queue`."""
        return await self._client.run_async(flow_plans.configure_queue(queue, **settings), conn)

    def configure_task(
        self, task: str, *, conn: ConnectionArg | None = None, **limits: Unpack[TaskLimitChanges]
    ) -> dict[str, Any]:
        """Change a task's limits in the database
        (:class:`~pgqueue.rules.flow_control.TaskLimitChanges`:
        ``concurrency_limit``, ``key_limit``, ``rate_limit``, ``key_rate_limit``); the next
        worker start re-applies what the code declares for that task. Returns the task's
        limits."""
        return self._client.run(flow_plans.configure_task(task, **limits), conn)

    async def configure_task_async(
        self,
        task: str,
        *,
        conn: AsyncConnectionArg | None = None,
        **limits: Unpack[TaskLimitChanges],
    ) -> dict[str, Any]:
        """The async twin of :meth:`configure_task`."""
        return await self._client.run_async(flow_plans.configure_task(task, **limits), conn)

    def pause_queue(self, queue: str, *, conn: ConnectionArg | None = None) -> None:
        """Stop workers claiming from ``queue`` (enqueue still works; running jobs finish)."""
        self._client.run(admin.set_paused(check_name(queue, "queue name"), True), conn)

    async def pause_queue_async(
        self, queue: str, *, conn: AsyncConnectionArg | None = None
    ) -> None:
        """The async twin of :meth:`pause_queue`."""
        await self._client.run_async(admin.set_paused(check_name(queue, "queue name"), True), conn)

    def resume_queue(self, queue: str, *, conn: ConnectionArg | None = None) -> None:
        """Let workers claim from ``queue`` again (they are woken at once)."""
        self._client.run(admin.set_paused(check_name(queue, "queue name"), False), conn)

    async def resume_queue_async(
        self, queue: str, *, conn: AsyncConnectionArg | None = None
    ) -> None:
        """The async twin of :meth:`resume_queue`."""
        await self._client.run_async(admin.set_paused(check_name(queue, "queue name"), False), conn)

    def queue_settings(self, *, conn: ConnectionArg | None = None) -> list[dict[str, Any]]:
        """Every configured queue's settings (``pgqueue.queues``): paused, weight, max depth,
        limits."""
        return self._client.run(flow_plans.list_queue_settings(), conn)

    async def queue_settings_async(
        self, *, conn: AsyncConnectionArg | None = None
    ) -> list[dict[str, Any]]:
        """The async twin of :meth:`queue_settings`."""
        return await self._client.run_async(flow_plans.list_queue_settings(), conn)

    def task_limits(self, *, conn: ConnectionArg | None = None) -> list[dict[str, Any]]:
        """Every task's limits (``pgqueue.task_limits``): concurrency, rate, and per key."""
        return self._client.run(flow_plans.list_task_limits(), conn)

    async def task_limits_async(
        self, *, conn: AsyncConnectionArg | None = None
    ) -> list[dict[str, Any]]:
        """The async twin of :meth:`task_limits`."""
        return await self._client.run_async(flow_plans.list_task_limits(), conn)

    def circuit_breakers(self, *, conn: ConnectionArg | None = None) -> list[dict[str, Any]]:
        """Every task's breaker (view ``pgqueue.circuit_breaker_status``)."""
        return self._client.run(flow_plans.list_breakers(), conn)

    async def circuit_breakers_async(
        self, *, conn: AsyncConnectionArg | None = None
    ) -> list[dict[str, Any]]:
        """The async twin of :meth:`circuit_breakers`."""
        return await self._client.run_async(flow_plans.list_breakers(), conn)

    def reset_breaker(self, task: str, *, conn: ConnectionArg | None = None) -> bool:
        """Close a task's breaker now (its jobs are claimed again); False if it has none."""
        return self._client.run(flow_plans.set_breaker(task, "closed"), conn)

    async def reset_breaker_async(
        self, task: str, *, conn: AsyncConnectionArg | None = None
    ) -> bool:
        """The async twin of :meth:`reset_breaker`."""
        return await self._client.run_async(flow_plans.set_breaker(task, "closed"), conn)

    def trip_breaker(
        self, task: str, seconds: float | None = None, *, conn: ConnectionArg | None = None
    ) -> bool:
        """Open a task's breaker by hand for ``seconds`` (default: its cooldown); False if it
        has none."""
        return self._client.run(flow_plans.set_breaker(task, "open", seconds), conn)

    async def trip_breaker_async(
        self, task: str, seconds: float | None = None, *, conn: AsyncConnectionArg | None = None
    ) -> bool:
        """The async twin of :meth:`trip_breaker`."""
        return await self._client.run_async(flow_plans.set_breaker(task, "open", seconds), conn)
