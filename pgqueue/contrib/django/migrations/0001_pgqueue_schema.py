"""Installs pgqueue's schema (schema ``pgqueue``) with pgqueue's own migrations.

Later pgqueue releases upgrade it from ``post_migrate`` (see ``apps.py``), so this stays the
only Django migration; an app whose migrations use pgqueue's tables depends on it:
``dependencies = [("pgqueue", "0001_pgqueue_schema")]``.
"""

from __future__ import annotations

from typing import Any

from django.db import migrations


def install(apps: Any, schema_editor: Any) -> None:
    from pgqueue.contrib.django import schema

    schema.upgrade(schema_editor.connection)


def remove(apps: Any, schema_editor: Any) -> None:
    from pgqueue.contrib.django import schema

    schema.downgrade(schema_editor.connection, "base")


class Migration(migrations.Migration):
    initial = True
    dependencies = []
    operations = [migrations.RunPython(install, remove)]
