"""A backend for Django's task framework (``django.tasks``, Django 6+), on pgqueue.

.. code-block:: python

    TASKS = {
        "default": {
            "BACKEND": "pgqueue.contrib.django.tasks.PgQueueBackend",
            "QUEUES": ["default", "emails"],
            "OPTIONS": {"RESULT_TTL": 86400, "TASK_OPTIONS": {"max_attempts": 3}},
        }
    }

Django's API only: ``@task``, ``.enqueue()``, ``.using()``, ``get_result()``; ``manage.py pgq
work`` runs the tasks. Each Django task is a pgqueue task named by its ``module_path`` (the
worker registers it when it imports the app's ``tasks`` module). A job is written on the
task's Django database connection: **inside** ``transaction.atomic()`` **it commits or rolls
back with the caller's transaction**. Its id (a string) is the ``TaskResult``'s; its args are
``{"args": [...], "kwargs": {...}}``.

``OPTIONS``:

* ``DATABASE``: the ``DATABASES`` alias the jobs live in (default ``"default"``);
* ``RESULT_TTL``: seconds a finished task's result stays readable by ``get_result()`` (default
  one day; ``None``: results are not kept, and a succeeded task's id is no longer found);
* ``TASK_OPTIONS``: pgqueue's options for every task of the backend (those of
  ``@pgq.task(...)``: ``max_attempts``, ``backoff``, ``timeout``, ``retry_on``,
  ``concurrency_limit``, ``rate_limit``, ``meta``, ``tags``, ...). ``max_attempts`` defaults to
  1, Django's own semantics (a failure is final); with more, a failed attempt reads ``READY``
  until its retry and each attempt's error is in ``TaskResult.errors``.

Per task, pgqueue's :func:`task` (Django's ``@task`` with one more keyword, typed) takes
``pgqueue_options={...}``: pgqueue's options over ``TASK_OPTIONS``, kept by the task (a
:class:`PgQueueTask`, the backend's ``task_class``). Django's priority (-100..100, higher
first) is pgqueue's priority negated (lower first).
"""

from __future__ import annotations

import threading
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from datetime import timedelta
from functools import partial
from typing import (
    TYPE_CHECKING,
    Any,
    Concatenate,
    Generic,
    Literal,
    ParamSpec,
    TypeVar,
    cast,
    overload,
)

from django.db import connections, transaction
from django.tasks import task_backends
from django.tasks.backends.base import BaseTaskBackend
from django.tasks.base import (
    DEFAULT_TASK_BACKEND_ALIAS,
    DEFAULT_TASK_PRIORITY,
    DEFAULT_TASK_QUEUE_NAME,
    Task,
    TaskContext,
    TaskResult,
    TaskResultStatus,
)
from django.tasks.base import task as django_task
from django.tasks.exceptions import InvalidTask, InvalidTaskBackend, TaskResultDoesNotExist
from django.tasks.signals import task_enqueued
from django.utils import timezone

from pgqueue.client import PgQueue
from pgqueue.contrib.django import queue
from pgqueue.contrib.django.task_results import JOB_META_KEY, read_result
from pgqueue.contrib.django.task_runner import handler_for, is_handler_of
from pgqueue.errors import ConfigurationError, InvalidJobError
from pgqueue.rules.payload import check_name
from pgqueue.rules.tasks import Task as JobTask

__all__ = ["PgQueueBackend", "PgQueueTask", "task"]

#: How long a finished task's result stays readable unless OPTIONS say otherwise.
DEFAULT_RESULT_TTL = timedelta(days=1)
#: pgqueue's options every Django task gets unless OPTIONS say otherwise: one attempt, as
#: Django's own backends run a task.
DEFAULT_TASK_OPTIONS: Mapping[str, Any] = {"max_attempts": 1}
_KNOWN_OPTIONS = frozenset({"DATABASE", "RESULT_TTL", "TASK_OPTIONS"})
_registering = threading.Lock()
# What a Django task says in its own words, so not among its pgqueue options.
_NOT_OPTIONS = {
    "queue": "@task(queue_name=...) or .using(queue_name=...)",
    "priority": "@task(priority=...) or .using(priority=...)",
    "name": "a task is named by its module path",
    "pass_context": "@task(takes_context=True)",
}


