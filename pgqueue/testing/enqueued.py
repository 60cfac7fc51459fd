"""What the code under test enqueued: :func:`enqueued`, :func:`assert_enqueued`,
:func:`assert_not_enqueued` (live jobs: those not run yet, or waiting for another attempt)."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from datetime import datetime
from typing import TYPE_CHECKING, Any

from psycopg.rows import class_row
from psycopg.types.json import Jsonb

from pgqueue.db import plan as plans
from pgqueue.rules.tasks import Task

if TYPE_CHECKING:
    from pgqueue.client import PgQueue


@dataclass(frozen=True, slots=True)
class EnqueuedJob:
    """A live job, as :func:`enqueued` finds it."""

    id: int
    queue: str
    task: str
    args: dict[str, Any]
    state: str
    priority: int
    run_at: datetime
    attempts: int
    max_attempts: int
    idempotency_key: str | None
    meta: dict[str, Any] | None
    tags: list[str] | None

    def describe(self) -> str:
        """One line: ``job 3 app.send(to='a@example.com') queue=default ready``."""
        return f"job {self.id} {self.task}({_call(self.args)}) queue={self.queue} {self.state}"


def _call(args: Mapping[str, Any]) -> str:
    return ", ".join(f"{k}={v!r}" for k, v in args.items())


def _name(task: Task[..., Any] | str | None) -> str | None:
    return task.name if isinstance(task, Task) else task


def enqueued_plan(
    task: Task[..., Any] | str | None = None,
    args: Mapping[str, Any] | None = None,
    queue: str | None = None,
    state: str | None = None,
) -> plans.Plan[list[EnqueuedJob]]:
    params = {
        "task": _name(task),
        "queue": queue,
        "states": [state] if state else None,
        "args": Jsonb(dict(args)) if args is not None else None,
    }
    return (yield from plans.fetch_all("enqueued_jobs", params, row=class_row(EnqueuedJob)))


def enqueued(
    pgq: PgQueue,
    task: Task[..., Any] | str | None = None,
    *,
    args: Mapping[str, Any] | None = None,
    queue: str | None = None,
    state: str | None = None,
    conn: object | None = None,
) -> list[EnqueuedJob]:
    """The live jobs (enqueued and not finished), oldest first: of ``task`` (a task or its
    name), whose arguments include ``args`` (by name, as the handler's parameters: a subset,
    compared as JSON containment), on ``queue``, in ``state`` (ready, scheduled, waiting,
    running). ``conn``: read in the caller's transaction."""
    return pgq.run(enqueued_plan(task, args, queue, state), conn)


async def enqueued_async(
    pgq: PgQueue,
    task: Task[..., Any] | str | None = None,
    *,
    args: Mapping[str, Any] | None = None,
    queue: str | None = None,
    state: str | None = None,
    conn: object | None = None,
) -> list[EnqueuedJob]:
    """The async twin of :func:`enqueued`."""
    return await pgq.run_async(enqueued_plan(task, args, queue, state), conn)


def _wanted(
    task: Task[..., Any] | str | None, args: Mapping[str, Any] | None, queue: str | None
) -> str:
    parts = [_name(task) or "any task"]
    if args is not None:
        parts.append(f"with args including {_call(args)}")
    if queue is not None:
        parts.append(f"on queue {queue!r}")
    return " ".join(parts)


def _listing(jobs: list[EnqueuedJob]) -> str:
    if not jobs:
        return "nothing was enqueued"
    shown = "\n".join(f"  {job.describe()}" for job in jobs[:20])
    more = f"\n  ... and {len(jobs) - 20} more" if len(jobs) > 20 else ""
    return f"enqueued ({len(jobs)}):\n{shown}{more}"


def assert_enqueued(
    pgq: PgQueue,
    task: Task[..., Any] | str | None = None,
    *,
    args: Mapping[str, Any] | None = None,
    queue: str | None = None,
    count: int | None = None,
    conn: object | None = None,
) -> list[EnqueuedJob]:
    """Assert that a job of ``task`` (with ``args`` among its arguments, on ``queue``) is
    enqueued (exactly ``count`` of them, when given), and return the matching jobs. The
    ``AssertionError`` lists what was enqueued."""
    found = enqueued(pgq, task, args=args, queue=queue, conn=conn)
    if (count is None and found) or (count is not None and len(found) == count):
        return found
    expected = "a job" if count is None else f"{count} job(s)"
    everything = enqueued(pgq, conn=conn)
    raise AssertionError(
        f"expected {expected} of {_wanted(task, args, queue)}, found {len(found)}; "
        + _listing(everything)
    )


def assert_not_enqueued(
    pgq: PgQueue,
    task: Task[..., Any] | str | None = None,
    *,
    args: Mapping[str, Any] | None = None,
    queue: str | None = None,
    conn: object | None = None,
) -> None:
    """Assert that no job of ``task`` (with ``args`` among its arguments, on ``queue``) is
    enqueued. The ``AssertionError`` lists the ones that are."""
    found = enqueued(pgq, task, args=args, queue=queue, conn=conn)
    if found:
        raise AssertionError(f"expected no job of {_wanted(task, args, queue)}; " + _listing(found))
