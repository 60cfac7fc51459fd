"""Cron schedules as plans: rows of ``pgqueue.schedules`` saved, listed, paused and deleted.
What a schedule is, and when it ticks, is in :mod:`pgqueue.rules.schedules`."""

from __future__ import annotations

from datetime import datetime
from typing import Any, NamedTuple

from psycopg.rows import class_row

from pgqueue.db.plan import Plan, Query, fetch_all, fetch_first, fetch_value
from pgqueue.rules.payload import check_name
from pgqueue.rules.schedules import Schedule, next_tick


class ScheduleRow(NamedTuple):
    """A schedule as ``pgq cron list`` shows it (``pgqueue.schedules``)."""

    name: str
    cron: str
    timezone: str
    task: str
    queue: str
    args: dict[str, Any]
    missed: str
    paused: bool
    next_tick: datetime
    last_tick: datetime | None
    last_enqueued_at: datetime | None
    ticks_enqueued: int
    ticks_skipped: int
    meta: dict[str, Any] | None
    tags: list[str] | None


class _Definition(NamedTuple):
    cron: str
    timezone: str
    now: datetime


SCHEDULE_COLUMNS = ScheduleRow._fields


def save(schedules: list[Schedule], *, from_code: bool) -> Plan[None]:
    """Create or update schedules. A changed expression or time zone restarts the schedule
    at its next tick from now; otherwise its position (and paused flag) is kept."""
    if not schedules:
        return
    now: datetime = yield from fetch_value("db_now")
    for schedule in sorted(schedules, key=lambda s: s.name):
        yield Query(
            "save_schedule",
            {
                **schedule.params(),
                "next_tick": next_tick(schedule.cron, schedule.tz, now),
                "from_code": from_code,
            },
        )


def list_schedules() -> Plan[list[dict[str, Any]]]:
    rows = yield from fetch_all("list_schedules", row=class_row(ScheduleRow))
    return [row._asdict() for row in rows]


def set_paused(name: str, paused: bool) -> Plan[bool]:
    """Pause or resume; a resumed schedule continues at its next tick from now (ticks that
    fell while it was paused are not caught up)."""
    params = {"name": check_name(name, "schedule name")}
    found = yield from fetch_first("schedule_definition", params, row=class_row(_Definition))
    if found is None:
        return False
    tick = next_tick(found.cron, found.timezone, found.now)
    yield Query("set_schedule_paused", {"name": name, "paused": paused, "next_tick": tick})
    return True


def delete(name: str) -> Plan[bool]:
    rows = yield Query("delete_schedule", {"name": check_name(name, "schedule name")})
    return bool(rows)