_P = ParamSpec("_P")
_R = TypeVar("_R")

if TYPE_CHECKING:
    _GenericTask = Task
else:
    # django-stubs makes Task generic (Task[P, R]); Django's class is not subscriptable at run
    # time, so PgQueueTask[P, R] needs a base that is.
    class _GenericTask(Task, Generic[_P, _R]):
        __slots__ = ()


@dataclass(frozen=True, slots=True, kw_only=True)
class PgQueueTask(_GenericTask[_P, _R]):
    """Django's ``Task`` with pgqueue's options for its jobs: ``@task(pgqueue_options={...})``
    (``max_attempts``, ``backoff``, ``timeout``, ``retry_on``, ``concurrency_limit``,
    ``rate_limit``, ``meta``, ``tags``, ...: those of ``@pgq.task``), over the backend's
    ``TASK_OPTIONS``. The backend's ``task_class``: Django's ``@task`` and pgqueue's
    :func:`task` make one when the task's backend is a :class:`PgQueueBackend`."""

    pgqueue_options: Mapping[str, Any] = field(default_factory=dict, hash=False)


class PgQueueBackend(BaseTaskBackend):
    """Django's tasks as pgqueue jobs, in the caller's transaction (see the module docs)."""

    task_class = PgQueueTask
    supports_defer = True
    supports_async_task = True
    supports_get_result = True
    supports_priority = True

    def __init__(self, alias: str, params: dict[str, Any]) -> None:
        super().__init__(alias, params)
        unknown = sorted(set(self.options) - _KNOWN_OPTIONS)
        if unknown:
            raise InvalidTaskBackend(
                f"TASKS[{alias!r}]['OPTIONS'] has unknown keys {', '.join(unknown)} "
                f"(known: {', '.join(sorted(_KNOWN_OPTIONS))})"
            )
        #: the DATABASES alias of the jobs (and of the connection they are written on)
        self.database: str = self.options.get("DATABASE", "default")
        ttl = self.options.get("RESULT_TTL", DEFAULT_RESULT_TTL)
        self.result_ttl: timedelta | None = _ttl(ttl, alias)
        task_options = self.options.get("TASK_OPTIONS", {})
        if not isinstance(task_options, Mapping):
            raise InvalidTaskBackend(
                f"TASKS[{alias!r}]['OPTIONS']['TASK_OPTIONS'] must be a dict of pgqueue task "
                f"options, got {type(task_options).__name__}"
            )
        self.task_options: dict[str, Any] = {**DEFAULT_TASK_OPTIONS, **task_options}
        try:
            #: the project's queue on that database (the one ``manage.py pgq work`` runs)
            self.pgq: PgQueue = queue(self.database)
            for name in sorted(self.queues):
                check_name(name, f"queue name {name!r} of TASKS[{alias!r}]['QUEUES']")
        except (ConfigurationError, InvalidJobError) as exc:
            raise InvalidTaskBackend(f"TASKS[{alias!r}]: {exc}") from None
        # Workers serve the backend's queues, also those no task names in its decorator.
        self.pgq.declare_queues(*sorted(self.queues))

    # -- validation: Django's rules, then pgqueue's ----------------------------------------

    def validate_task(self, task: Task[..., Any]) -> None:
        super().validate_task(task)
        try:
            check_name(task.queue_name, "queue name")
        except InvalidJobError as exc:
            raise InvalidTask(str(exc)) from None
        self.job_task(task)

    def job_task(self, task: Task[..., Any]) -> JobTask[..., Any]:
        """The pgqueue task that runs ``task``'s jobs (named by its ``module_path``),
        registered on the project's queue the first time the task is seen: when its module is
        imported (by the worker's discovery too), or at its first enqueue."""
        name = task.module_path
        with _registering:  # the backends of several threads share the project's queue
            existing = self.pgq.tasks.get(name)
            if existing is not None:
                if not is_handler_of(existing.func, name):
                    raise InvalidTask(f"a pgqueue task is already named {name!r}")
                return existing
            return self._register(task, name)

    def _register(self, task: Task[..., Any], name: str) -> JobTask[..., Any]:
        """Register the handler of ``task`` with this backend's options and the task's."""
        options = self.options_of(task)
        for word in sorted(_NOT_OPTIONS.keys() & options.keys()):
            raise InvalidTask(
                f"pgqueue_options of task {name!r}: {word!r} is Django's to say "
                f"({_NOT_OPTIONS[word]})"
            )
        try:
            return self.pgq.task(name=name, pass_context=True, queue=task.queue_name, **options)(
                handler_for(name)
            )
        except (ConfigurationError, InvalidJobError, TypeError) as exc:
            raise InvalidTask(f"task {name!r}: {exc}") from None

    def options_of(self, task: Task[..., Any]) -> dict[str, Any]:
        """pgqueue's options for ``task``'s jobs: the task's ``pgqueue_options`` over this
        backend's ``TASK_OPTIONS``."""
        return {**self.task_options, **getattr(task, "pgqueue_options", {})}

    # -- enqueue -------------------------------------------------------------------------

    def enqueue(
        self, task: Task[_P, _R], args: list[Any], kwargs: dict[str, Any]
    ) -> TaskResult[_P, _R]:
        """Write the job on the task's Django connection, in the caller's transaction."""
        self.validate_task(task)
        job_task = self.job_task(task)
        result: TaskResult[_P, _R] = TaskResult(
            task=task,
            id="0",  # replaced below, once the job has its id
            status=TaskResultStatus.READY,
            enqueued_at=None,
            started_at=None,
            finished_at=None,
            last_attempted_at=None,
            args=list(args),
            kwargs=dict(kwargs),
            backend=self.alias,
            errors=[],
            worker_ids=[],
        )
        meta: dict[str, Any] = {"backend": self.alias}
        options: dict[str, Any] = {
            "queue": task.queue_name,
            "priority": -task.priority,
            "result_ttl": self.result_ttl,
            # Per job: the task may have been registered by another backend on this database.
            "max_attempts": self.options_of(task).get("max_attempts"),
        }
        if task.run_after is not None:
            run_after = task.run_after
            if timezone.is_naive(run_after):  # USE_TZ = False: the project's local time
                run_after = timezone.make_aware(run_after)
            options["run_at"] = run_after
            meta["run_after"] = run_after.isoformat()
        options["meta"] = {JOB_META_KEY: meta}  # added to the task's own meta
        connection = connections[self.database]
        job_id = job_task.options(conn=connection, **options).enqueue(
            args=result.args, kwargs=result.kwargs
        )
        object.__setattr__(result, "id", str(job_id))
        object.__setattr__(result, "enqueued_at", timezone.now())
        # Sent once the job exists for others to see: at commit (at once outside atomic()).
        transaction.on_commit(
            partial(task_enqueued.send, type(self), task_result=result), using=self.database
        )
        return result

    # -- results ---------------------------------------------------------------------------

    def get_result(self, result_id: str) -> TaskResult[..., Any]:
        """The task's result now (read on the task's Django connection: inside the caller's
        transaction it sees the jobs that transaction enqueued)."""
        result = read_result(self, connections[self.database], result_id)
        if result is None:
            raise TaskResultDoesNotExist(result_id)
        return result


