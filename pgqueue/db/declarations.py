"""What an app's code declares beyond its handlers (task limits, circuit breakers, ``@periodic``
schedules), written as one plan: by every worker at start-up, and by
``PgQueue.sync_declarations``. A module of its own, so that the worker needs only this, not the
client."""

from __future__ import annotations

from collections.abc import Mapping
from typing import TYPE_CHECKING, Any, Protocol

from pgqueue.db import flow_plans, schedule_plans
from pgqueue.db.plan import Plan, Query
from pgqueue.rules.flow_control import DeclaredLimits

if TYPE_CHECKING:
    from pgqueue.rules.schedules import Schedule
    from pgqueue.rules.tasks import Task


class Declaring(Protocol):
    """What the plan reads of an app (a :class:`~pgqueue.PgQueue`)."""

    @property
    def tasks(self) -> Mapping[str, Task[..., Any]]: ...

    @property
    def schedules(self) -> Mapping[str, Schedule]: ...


def declarations(app: Declaring) -> Plan[None]:
    """Write what ``app`` declares; rows written before from code that it no longer declares
    are cleared, operators' rows are left alone (see :func:`flow_plans.sync_task_declarations`).
    Its task names go to ``pgqueue.declared_tasks``, where producers check the names they
    enqueue (never removed here: another deploy's workers may still run a task this one
    dropped)."""
    tasks = app.tasks.values()
    yield from flow_plans.sync_task_declarations(
        sorted(app.tasks),
        {
            t.name: DeclaredLimits(
                t.concurrency_limit,
                # Jobs with a concurrency key run one at a time per key unless the task says
                # otherwise; keys from limit_by are partitions, limited only as declared.
                t.key_limit if t.key_limit is not None or t.limit_by is not None else 1,
                t.rate_limit,
                t.key_rate_limit,
            )
            for t in tasks
            if t.declares_limits
        },
        {t.name: t.circuit_breaker for t in tasks if t.circuit_breaker is not None},
    )
    yield from schedule_plans.save(list(app.schedules.values()), from_code=True)
    yield Query("declare_tasks", {"tasks": sorted(app.tasks)})
