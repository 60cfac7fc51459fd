"""A small Django project written into a temporary directory, for tests that run real
``manage.py`` processes (and ``pgq work``) against the test PostgreSQL.

Its settings read the databases from ``PROJECT_DB`` (and ``PROJECT_OTHER_DB`` for a second alias,
``other``), never from ``PGQUEUE_DSN`` / ``DATABASE_URL``: a command that finds the database does
so through ``DATABASES``, not through the variables plain ``pgq`` reads.
"""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

SETTINGS = """
import os

from psycopg.conninfo import conninfo_to_dict


def _database(dsn):
    params = conninfo_to_dict(dsn)
    return {
        "ENGINE": "django.db.backends.postgresql",
        "NAME": params.get("dbname", ""),
        "USER": params.get("user", ""),
        "PASSWORD": params.get("password", ""),
        "HOST": params.get("host", ""),
        "PORT": params.get("port", ""),
        # A worker keeps its connections when asked to (a persistent connection is what a
        # server-side disconnect breaks), checked before each job when health checks are on.
        "CONN_MAX_AGE": None if os.environ.get("PROJECT_PERSISTENT") else 0,
        "CONN_HEALTH_CHECKS": bool(os.environ.get("PROJECT_PERSISTENT")),
    }


SECRET_KEY = "tests-only"
DEBUG = False
ALLOWED_HOSTS = ["*"]
USE_TZ = True
ROOT_URLCONF = "proj.urls"
DEFAULT_AUTO_FIELD = "django.db.models.BigAutoField"
INSTALLED_APPS = [
    "django.contrib.admin",
    "django.contrib.auth",
    "django.contrib.contenttypes",
    "django.contrib.sessions",
    "django.contrib.messages",
    "pgqueue.contrib.django",
    "orders",
]
MIDDLEWARE = [
    "django.contrib.sessions.middleware.SessionMiddleware",
    "django.middleware.common.CommonMiddleware",
    "django.middleware.csrf.CsrfViewMiddleware",
    "django.contrib.auth.middleware.AuthenticationMiddleware",
    "django.contrib.messages.middleware.MessageMiddleware",
]
TEMPLATES = [
    {
        "BACKEND": "django.template.backends.django.DjangoTemplates",
        "APP_DIRS": True,
        "OPTIONS": {
            "context_processors": [
                "django.template.context_processors.request",
                "django.contrib.auth.context_processors.auth",
                "django.contrib.messages.context_processors.messages",
            ]
        },
    }
]
DATABASES = {"default": _database(os.environ["PROJECT_DB"])}
if os.environ.get("PROJECT_OTHER_DB"):
    DATABASES["other"] = _database(os.environ["PROJECT_OTHER_DB"])
"""

URLS = """
from django.contrib import admin
from django.urls import path

urlpatterns = [path("admin/", admin.site.urls)]
"""

MANAGE = """
import os
import sys

if __name__ == "__main__":
    os.environ.setdefault("DJANGO_SETTINGS_MODULE", "proj.settings")
    from django.core.management import execute_from_command_line

    execute_from_command_line(sys.argv)
"""

MODELS = """
from django.db import models


class Order(models.Model):
    email = models.TextField()
    confirmed = models.BooleanField(default=False)
"""

MIGRATION = """
from django.db import migrations, models


class Migration(migrations.Migration):
    initial = True
    dependencies = []
    operations = [
        migrations.CreateModel(
            name="Order",
            fields=[
                ("id", models.BigAutoField(primary_key=True, serialize=False)),
                ("email", models.TextField()),
                ("confirmed", models.BooleanField(default=False)),
            ],
        )
    ]
"""

TASKS = """
import time

from django.db import connection

from orders.models import Order
from pgqueue import current_job
from pgqueue.contrib.django import queue

pgq = queue()


@pgq.task(queue="orders", max_attempts=3, backoff=lambda attempt: 0.0, result_ttl=3600)
def confirm(order_id: int) -> int:
    order = Order.objects.get(id=order_id)
    order.confirmed = True
    order.save(update_fields=["confirmed"])
    # The server process behind this thread's Django connection (a test terminates it).
    with connection.cursor() as cursor:
        cursor.execute("SELECT pg_backend_pid()")
        return int(cursor.fetchone()[0])


@pgq.task(queue="orders", max_attempts=1)
def charge(order_id: int) -> None:
    raise RuntimeError(f"card declined for order {order_id}")


@pgq.task(queue="slow", max_attempts=1)
def slow(seconds: float) -> None:
    deadline = time.monotonic() + seconds
    while time.monotonic() < deadline and not current_job().cancelled:
        time.sleep(0.05)
"""

FILES = {
    "manage.py": MANAGE,
    "proj/__init__.py": "",
    "proj/settings.py": SETTINGS,
    "proj/urls.py": URLS,
    "orders/__init__.py": "",
    "orders/models.py": MODELS,
    "orders/migrations/__init__.py": "",
    "orders/migrations/0001_initial.py": MIGRATION,
    "orders/tasks.py": TASKS,
}


def write_project(root: Path) -> Path:
    """The project's files under ``root``; returns ``root`` (where manage.py is)."""
    for name, text in FILES.items():
        path = root / name
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(text.lstrip())
    return root


def project_env(db: str, other: str | None = None, **extra: str) -> dict[str, str]:
    """The environment of a process of the project: its databases, and none of the variables
    that would point pgqueue or Django elsewhere."""
    env = {
        k: v
        for k, v in os.environ.items()
        if not k.startswith(("PGQUEUE_", "DJANGO_", "PROJECT_")) and k != "DATABASE_URL"
    }
    env["PROJECT_DB"] = db
    if other is not None:
        env["PROJECT_OTHER_DB"] = other
    return {**env, **extra}


def manage(
    project: Path, env: dict[str, str], *args: str, timeout: float = 120
) -> subprocess.CompletedProcess[str]:
    """``python manage.py ARGS`` in the project, finished (its exit status is not checked)."""
    return subprocess.run(
        [sys.executable, "manage.py", *args],
        cwd=project,
        env=env,
        capture_output=True,
        text=True,
        timeout=timeout,
        check=False,
    )


def start_worker(project: Path, env: dict[str, str], *args: str) -> subprocess.Popen[str]:
    """``manage.py pgq work orders.tasks:pgq ARGS`` running in the background."""
    return subprocess.Popen(
        [sys.executable, "manage.py", "pgq", "work", "orders.tasks:pgq", "--poll-interval",
         "0.2", "--shutdown-grace", "2", *args],
        cwd=project, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True,
    )  # fmt: skip


def stop(worker: subprocess.Popen[str]) -> str:
    """SIGTERM a worker; its log once it exited."""
    worker.terminate()
    try:
        _, err = worker.communicate(timeout=60)
    except subprocess.TimeoutExpired:
        worker.kill()
        raise
    return err


def ok(done: subprocess.CompletedProcess[str]) -> str:
    """The stdout of a command that must have succeeded."""
    assert done.returncode == 0, f"{done.args}: {done.returncode}\n{done.stdout}{done.stderr}"
    return done.stdout