# -- the decorator with pgqueue's keyword ---------------------------------------------------
# Django's @task hands keywords it does not know to the backend's task_class, so
# @django.tasks.task(pgqueue_options=...) runs; django-stubs' overloads of task() have no such
# keyword, so it does not type-check. This task() is Django's with that keyword, typed.


@overload
def task(
    function: Callable[Concatenate[TaskContext[Any, Any], _P], _R],
    *,
    priority: int = ...,
    queue_name: str = ...,
    backend: str = ...,
    takes_context: Literal[True],
    pgqueue_options: Mapping[str, Any] | None = ...,
) -> PgQueueTask[_P, _R]: ...
@overload
def task(
    function: Callable[_P, _R],
    *,
    priority: int = ...,
    queue_name: str = ...,
    backend: str = ...,
    takes_context: Literal[False] = ...,
    pgqueue_options: Mapping[str, Any] | None = ...,
) -> PgQueueTask[_P, _R]: ...
@overload
def task(
    *,
    priority: int = ...,
    queue_name: str = ...,
    backend: str = ...,
    takes_context: Literal[True],
    pgqueue_options: Mapping[str, Any] | None = ...,
) -> Callable[[Callable[Concatenate[TaskContext[Any, Any], _P], _R]], PgQueueTask[_P, _R]]: ...
@overload
def task(
    *,
    priority: int = ...,
    queue_name: str = ...,
    backend: str = ...,
    takes_context: Literal[False] = ...,
    pgqueue_options: Mapping[str, Any] | None = ...,
) -> Callable[[Callable[_P, _R]], PgQueueTask[_P, _R]]: ...
def task(
    function: Callable[..., Any] | None = None,
    *,
    priority: int = DEFAULT_TASK_PRIORITY,
    queue_name: str = DEFAULT_TASK_QUEUE_NAME,
    backend: str = DEFAULT_TASK_BACKEND_ALIAS,
    takes_context: bool = False,
    pgqueue_options: Mapping[str, Any] | None = None,
) -> PgQueueTask[Any, Any] | Callable[[Callable[..., Any]], PgQueueTask[Any, Any]]:
    """Django's ``@task`` (``django.tasks.task``, same keywords and checks) for a task of a
    :class:`PgQueueBackend`, with ``pgqueue_options``: pgqueue's options for its jobs (those of
    ``@pgq.task``), over the backend's ``TASK_OPTIONS``. Raises ``InvalidTask`` when the
    ``backend`` is not a :class:`PgQueueBackend`.

    .. code-block:: python

        from pgqueue.contrib.django.tasks import task

        @task(queue_name="reports", pgqueue_options={"timeout": timedelta(minutes=5)})
        def monthly_report(month: str) -> None: ...
    """

    def wrapper(func: Callable[..., Any]) -> PgQueueTask[Any, Any]:
        task_class = task_backends[backend].task_class
        if not issubclass(task_class, PgQueueTask):
            raise InvalidTask(
                f"pgqueue's @task makes tasks of a PgQueueBackend: TASKS[{backend!r}] makes "
                f"{task_class.__name__}s (use django.tasks.task)"
            )
        # Django's decorator, checks and all, given the keyword its stubs do not know of; what
        # it returns is made by task_class, a PgQueueTask (checked above).
        untyped = cast("Callable[..., PgQueueTask[Any, Any]]", django_task)
        return untyped(
            func,
            priority=priority,
            queue_name=queue_name,
            backend=backend,
            takes_context=takes_context,
            pgqueue_options=dict(pgqueue_options or {}),
        )

    return wrapper if function is None else wrapper(function)


def _ttl(value: object, alias: str) -> timedelta | None:
    if value is None:
        return None
    if isinstance(value, timedelta):
        seconds = value.total_seconds()
    elif isinstance(value, int | float) and not isinstance(value, bool):
        seconds = float(value)
    else:
        seconds = -1.0
    if seconds <= 0:
        raise InvalidTaskBackend(
            f"TASKS[{alias!r}]['OPTIONS']['RESULT_TTL'] must be a positive number of seconds, a "
            f"timedelta or None, got {value!r}"
        )
    return timedelta(seconds=seconds)
