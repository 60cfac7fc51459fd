"""pgqueue in a Django project.

Add ``"pgqueue.contrib.django"`` to ``INSTALLED_APPS``; then

* ``manage.py migrate`` installs pgqueue's schema (its own migrations, applied in Django's
  migration transaction) and upgrades it whenever a newer pgqueue ships newer migrations;
* :func:`queue` gives a :class:`~pgqueue.PgQueue` on one of Django's databases
  (``DATABASES["default"]`` unless told otherwise);
* ``pgq work myproject.tasks:pgq`` sets Django up before importing the tasks when
  ``DJANGO_SETTINGS_MODULE`` is set, and ``manage.py pgq work myproject.tasks:pgq`` runs any
  ``pgq`` command inside the project;
* the admin shows queue depths, running jobs and dead letters (read-only, from pgqueue's views).

Enqueue in the request's transaction by passing Django's connection::

    from django.db import connection, transaction

    with transaction.atomic():
        user = User.objects.create(email=email)
        send_welcome.enqueue(user.id, conn=connection)  # exists iff the transaction commits
"""

from __future__ import annotations

from typing import Any, cast

from pgqueue.client import PgQueue
from pgqueue.errors import ConfigurationError

__all__ = ["dsn", "queue"]

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


def queue(alias: str = "default", **options: Any) -> PgQueue:
    """A :class:`~pgqueue.PgQueue` on Django's database ``alias``; ``options`` are
    :class:`~pgqueue.PgQueue`'s (``pool_size``, ``prepare``, ...). The DSN is read from the
    settings when the queue first connects, so this can run at import time of a tasks module."""
    return PgQueue(dsn(alias), **options)
