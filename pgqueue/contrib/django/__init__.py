"""pgqueue in a Django project.

Add ``"pgqueue.contrib.django"`` to ``INSTALLED_APPS``; then

* ``manage.py migrate`` installs pgqueue's schema (its own migrations, applied in Django's
  migration transaction) and upgrades it whenever a newer pgqueue ships newer migrations;
* :func:`queue` gives the project's :class:`~pgqueue.PgQueue` on one of Django's databases
  (``DATABASES["default"]`` unless told otherwise): the same object for the same alias, so the
  ``tasks.py`` of every app registers on one queue;
* ``TASKS = {"default": {"BACKEND": "pgqueue.contrib.django.tasks.PgQueueBackend"}}`` runs
  Django's own tasks (``django.tasks``) on it (:mod:`pgqueue.contrib.django.tasks`);
* ``manage.py pgq work`` (or ``pgq work`` with ``DJANGO_SETTINGS_MODULE`` set) imports every
  installed app's ``tasks`` module and runs all their tasks, pgqueue's and Django's
  (:mod:`pgqueue.contrib.django.project`);
* the admin shows queue depths, running jobs and dead letters (read-only, from pgqueue's views).

Enqueue in the request's transaction by passing Django's connection::

    from django.db import connection, transaction

    with transaction.atomic():
        user = User.objects.create(email=email)
        send_welcome.enqueue(user.id, conn=connection)  # exists iff the transaction commits

:func:`emit_event` emits an event that durable jobs wait for on Django's connection, so it
joins the caller's ``atomic()`` the same way: a rolled-back emit wakes nobody.
"""

from __future__ import annotations

import threading
from datetime import timedelta
from functools import partial
from typing import Any, cast

from pgqueue.client import PgQueue
from pgqueue.errors import ConfigurationError

__all__ = ["aemit_event", "dsn", "emit_event", "queue"]

# OPTIONS that Django's PostgreSQL backend reads itself: not libpq parameters.
_DJANGO_ONLY_OPTIONS = frozenset(
    {"isolation_level", "server_side_binding", "assume_role", "pool", "cursor_factory", "context"}
)


def dsn(alias: str = "default") -> str:
    """A libpq DSN for Django's database ``alias`` (``DATABASES[alias]``)."""
    from django.conf import settings
    from psycopg.conninfo import make_conninfo

    databases = settings.DATABASES
    if alias not in databases:
        raise ConfigurationError(
            f"no database {alias!r} in settings.DATABASES (have: {', '.join(databases)})"
        )
    entry = databases[alias]
    engine = entry.get("ENGINE", "")
    if "postgresql" not in engine and "postgis" not in engine:
        raise ConfigurationError(
            f"DATABASES[{alias!r}] uses {engine or 'no ENGINE'}: pgqueue needs PostgreSQL "
            "(django.db.backends.postgresql)"
        )
    params: dict[str, Any] = {
        "dbname": entry.get("NAME") or None,
        "user": entry.get("USER") or None,
        "password": entry.get("PASSWORD") or None,
        "host": entry.get("HOST") or None,
        "port": str(entry["PORT"]) if entry.get("PORT") else None,
    }
    given: dict[str, Any] = cast("dict[str, Any]", entry.get("OPTIONS") or {})
    options = {k: v for k, v in given.items() if k not in _DJANGO_ONLY_OPTIONS}
    return make_conninfo(**{k: v for k, v in {**params, **options}.items() if v is not None})


# The project's queues, one per database alias: every app's tasks.py registers on the same one,
# so the worker started for the project runs them all.
_queues: dict[str, tuple[PgQueue, dict[str, Any]]] = {}
_queues_lock = threading.Lock()


def queue(alias: str = "default", **options: Any) -> PgQueue:
    """The project's :class:`~pgqueue.PgQueue` on Django's database ``alias``: the same object
    on every call for the same alias, so the tasks of every app register on one queue and one
    worker runs them all. ``options`` are :class:`~pgqueue.PgQueue`'s (``pool_size``,
    ``prepare``, ...): the first call's stand; a later call with other options is an error (two
    apps disagreeing on them would otherwise get one silently). Safe at import time of a tasks
    module: the queue connects when first used."""
    with _queues_lock:
        made = _queues.get(alias)
        if made is None:
            dsn(alias)  # a wrong alias is an error now, at the line that names it
            # Read when the queue first connects: Django's test runner points DATABASES at the
            # test database after the tasks modules were imported.
            made = (PgQueue(partial(dsn, alias), **options), dict(options))
            _queues[alias] = made
        elif options and options != made[1]:
            raise ConfigurationError(
                f"queue({alias!r}) was first made with options {made[1]!r}, now asked with "
                f"{options!r}: the project has one queue per database, so give its options in "
                "one place (the first call) and call queue() without them elsewhere"
            )
        return made[0]


def emit_event(
    name: str,
    payload: Any = None,
    *,
    keep: float | timedelta | None = None,
    using: str = "default",
) -> bool:
    """Emit the event ``name`` (with a JSON ``payload``) that durable jobs wait for
    (``ctx.wait_for_event``), on Django's connection ``using``: inside ``transaction.atomic()``
    it commits or rolls back with the caller's transaction (a rolled-back emit wakes nobody),
    outside it commits at once. The first emit of a name wins (True); later ones return False.
    ``keep``: how long the event is kept for jobs that wait later (default: the history
    retention, at least a day). The same as ``queue(using).emit_event(name, payload,
    conn=connections[using], keep=keep)``; a ``using`` that is not in ``DATABASES`` is a
    :class:`~pgqueue.ConfigurationError`."""
    from django.db import connections

    return queue(using).emit_event(name, payload, conn=connections[using], keep=keep)


async def aemit_event(
    name: str,
    payload: Any = None,
    *,
    keep: float | timedelta | None = None,
    using: str = "default",
) -> bool:
    """:func:`emit_event` from async code: on Django's connection in its sync thread, as
    Django's own async ORM calls and ``aenqueue()`` run."""
    from asgiref.sync import sync_to_async

    return await sync_to_async(emit_event)(name, payload, keep=keep, using=using)
