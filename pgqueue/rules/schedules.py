"""Cron schedules: what a schedule is, and its ticks computed with croniter (pure; the plans
that store schedules are in :mod:`pgqueue.db.schedule_plans`).

A schedule enqueues one job per tick. Workers (the scheduler service) enqueue due ticks with a
compare-and-set on the schedule's ``next_tick`` in the same statement as the enqueue, so each
tick is enqueued exactly once however many workers run, and a worker that dies mid-way leaves
either both writes or neither. Each tick's job also carries the idempotency key
``pgqueue.cron:<schedule>:<tick>``.

Missed ticks (no worker ran, or every worker was late by more than ``grace``):

* ``missed="skip"`` (default): they are dropped; the latest due tick still runs if it is at most
  ``grace`` late; the schedule continues with the next tick after now.
* ``missed="catch_up"``: every missed tick is enqueued (at most ``max_catch_up``, the latest
  ones), each job with ``run_at`` = its tick (``current_job().run_at``).

Expressions have five fields, or six with seconds last (croniter's convention:
``"* * * * * */10"`` is every ten seconds). Ticks are computed in the schedule's time zone.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from typing import Any, TypedDict
from zoneinfo import ZoneInfo, ZoneInfoNotFoundError

from pgqueue.errors import ConfigurationError
from pgqueue.rules.config import DEFAULT_MAX_PAYLOAD_BYTES
from pgqueue.rules.options import (
    DEFAULTS,
    MAX_META_BYTES,
    JobBasics,
    TaskOptions,
    check_meta,
    check_tags,
)
from pgqueue.rules.payload import check_name, dumps

MISSED_POLICIES = ("skip", "catch_up")
_COUNT_LIMIT = 10_000  # ticks counted one by one before a skip is only estimated


def check_cron(expression: str) -> str:
    from croniter import croniter  # with dateutil, 13 modules: loaded by cron schedules only

    if not isinstance(expression, str) or not croniter.is_valid(expression):
        raise ConfigurationError(
            f"invalid cron expression {expression!r}: five fields (minute hour day month "
            "weekday), or six with seconds last"
        )
    return expression


def check_timezone(name: str) -> ZoneInfo:
    try:
        return ZoneInfo(name)
    except (ZoneInfoNotFoundError, ValueError, TypeError):
        raise ConfigurationError(f"unknown time zone {name!r} (use an IANA name)") from None


class ScheduleTiming(TypedDict, total=False):
    """How a schedule's ticks are computed and what happens to missed ones (see the module
    docstring); the defaults are :class:`Schedule`'s."""

    tz: str
    """The time zone its ticks are computed in (an IANA name; default ``"UTC"``)."""
    missed: str
    """``"skip"`` (default) or ``"catch_up"``: what becomes of ticks missed while no worker
    ran."""
    grace: float
    """Seconds a tick may be late and still run with ``missed="skip"`` (default 60)."""
    max_catch_up: int
    """With ``missed="catch_up"``, the most missed ticks enqueued (default 100)."""


class ScheduleOptions(ScheduleTiming, JobBasics, total=False):
    """The options of ``pgq.cron.schedule``: the timing, and the queue, priority and
    attempts of its ticks' jobs (default: the task's, when it is registered)."""


class PeriodicOptions(ScheduleTiming, TaskOptions, total=False):
    """The options of ``@pgq.periodic``: the schedule's timing and the task's options."""


@dataclass(frozen=True)
class Schedule:
    """A schedule definition (what ``@pgq.periodic`` and ``pgq.cron.schedule`` write)."""

    name: str
    cron: str
    task: str
    args: Mapping[str, Any] = field(default_factory=dict)
    tz: str = "UTC"
    # The job options' defaults (a schedule of a registered task has the task's).
    queue: str = DEFAULTS["queue"]
    priority: int = DEFAULTS["priority"]
    max_attempts: int = DEFAULTS["max_attempts"]
    missed: str = "skip"
    grace: float = 60.0
    max_catch_up: int = 100
    #: The metadata and tags of its ticks' jobs.
    meta: Mapping[str, Any] | None = None
    tags: tuple[str, ...] | None = None

    def __post_init__(self) -> None:
        check_name(self.name, "schedule name")
        check_name(self.task, "task name")
        check_name(self.queue, "queue name")
        check_cron(self.cron)
        check_timezone(self.tz)
        if self.missed not in MISSED_POLICIES:
            raise ConfigurationError(
                f"missed must be one of {', '.join(MISSED_POLICIES)}, got {self.missed!r}"
            )
        if self.grace < 0:
            raise ConfigurationError("grace must not be negative")
        if self.max_catch_up < 1:
            raise ConfigurationError("max_catch_up must be at least 1")
        if self.meta is not None:
            object.__setattr__(self, "meta", check_meta(self.meta) or None)
        if self.tags is not None:
            object.__setattr__(self, "tags", check_tags(self.tags) or None)

    def params(self) -> dict[str, Any]:
        """The schedule as the parameters of the statements that store it."""
        return {
            "name": self.name,
            "cron": self.cron,
            "timezone": self.tz,
            "task": self.task,
            "args": dumps(dict(self.args), limit=DEFAULT_MAX_PAYLOAD_BYTES),
            "queue": self.queue,
            "priority": self.priority,
            "max_attempts": self.max_attempts,
            "missed": self.missed,
            "grace": timedelta(seconds=self.grace),
            "max_catch_up": self.max_catch_up,
            "meta": None if self.meta is None else dumps(dict(self.meta), limit=MAX_META_BYTES),
            "tags": None if self.tags is None else list(self.tags),
        }


def next_tick(cron: str, tz: str, after: datetime) -> datetime:
    """The first tick strictly after ``after`` (UTC)."""
    from croniter import croniter

    local = after.astimezone(check_timezone(tz))
    tick = croniter(cron, local).get_next(datetime)
    return tick.astimezone(UTC)


@dataclass(frozen=True)
class TickPlan:
    """What to do with a due schedule: ticks to enqueue, how many were dropped, what next."""

    ticks: list[datetime]
    skipped: int
    next_tick: datetime


def plan_ticks(
    cron: str,
    tz: str,
    due: datetime,
    now: datetime,
    *,
    missed: str,
    grace: timedelta,
    max_catch_up: int,
) -> TickPlan:
    """The ticks from ``due`` (the schedule's next_tick, at or before ``now``) up to ``now``."""
    from croniter import croniter

    zone = check_timezone(tz)
    following = next_tick(cron, tz, now)
    # Walk forward from `due` (itself a tick), keeping at most what the policy can use.
    keep = max_catch_up if missed == "catch_up" else 1
    recent: list[datetime] = []
    count = 0
    walker = croniter(cron, due.astimezone(zone) - timedelta(microseconds=1))
    while count < _COUNT_LIMIT:
        tick = walker.get_next(datetime).astimezone(UTC)
        if tick > now:
            break
        count += 1
        recent.append(tick)
        if len(recent) > keep:
            recent.pop(0)
    else:
        # Too many to walk: jump to the latest tick at or before now.
        latest = croniter(cron, now.astimezone(zone)).get_prev(datetime).astimezone(UTC)
        recent = [latest]
        count = _COUNT_LIMIT + 1
    ticks = [t for t in recent if now - t <= grace] if missed == "skip" else recent
    return TickPlan(ticks, count - len(ticks), following)
