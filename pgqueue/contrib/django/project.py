"""The whole project's tasks on one queue: what ``manage.py pgq work`` runs without an APP.

``pgqueue.contrib.django.project:pgq`` is the project's :class:`~pgqueue.PgQueue` once every
installed app's tasks are registered on it: reading it imports each app's ``tasks`` module
(``settings.PGQUEUE_TASK_MODULES``, default ``["tasks"]``), as Celery's
``autodiscover_tasks()`` does, and sets up the ``TASKS`` backends that are
:class:`~pgqueue.contrib.django.tasks.PgQueueBackend` (their queues are served too). Both
pgqueue's own tasks (``queue().task``) and Django's (``django.tasks.task``) run on it.

``pgq work`` with ``DJANGO_SETTINGS_MODULE`` set and no APP, and ``manage.py pgq work``, use
it; the queue is the one on ``settings.PGQUEUE_DATABASE`` (default ``"default"``).
"""

from __future__ import annotations

import logging
from typing import Any

from pgqueue.client import PgQueue
from pgqueue.contrib.django import queue
from pgqueue.errors import ConfigurationError
from pgqueue.rules.log_actions import Action, fields

__all__ = ["APP_SPEC", "discover", "task_modules"]

#: What ``pgq work`` imports when a Django project gives no APP.
APP_SPEC = "pgqueue.contrib.django.project:pgq"
#: The module of each installed app that declares its tasks, unless the settings say otherwise.
DEFAULT_TASK_MODULES = ("tasks",)

log = logging.getLogger("pgqueue.django")


def task_modules() -> list[str]:
    """``settings.PGQUEUE_TASK_MODULES`` (a module name or a list of them; default
    ``["tasks"]``), checked."""
    from django.conf import settings

    names: Any = getattr(settings, "PGQUEUE_TASK_MODULES", DEFAULT_TASK_MODULES)
    if isinstance(names, str):
        names = [names]
    if not isinstance(names, list | tuple) or not all(
        isinstance(n, str) and n.isidentifier() for n in names
    ):
        raise ConfigurationError(
            "settings.PGQUEUE_TASK_MODULES must be a module name or a list of them (like "
            f"['tasks']), got {names!r}"
        )
    return list(names)


def discover() -> PgQueue:
    """Import every installed app's task modules and set up the pgqueue ``TASKS`` backends;
    return the project's queue (on ``settings.PGQUEUE_DATABASE``), every task registered."""
    from django.conf import settings
    from django.utils.module_loading import autodiscover_modules

    database = getattr(settings, "PGQUEUE_DATABASE", "default")
    pgq = queue(database)
    elsewhere = [
        f"TASKS[{alias!r}] (DATABASES[{backend.database!r}])"
        for alias, backend in _pgqueue_backends()
        if backend.database != database
    ]
    autodiscover_modules(*task_modules())
    if elsewhere:
        log.warning(
            "this worker serves DATABASES[%r]; the tasks of %s live in another database and "
            "are not run here: run a worker with PGQUEUE_DATABASE set to it",
            database,
            ", ".join(elsewhere),
            extra=fields(Action.DJANGO_TASKS_ELSEWHERE),
        )
    return pgq


def _pgqueue_backends() -> list[tuple[str, Any]]:
    """The ``TASKS`` backends that are pgqueue's, set up (so their queues are served); none
    before Django 6, which has no ``django.tasks``."""
    try:
        from django.tasks import task_backends
    except ImportError:
        return []
    from pgqueue.contrib.django.tasks import PgQueueBackend

    found = []
    for alias in task_backends.settings:
        backend = task_backends[alias]
        if isinstance(backend, PgQueueBackend):
            found.append((alias, backend))
    return found


def __getattr__(name: str) -> Any:
    # ``project:pgq`` discovers on first read, so importing the module costs nothing.
    if name == "pgq":
        from django.core.exceptions import ImproperlyConfigured

        try:
            return discover()
        except ImproperlyConfigured as exc:  # a TASKS entry, say: one line, not a traceback
            raise ConfigurationError(f"{type(exc).__name__}: {exc}") from None
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
