"""The Django app: its migration installs pgqueue's schema; ``post_migrate`` keeps it current."""

from __future__ import annotations

from typing import Any

from django.apps import AppConfig
from django.db.models.signals import post_migrate


class PgQueueConfig(AppConfig):
    name = "pgqueue.contrib.django"
    label = "pgqueue"
    verbose_name = "pgqueue"
    default_auto_field = "django.db.models.BigAutoField"

    def ready(self) -> None:
        post_migrate.connect(_upgrade_schema, sender=self)


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
