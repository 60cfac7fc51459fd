"""``pgq.cron``: cron schedules made at run time (the plans are in :mod:`pgqueue.db.schedule_plans`;
``@pgq.periodic`` declares them in code, ``pgq cron`` is the command line)."""

from __future__ import annotations

import json
from collections.abc import Mapping
from typing import TYPE_CHECKING, Any

from pgqueue.client.part import Part
from pgqueue.db import schedule_plans as plans
from pgqueue.rules.schedules import Schedule, ScheduleTiming

if TYPE_CHECKING:
    from typing import Unpack

    from pgqueue.db.connections import AsyncConnectionArg, ConnectionArg
    from pgqueue.rules.schedules import ScheduleOptions
    from pgqueue.rules.tasks import Task


class CronSchedules(Part):
    """Cron schedules (``pgq.cron``): rows in ``pgqueue.schedules`` that running workers pick
    up; each tick is enqueued once however many workers run."""

    def schedule(
        self,
        name: str,
        cron_expression: str,
        task: str | Task[..., Any],
        args: Mapping[str, Any] | None = None,
        *,
        conn: ConnectionArg | None = None,
        **options: Unpack[ScheduleOptions],
    ) -> None:
        """Create or update the schedule ``name``: ``task`` with ``args`` at every tick of
        ``cron_expression``. Options (:class:`~pgqueue.rules.schedules.ScheduleOptions`): ``tz``,
        ``missed``, ``grace``, ``max_catch_up``, and the ticks' ``queue``, ``priority``,
        ``max_attempts``, ``meta`` and ``tags`` (default: the task's)."""
        plan = plans.save(
            [self._definition(name, cron_expression, task, args, options)], from_code=False
        )
        self._client.run(plan, conn, atomic=True)

    async def schedule_async(
        self,
        name: str,
        cron_expression: str,
        task: str | Task[..., Any],
        args: Mapping[str, Any] | None = None,
        *,
        conn: AsyncConnectionArg | None = None,
        **options: Unpack[ScheduleOptions],
    ) -> None:
        """The async twin of :meth:`schedule`."""
        plan = plans.save(
            [self._definition(name, cron_expression, task, args, options)], from_code=False
        )
        await self._client.run_async(plan, conn, atomic=True)

    def _definition(
        self,
        name: str,
        cron_expression: str,
        task: str | Task[..., Any],
        args: Mapping[str, Any] | None,
        options: ScheduleOptions,
    ) -> Schedule:
        timing: dict[str, Any] = {
            k: v for k, v in options.items() if k in ScheduleTiming.__optional_keys__
        }
        job = {k: v for k, v in options.items() if k not in timing}
        spec = self._client.spec(task, args, job)
        return Schedule(
            name=name,
            cron=cron_expression,
            task=spec.task,
            args=dict(args or {}),
            queue=spec.queue,
            priority=spec.priority,
            max_attempts=spec.max_attempts,
            meta=None if spec.meta_json is None else json.loads(spec.meta_json),
            tags=spec.tags,
            **timing,
        )

    def delete(self, name: str, *, conn: ConnectionArg | None = None) -> bool:
        """Delete the schedule ``name``; False if there was none."""
        return self._client.run(plans.delete(name), conn)

    async def delete_async(self, name: str, *, conn: AsyncConnectionArg | None = None) -> bool:
        """The async twin of :meth:`delete`."""
        return await self._client.run_async(plans.delete(name), conn)

    def pause(self, name: str, *, conn: ConnectionArg | None = None) -> bool:
        """Pause the schedule ``name`` (no ticks are enqueued until resumed); False if there
        is none."""
        return self._client.run(plans.set_paused(name, True), conn, atomic=True)

    async def pause_async(self, name: str, *, conn: AsyncConnectionArg | None = None) -> bool:
        """The async twin of :meth:`pause`."""
        return await self._client.run_async(plans.set_paused(name, True), conn, atomic=True)

    def resume(self, name: str, *, conn: ConnectionArg | None = None) -> bool:
        """Resume the schedule ``name`` at its next tick from now (ticks while paused are not
        caught up); False if there is none."""
        return self._client.run(plans.set_paused(name, False), conn, atomic=True)

    async def resume_async(self, name: str, *, conn: AsyncConnectionArg | None = None) -> bool:
        """The async twin of :meth:`resume`."""
        return await self._client.run_async(plans.set_paused(name, False), conn, atomic=True)

    def schedules(self, *, conn: ConnectionArg | None = None) -> list[dict[str, Any]]:
        """Every schedule (``pgqueue.schedules``): expression, time zone, next tick, paused,
        ticks enqueued and skipped."""
        return self._client.run(plans.list_schedules(), conn)

    async def schedules_async(
        self, *, conn: AsyncConnectionArg | None = None
    ) -> list[dict[str, Any]]:
        """The async twin of :meth:`schedules`."""
        return await self._client.run_async(plans.list_schedules(), conn)
