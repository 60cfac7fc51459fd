"""pgqueue.testing.pytest from a user's project: a throwaway project whose tests use the
plugin's fixtures, run by pytest in a subprocess against the session's server."""

from __future__ import annotations

import os
import subprocess
import sys
import textwrap
from pathlib import Path

import psycopg

TASKS = """
from pgqueue import PgQueue

pgq = PgQueue()  # $PGQUEUE_DSN in production; the plugin binds it to each test's database

@pgq.task(result_ttl=60)
def greet(name: str) -> str:
    shout.enqueue(name.upper())
    return f"hello {name}"

@pgq.task
def shout(name: str) -> None:
    pass
"""

TESTS = """
import pytest
from app.tasks import greet, shout, pgq as app_queue
from pgqueue.testing import assert_enqueued, assert_not_enqueued, drain

@pytest.mark.parametrize("n", range(3))
def test_each_test_has_a_database_of_its_own(pgq, pgqueue_db, n):
    assert pgq is app_queue and pgq.dsn == pgqueue_db
    assert_not_enqueued(pgq)  # nothing left by the test before
    job = greet.enqueue("ada")
    assert_enqueued(pgq, greet, args={"name": "ada"})
    summary = drain(pgq)
    assert [r.task for r in summary.succeeded] == [greet.name, shout.name]
    assert pgq.result(job, timeout=1) == "hello ada"
    shout.enqueue("left behind")
"""


def _project(tmp_path: Path) -> Path:
    (tmp_path / "app").mkdir()
    (tmp_path / "app" / "__init__.py").write_text("")
    (tmp_path / "app" / "tasks.py").write_text(textwrap.dedent(TASKS))
    (tmp_path / "test_app.py").write_text(textwrap.dedent(TESTS))
    return tmp_path


def _pytest(project: Path, server_dsn: str, *args: str) -> subprocess.CompletedProcess[str]:
    env = {
        **{k: v for k, v in os.environ.items() if not k.startswith("PGQUEUE_")},
        "PGQUEUE_TEST_DSN": server_dsn,
        "PYTHONPATH": str(project),
        "PYTHONDONTWRITEBYTECODE": "1",
    }
    env.pop("DATABASE_URL", None)
    return subprocess.run(
        [sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", "--rootdir", str(project),
         *args, "test_app.py"],
        cwd=project, env=env, capture_output=True, text=True, timeout=300, check=False,
    )  # fmt: skip


def _templates(server_dsn: str) -> list[str]:
    with psycopg.connect(server_dsn, autocommit=True) as conn:
        rows = conn.execute(
            "SELECT datname FROM pg_database WHERE datname LIKE 'pgqueue\\_template\\_%'"
        ).fetchall()
    return [row[0] for row in rows]


def test_the_plugin_gives_each_test_a_migrated_database_and_binds_the_app(pg_server, tmp_path):
    project = _project(tmp_path)
    done = _pytest(
        project, pg_server.admin_dsn, "-p", "pgqueue.testing.pytest", "-o",
        "pgqueue_app=app.tasks:pgq",
    )  # fmt: skip
    assert done.returncode == 0, done.stdout + done.stderr
    assert "3 passed" in done.stdout
    assert _templates(pg_server.admin_dsn) == []  # the session's template is dropped


def test_without_an_app_pgq_is_a_new_queue_on_the_tests_database(pg_server, tmp_path):
    project = _project(tmp_path)
    (project / "test_app.py").write_text(
        "def test_a_new_queue(pgq, pgqueue_db):\n"
        "    assert pgq.dsn == pgqueue_db and pgq.tasks == {}\n"
    )
    done = _pytest(project, pg_server.admin_dsn, "-p", "pgqueue.testing.pytest")
    assert done.returncode == 0, done.stdout + done.stderr
    assert "1 passed" in done.stdout


def test_the_plugin_is_not_loaded_unless_asked_for(pg_server, tmp_path):
    done = _pytest(_project(tmp_path), pg_server.admin_dsn)
    assert done.returncode != 0
    assert "fixture 'pgq' not found" in done.stdout


def test_a_wrong_app_is_named_in_one_line(pg_server, tmp_path):
    done = _pytest(
        _project(tmp_path), pg_server.admin_dsn, "-p", "pgqueue.testing.pytest", "-o",
        "pgqueue_app=app.tasks:pgqq",
    )  # fmt: skip
    assert done.returncode != 0
    assert "ConfigurationError: pgqueue_app: app.tasks has no attribute 'pgqq'" in done.stdout
