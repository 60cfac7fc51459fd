"""The Django app: its migration installs pgqueue's schema; ``post_migrate`` keeps it current;
its job hook gives every job the connection discipline Django gives every request."""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

from django.apps import AppConfig
from django.db import close_old_connections
from django.db.models.signals import post_migrate

from pgqueue.handler.job_hooks import add_job_hook


class PgQueueConfig(AppConfig):
    name = "pgqueue.contrib.django"
    label = "pgqueue"
    verbose_name = "pgqueue"
    default_auto_field = "django.db.models.BigAutoField"

    def ready(self) -> None:
        post_migrate.connect(_upgrade_schema, sender=self)
        # Workers of this project (threads and process-pool children alike, each of which sets
        # Django up and so gets here) run every sync job between two close_old_connections().
        add_job_hook(django_connections)


def _upgrade_schema(sender: AppConfig, using: str = "default", **kwargs: Any) -> None:
    """After every ``manage.py migrate``: bring pgqueue's schema up to this pgqueue's newest
    migration (the app's own Django migration installed it once; newer pgqueue releases add
    alembic revisions without adding Django migrations)."""
    from django.db import connections, transaction

    from pgqueue.contrib.django import schema

    connection = connections[using]
    if connection.vendor != "postgresql":
        return
    with transaction.atomic(using=using):
        schema.upgrade(connection)


@contextmanager
def django_connections() -> Iterator[None]:
    """Around each job, on the thread that runs it: close the Django connections that are
    broken (the server closed them: a restart, a failover, an idle timeout) or past
    ``CONN_MAX_AGE``, as Django does at the start and end of each request, so the job opens a
    fresh one instead of failing an attempt on a dead one. With persistent connections, set
    ``CONN_HEALTH_CHECKS`` to have one that died while idle checked before reuse."""
    close_old_connections()
    try:
        yield
    finally:
        close_old_connections()
