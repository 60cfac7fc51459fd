"""``manage.py pgq`` is the whole ``pgq`` command line on the project's database: every command
finds the database in ``DATABASES`` (``--database`` picks the alias, ``--dsn`` still wins),
never in ``PGQUEUE_DSN`` / ``DATABASE_URL`` or the embedded server. Real ``manage.py`` processes
on a project whose settings are the only place that names the database."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import urllib.request
from collections.abc import Iterator
from pathlib import Path

import pytest

from pgqueue.db import migrate
from tests.conftest import PgServer
from tests.dashboard_helpers import free_port
from tests.helpers import PGQ, scalar, wait_for
from tests.integration.django_project import manage, ok, project_env, write_project

# Where the embedded server would put its data: nowhere it can (a command that falls back to it
# fails instead of starting a server).
NO_EMBEDDED = "/dev/null/pgqueue-embedded"

ENQUEUE_IN_DJANGO = """
from django.db import connection, transaction
from orders.models import Order
from orders.tasks import confirm
with transaction.atomic():
    order = Order.objects.create(email="a@example.com")
    print(confirm.enqueue(order.id, conn=connection))
"""


@pytest.fixture
def other_db(pg_server: PgServer) -> Iterator[str]:
    """A second empty database (the project's ``other`` alias)."""
    name = f"pgqueue_test_other_{os.getpid()}"
    yield pg_server.create_database(name)
    pg_server.drop_database(name)


@pytest.fixture
def project(tmp_path: Path) -> Path:
    return write_project(tmp_path / "project")


def test_every_command_reads_databases(project: Path, fresh_db: str) -> None:
    env = project_env(fresh_db, PGQUEUE_EMBEDDED_DIR=NO_EMBEDDED)
    ok(manage(project, env, "migrate", "--no-input"))

    # The schema the project's migrate installed is what `pgq db status` and `pgq migrate` see.
    status = ok(manage(project, env, "pgq", "db", "status"))
    assert f"schema version: {migrate.head_revision()}" in status
    assert "embedded" not in status
    ok(manage(project, env, "pgq", "migrate"))
    assert migrate.current_revision(fresh_db) == migrate.head_revision()

    # A job enqueued by the project (in its transaction) is what the commands list.
    job = int(ok(manage(project, env, "shell", "-c", ENQUEUE_IN_DJANGO)).split()[-1])
    stats = json.loads(ok(manage(project, env, "pgq", "status", "--json")))
    assert "orders" in json.dumps(stats)
    listed = json.loads(ok(manage(project, env, "pgq", "jobs", "list", "--json")))
    assert [row["id"] for row in listed] == [job]

    # Writes too: enqueue from the shell, then run both jobs; the failing one is dead-lettered.
    charged = ok(manage(project, env, "pgq", "enqueue", "orders.tasks.charge", "--queue",
                        "orders", "--max-attempts", "1", "--args", '{"order_id": 7}'))  # fmt: skip
    assert scalar(fresh_db, "SELECT count(*) FROM pgqueue.jobs") == 2
    ok(manage(project, env, "pgq", "work", "orders.tasks:pgq", "--burst", "--poll-interval",
              "0.2"))  # fmt: skip
    dead = json.loads(ok(manage(project, env, "pgq", "dlq", "list", "--json")))
    assert [row["id"] for row in dead] == [int(charged.split()[-1])]
    assert scalar(fresh_db, "SELECT confirmed FROM orders_order") is True


def test_database_picks_the_alias_and_dsn_wins(
    project: Path, fresh_db: str, other_db: str, dsn: str
) -> None:
    env = project_env(fresh_db, other_db, PGQUEUE_EMBEDDED_DIR=NO_EMBEDDED)
    # Installed on `other` only: `default` has no schema.
    ok(manage(project, env, "pgq", "--database", "other", "migrate"))
    assert migrate.current_revision(other_db) == migrate.head_revision()
    assert migrate.current_revision(fresh_db) is None

    # Both spellings, before or after the command.
    ok(manage(project, env, "pgq", "enqueue", "orders.tasks.confirm", "--args",
              '{"order_id": 1}', "--database", "other"))  # fmt: skip
    ok(manage(project, env, "pgq", "--database=other", "enqueue", "orders.tasks.confirm",
              "--args", '{"order_id": 2}'))  # fmt: skip
    assert scalar(other_db, "SELECT count(*) FROM pgqueue.jobs") == 2

    # --dsn wins over DATABASES (here: the test database the fixture migrated).
    ok(manage(project, env, "pgq", "enqueue", "orders.tasks.confirm", "--dsn", dsn))
    assert scalar(dsn, "SELECT count(*) FROM pgqueue.jobs") == 1

    # The settings win over the variables plain `pgq` reads.
    moved = {**env, "PGQUEUE_DSN": dsn, "DATABASE_URL": dsn}
    ok(manage(project, moved, "pgq", "--database", "other", "enqueue", "orders.tasks.confirm"))
    assert scalar(other_db, "SELECT count(*) FROM pgqueue.jobs") == 3
    assert scalar(dsn, "SELECT count(*) FROM pgqueue.jobs") == 1


def test_unknown_alias_or_engine_is_one_line(project: Path, fresh_db: str) -> None:
    env = project_env(fresh_db, PGQUEUE_EMBEDDED_DIR=NO_EMBEDDED)
    done = manage(project, env, "pgq", "--database", "replica", "status")
    assert done.returncode == 1
    assert "no database 'replica' in settings.DATABASES (have: default)" in done.stderr
    assert "Traceback" not in done.stderr
    assert len(done.stderr.strip().splitlines()) == 1
    # Help needs no database.
    shown = ok(manage(project, env, "pgq", "--database", "replica", "status", "--help"))
    assert "Usage: manage.py pgq status" in shown


def test_pgq_work_without_django_settings_says_what_to_do(project: Path, fresh_db: str) -> None:
    """Plain `pgq work` on a Django project's tasks, DJANGO_SETTINGS_MODULE unset: one line that
    names the problem and both fixes, exit 1 (not Django's ImproperlyConfigured traceback)."""
    env = project_env(fresh_db, PGQUEUE_DSN=fresh_db)
    done = subprocess.run(
        [PGQ, "work", "orders.tasks:pgq", "--burst"],
        cwd=project, env=env, capture_output=True, text=True, timeout=60, check=False,
    )  # fmt: skip
    assert done.returncode == 1, done.stderr
    assert "Traceback" not in done.stderr
    lines = done.stderr.strip().splitlines()
    assert len(lines) == 1, done.stderr
    assert "orders.tasks uses Django, but DJANGO_SETTINGS_MODULE is not set" in lines[0]
    assert "python manage.py pgq work orders.tasks:pgq" in lines[0]
    assert "DJANGO_SETTINGS_MODULE=proj.settings" in lines[0]


def test_dashboard_serves_the_projects_database(project: Path, fresh_db: str) -> None:
    env = project_env(fresh_db, PGQUEUE_EMBEDDED_DIR=NO_EMBEDDED)
    ok(manage(project, env, "migrate", "--no-input"))
    job = int(ok(manage(project, env, "shell", "-c", ENQUEUE_IN_DJANGO)).split()[-1])
    port = free_port()
    server = subprocess.Popen(
        [sys.executable, "manage.py", "pgq", "dashboard", "--port", str(port)],
        cwd=project, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True,
    )  # fmt: skip
    url = f"http://127.0.0.1:{port}"
    try:

        def state() -> str | None:
            assert server.poll() is None, server.communicate()[1]
            try:
                with urllib.request.urlopen(f"{url}/api/jobs/{job}", timeout=5) as response:
                    return str(response.read().decode())
            except OSError:
                return None

        shown = json.loads(wait_for(state, timeout=60))
    finally:
        server.terminate()
        server.communicate(timeout=30)
    assert shown["task"] == "orders.tasks.confirm"
