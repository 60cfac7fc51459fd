"""A Django ``TaskResult`` read from a pgqueue job, wherever the job is now: live (``READY`` or
``RUNNING``; a durable task parked by a sleep or an event wait is ``READY``: on no worker, to
run again), in ``job_history`` (``SUCCESSFUL``, or ``FAILED`` when cancelled) or a dead
letter (``FAILED``). Each failed attempt's error (kept in the job's ``errors``) is a
``TaskError``; the worker of each attempt is in ``worker_ids``."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from datetime import datetime
from typing import TYPE_CHECKING, Any

from django.tasks import task_backends
from django.tasks.base import Task, TaskError, TaskResult, TaskResultStatus
from django.utils.module_loading import import_string

from pgqueue.db.durable import job_steps
from pgqueue.db.search import job_detail
from pgqueue.errors import InvalidJobError

if TYPE_CHECKING:
    from pgqueue.contrib.django.tasks import PgQueueBackend

#: The key of a job's ``meta`` that marks it a Django task's: ``{"backend": alias,
#: "run_after": iso time}`` (run_after only when the task set one).
JOB_META_KEY = "django_task"

_STATUS = {
    "waiting": TaskResultStatus.READY,
    "scheduled": TaskResultStatus.READY,  # deferred, or waiting for its retry
    "ready": TaskResultStatus.READY,
    "running": TaskResultStatus.RUNNING,
    "succeeded": TaskResultStatus.SUCCESSFUL,
    "cancelled": TaskResultStatus.FAILED,
    "dead": TaskResultStatus.FAILED,
}


def read_result(
    backend: PgQueueBackend, connection: Any, result_id: object
) -> TaskResult[..., Any] | None:
    """The result of the job ``result_id`` read on Django's ``connection``; None when there is
    no such job (an id that is no number too), or it is no Django task's."""
    try:
        job_id = int(str(result_id))
        detail = backend.pgq.run(job_detail(job_id), connection)
    except (ValueError, InvalidJobError):
        return None
    if detail is None:
        return None
    marks = (detail.get("meta") or {}).get(JOB_META_KEY)
    if not isinstance(marks, Mapping):
        return None  # a job of pgqueue's own API
    # The backend that enqueued it (its alias in the job), as long as the settings still have it.
    alias = str(marks.get("backend") or backend.alias)
    if alias not in task_backends.settings:
        alias = backend.alias
    task = django_task(detail["task"], detail["queue"], detail["priority"], alias, marks)
    if task is None:
        return None
    errors = detail.get("errors") or []
    state = detail["state"]
    place = detail["place"]
    run_start = _time(detail.get("started_at"))
    attempt_starts = [e.get("started_at") for e in errors if e.get("started_at")]
    last_failed = _time(_last(attempt_starts))
    # A durable task that sleeps or waits is parked between its runs: scheduled, with the
    # start of the run that parked it, which no failed attempt's error holds.
    parked = (
        state == "scheduled"
        and run_start is not None
        and (last_failed is None or run_start > last_failed)
    )
    current_ran = (
        state in ("running", "succeeded")
        or (state == "cancelled" and run_start is not None)
        or parked
    )
    enqueued = _time(detail.get("created_at"))
    # Both times are PostgreSQL's now(), the start of their transactions: a worker's claim
    # transaction may have begun (idle, waiting for the NOTIFY) before the enqueue's did, so a
    # start can read a few milliseconds before the enqueue. No attempt starts before its job.
    last_attempted = _not_before(run_start if current_ran else last_failed, enqueued)
    # A run that resumed a parked task started after the run that first ran it: its first
    # checkpoint was written in that first run.
    first_starts = [_time(attempt_starts[0]) if attempt_starts else last_attempted]
    if last_attempted is not None:
        steps = backend.pgq.run(job_steps(job_id), connection)
        first_starts += [_time(step["started_at"]) for step in steps[:1]]
    first_started = _not_before(_earliest(first_starts), enqueued)
    finished = {"history": detail.get("finished_at"), "dead": detail.get("dead_at")}.get(place)
    worker_ids = [str(e["worker_id"]) for e in errors if e.get("worker_id")]
    if current_ran and detail.get("worker_id"):
        worker_ids.append(str(detail["worker_id"]))
    args = detail.get("args") or {}
    result: TaskResult[..., Any] = TaskResult(
        task=task,
        id=str(job_id),
        status=_STATUS[state],
        enqueued_at=enqueued,
        started_at=first_started,
        finished_at=_time(finished),
        last_attempted_at=last_attempted,
        args=list(args.get("args") or []),
        kwargs=dict(args.get("kwargs") or {}),
        backend=alias,
        errors=task_errors(errors),
        worker_ids=worker_ids,
    )
    if state == "succeeded":
        object.__setattr__(result, "_return_value", detail.get("result"))
    return result


def django_task(
    module_path: str, queue: str, priority: int, alias: str, marks: Mapping[str, Any]
) -> Task[..., Any] | None:
    """The Django task a job runs, as it was enqueued (queue, priority, run_after, backend);
    None when ``module_path`` names no Django task (any more)."""
    try:
        task = import_string(module_path)
    except ImportError:
        return None
    if not isinstance(task, Task):
        return None
    run_after = marks.get("run_after")
    # Task.using() leaves what it is given None alone: run_after is set only when it was.
    return task.using(
        queue_name=queue,
        priority=-priority,
        backend=alias,
        run_after=_time(run_after) if run_after else None,
    )


def task_errors(errors: Sequence[Mapping[str, Any]]) -> list[TaskError]:
    """Each failed attempt's error (pgqueue's ``errors``) as Django's ``TaskError``."""
    return [
        TaskError(
            exception_class_path=exception_path(str(e.get("error") or "Exception")),
            traceback=str(e.get("traceback") or e.get("message") or ""),
        )
        for e in errors
    ]


def exception_path(name: str) -> str:
    """pgqueue names a builtin exception by its bare name, Django by an importable path."""
    return name if "." in name else f"builtins.{name}"


def _last(values: Sequence[Any]) -> Any:
    return values[-1] if values else None


def _earliest(moments: Sequence[datetime | None]) -> datetime | None:
    known = [m for m in moments if m is not None]
    return min(known) if known else None


def _time(value: object) -> datetime | None:
    if value is None or isinstance(value, datetime):
        return value
    return datetime.fromisoformat(str(value))


def _not_before(moment: datetime | None, earliest: datetime | None) -> datetime | None:
    """``moment``, or ``earliest`` where it reads before it."""
    if moment is None or earliest is None:
        return moment
    return max(moment, earliest)
