"""The scheduler: enqueues due cron ticks (``pgqueue.schedules``), exactly once per tick.

Every worker may run it. For each due schedule it computes the ticks with croniter (from the
database's clock) and runs one statement that moves the schedule's ``next_tick`` forward with a
compare-and-set *and* enqueues the ticks' jobs: a worker that loses the race changes nothing, a
worker that dies mid-way leaves no half-done tick. It sleeps until the next tick is due (a
timer read from the database), at most ``max_interval``. It also prunes expired kept
idempotency keys once a minute.
"""

from __future__ import annotations

from typing import Any

from pgqueue.errors import QueueFullError
from pgqueue.rules.log_actions import Action, fields
from pgqueue.rules.schedules import TickPlan, plan_ticks
from pgqueue.worker.service import Service
from pgqueue.worker.store import WorkerStore

_PRUNE_EVERY = 60.0


def due_ticks(row: tuple[Any, ...]) -> tuple[TickPlan, dict[str, Any]]:
    """A row of ``due_schedules``: the ticks it owes, and ``enqueue_schedule_ticks``'s
    parameters to enqueue them (shared with ``pgqueue.testing``'s drain)."""
    name, cron, tz, due, missed, grace, max_catch_up, now = row
    plan = plan_ticks(cron, tz, due, now, missed=missed, grace=grace, max_catch_up=max_catch_up)
    params = {
        "name": name,
        "expected": due,
        "next_tick": plan.next_tick,
        "ticks": plan.ticks,
        "skipped": plan.skipped,
    }
    return plan, params


class Scheduler(Service):
    name = "scheduler"
    jitter = 0.0  # sleeps to a tick; the fleet's CAS decides who enqueues it

    def __init__(self, store: WorkerStore, *, max_interval: float = 5.0) -> None:
        super().__init__()
        self.store = store
        self.max_interval = max_interval
        self._sleep = 0.0
        self._until_prune = 0.0
        self.ticks_enqueued = 0

    def interval(self) -> float:
        return self._sleep

    async def run_once(self) -> None:
        for row in await self.store.fetch("due_schedules"):
            name, missed = row[0], row[4]
            plan, params = due_ticks(row)
            try:
                enqueued = await self.store.fetch("enqueue_schedule_ticks", params)
            except Exception as exc:
                error = QueueFullError.from_database(exc)
                if error is None:
                    raise
                self.log.warning(
                    "cron tick not enqueued",
                    extra=fields(Action.CRON_FAILED, schedule=name, error=str(error)),
                )
                continue
            for tick, job_id, created in enqueued:
                if tick is None:
                    continue
                self.ticks_enqueued += 1
                self.log.info(
                    "cron tick enqueued",
                    extra=fields(
                        Action.CRON_ENQUEUED,
                        schedule=name,
                        tick=tick.isoformat(),
                        job_id=job_id,
                        inserted=created,
                    ),
                )
            if plan.skipped and enqueued:  # (no rows: another worker took the tick)
                self.log.warning(
                    "cron ticks missed",
                    extra=fields(
                        Action.CRON_MISSED, schedule=name, skipped=plan.skipped, policy=missed
                    ),
                )
        rows = await self.store.fetch("next_schedule_in")
        seconds = rows[0][0] if rows and rows[0][0] is not None else None
        self._sleep = (
            self.max_interval
            if seconds is None
            else min(self.max_interval, max(0.0, float(seconds)))
        )
        self._until_prune -= self._sleep
        if self._until_prune <= 0:
            self._until_prune = _PRUNE_EVERY
            await self.store.fetch("prune_idempotency_keys")
