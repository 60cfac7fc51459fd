"""The worker's side of Django's tasks: the pgqueue handler that runs one.

Each Django task is a pgqueue task named by its ``module_path`` whose handler (made here)
imports the Django task by that path, as Django's own database backend does, and runs it as
Django's backends do: ``task_started`` before, ``task_finished`` after (``FAILED`` on the last
attempt, ``READY`` when pgqueue will retry it), the return value normalised to JSON, the
``TaskContext`` for ``takes_context`` tasks. An error propagates, so pgqueue records it (with
its traceback) and retries or dead-letters the job as the task's options say.

A durable task that sleeps or waits for an event (``current_job().sleep()``, ...) ends its run
parked: ``task_finished`` is sent with ``READY`` (the task will run again, as after a failed
attempt that pgqueue retries, but with no error), and the run that resumes it sends
``task_started`` again, so every ``task_started`` has its ``task_finished``.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from django.tasks.base import TaskContext, TaskError, TaskResult, TaskResultStatus
from django.tasks.signals import task_finished, task_started
from django.utils import timezone
from django.utils.json import normalize_json

from pgqueue import JobContext
from pgqueue.contrib.django.task_results import JOB_META_KEY, django_task, task_errors
from pgqueue.db.search import job_detail
from pgqueue.errors import ConfigurationError
from pgqueue.handler.parking import JobParked

# The attribute of a handler that says which Django task it runs.
_RUNS = "django_task_path"


def handler_for(module_path: str) -> Callable[..., Any]:
    """The pgqueue handler (``pass_context=True``) of the Django task at ``module_path``."""

    def run(ctx: JobContext, args: list[Any], kwargs: dict[str, Any]) -> Any:
        return run_django_task(ctx, args, kwargs)

    setattr(run, _RUNS, module_path)
    return run


def is_handler_of(func: object, module_path: str) -> bool:
    """Whether ``func`` is the handler :func:`handler_for` made for ``module_path``."""
    return getattr(func, _RUNS, None) == module_path


def run_django_task(ctx: JobContext, args: list[Any], kwargs: dict[str, Any]) -> Any:
    """Run the job's Django task once (one attempt), with Django's signals around it."""
    marks = ctx.meta.get(JOB_META_KEY) or {}
    alias = str(marks.get("backend", "default"))
    task = django_task(ctx.task, ctx.queue, ctx.job.priority, alias, marks)
    if task is None:
        raise ConfigurationError(
            f"{ctx.task!r} is no Django task here: is its module importable on the worker?"
        )
    backend = task.get_backend()
    now = timezone.now()
    errors, worker_ids = _earlier_attempts(backend, ctx)
    result: TaskResult[..., Any] = TaskResult(
        task=task,
        id=str(ctx.id),
        status=TaskResultStatus.RUNNING,
        enqueued_at=ctx.job.created_at,
        started_at=now,
        finished_at=None,
        last_attempted_at=now,
        args=args,
        kwargs=kwargs,
        backend=alias,
        errors=task_errors(errors),
        worker_ids=[*worker_ids, ctx.worker_id],
    )
    sender = type(backend)  # the backend that enqueued it, as Django's backends send
    task_started.send(sender=sender, task_result=result)
    parked: JobParked | None = None
    try:
        if task.takes_context:
            value = task.call(TaskContext(task_result=result), *args, **kwargs)
        else:
            value = task.call(*args, **kwargs)
        value = normalize_json(value)
    except JobParked as signal:
        parked = signal
    except BaseException as exc:
        final = ctx.attempt >= ctx.max_attempts or not _retryable(backend, ctx.task, exc)
        kind = type(exc)
        result.errors.append(
            TaskError(
                exception_class_path=f"{kind.__module__}.{kind.__qualname__}",
                traceback=_format(exc),
            )
        )
        _finish(result, TaskResultStatus.FAILED if final else TaskResultStatus.READY)
        task_finished.send(sender=sender, task_result=result)
        raise
    if parked is not None:
        # Not a failure: the job leaves the worker and runs again at its wake time. Sent
        # outside the except block: Django's receiver logs the exception being handled.
        _finish(result, TaskResultStatus.READY)
        task_finished.send(sender=sender, task_result=result)
        raise parked
    object.__setattr__(result, "_return_value", value)
    _finish(result, TaskResultStatus.SUCCESSFUL)
    task_finished.send(sender=sender, task_result=result)
    return value


def _earlier_attempts(backend: Any, ctx: JobContext) -> tuple[list[dict[str, Any]], list[str]]:
    """The errors and workers of the job's earlier attempts (read only for a retry)."""
    if ctx.attempt <= 1:
        return [], []
    detail = backend.pgq.run(job_detail(ctx.id)) if hasattr(backend, "pgq") else None
    errors = list((detail or {}).get("errors") or [])
    return errors, [str(e["worker_id"]) for e in errors if e.get("worker_id")]


def _retryable(backend: Any, name: str, exc: BaseException) -> bool:
    """Whether pgqueue will retry after ``exc`` (attempts left aside): the task's policy."""
    pgq = getattr(backend, "pgq", None)
    job_task = pgq.tasks.get(name) if pgq is not None else None
    return job_task is not None and bool(job_task.retry_policy.retryable(exc))


def _finish(result: TaskResult[..., Any], status: TaskResultStatus) -> None:
    object.__setattr__(result, "status", status)
    if status != TaskResultStatus.READY:
        object.__setattr__(result, "finished_at", timezone.now())


def _format(exc: BaseException) -> str:
    import traceback

    return "".join(traceback.format_exception(exc))
