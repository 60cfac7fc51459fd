"""Before work starts: a DSN that can never work, a schema missing, behind or ahead, and an APP
that does not name a PgQueue are one line each (and a non-zero exit where it is a command);
a server that is only down is waited for, as before."""

from __future__ import annotations

import asyncio
import os
import re
import subprocess
import time
from pathlib import Path

import psycopg
import pytest
from psycopg.conninfo import make_conninfo

from pgqueue import PgQueue
from pgqueue.db import migrate
from pgqueue.db.schema_check import package_revision
from pgqueue.errors import (
    ConfigurationError,
    DatabaseRejectedError,
    DatabaseUnavailableError,
    PgQueueError,
    SchemaVersionError,
)
from tests.helpers import APP, PGQ, ROOT

HEAD = package_revision()
# The revision before the newest (revision ids need not be consecutive).
PREVIOUS = str(migrate.alembic_script().get_revision(HEAD).down_revision)


def run_pgq(*args: str, env: dict[str, str] | None = None, cwd: Path = ROOT, timeout: float = 60):
    environ = {k: v for k, v in os.environ.items() if k not in ("PGQUEUE_DSN", "DATABASE_URL")}
    return subprocess.run(
        [PGQ, *args], env={**environ, **(env or {})}, cwd=cwd,
        capture_output=True, text=True, timeout=timeout, check=False,
    )  # fmt: skip


def one_line(stderr: str) -> str:
    lines = [line for line in stderr.splitlines() if line.strip()]
    assert len(lines) == 1, stderr
    assert "Traceback" not in stderr
    return lines[0]


def test_the_package_revision_is_alembic_head():
    assert package_revision() == migrate.head_revision()


# -- the schema -----------------------------------------------------------------------------


def test_pgq_work_on_a_database_without_the_schema_is_one_line(fresh_db):
    started = time.monotonic()
    done = run_pgq("work", APP, "--dsn", fresh_db)
    assert done.returncode == 1
    line = one_line(done.stderr)
    assert "not installed" in line and HEAD in line and "pgq migrate" in line
    assert time.monotonic() - started < 30


def test_pgq_work_on_a_schema_one_revision_behind_names_both_revisions(fresh_db):
    migrate.upgrade(fresh_db, PREVIOUS)
    done = run_pgq("work", APP, "--dsn", fresh_db)
    assert done.returncode == 1
    line = one_line(done.stderr)
    assert f"at revision {PREVIOUS}" in line and f"needs revision {HEAD}" in line
    assert "`pgq migrate`" in line


def test_pgq_reaper_checks_the_schema_too(fresh_db):
    migrate.upgrade(fresh_db, PREVIOUS)
    for args in (["reaper", "--once"], ["reaper"]):
        done = run_pgq(*args, "--dsn", fresh_db)
        assert done.returncode == 1, done.stderr
        assert f"at revision {PREVIOUS}" in done.stderr.splitlines()[-1]
        assert "Traceback" not in done.stderr


def test_enqueue_on_a_schema_behind_raises_schema_version_error(fresh_db):
    migrate.upgrade(fresh_db, PREVIOUS)
    with PgQueue(fresh_db) as pgq:

        @pgq.task
        def report() -> None: ...

        with pytest.raises(SchemaVersionError) as raised:
            report.enqueue()
        assert raised.value.database == PREVIOUS and raised.value.package == HEAD
        assert "pgq migrate" in str(raised.value)
        pgq.migrate()  # once migrated, the same client works
        assert report.enqueue() > 0


def test_async_enqueue_on_a_missing_schema_raises_schema_version_error(fresh_db):
    async def main() -> None:
        async with PgQueue(fresh_db) as pgq:
            with pytest.raises(SchemaVersionError, match="not installed"):
                await pgq.enqueue_async("app.tasks.report", {})

    asyncio.run(main())


def test_enqueue_on_the_callers_connection_to_an_old_schema_says_to_migrate(fresh_db):
    # conn= runs no check of its own (no statement is added to the caller's transaction):
    # what an old schema lacks is still said as what to do, not a raw UndefinedFunction.
    migrate.upgrade(fresh_db, "0012")
    with PgQueue(fresh_db) as pgq, psycopg.connect(fresh_db) as conn:

        @pgq.task
        def report(n: int) -> None: ...

        with pytest.raises(PgQueueError) as raised:
            report.options(conn=conn, idempotency_key="k").enqueue(n=1)
        assert not isinstance(raised.value.__cause__, PgQueueError)
        assert f"older than this pgqueue needs (revision {HEAD})" in str(raised.value)
        assert "run `pgq migrate`" in str(raised.value)


def test_a_schema_ahead_of_the_package_says_to_upgrade_pgqueue(fresh_db):
    migrate.upgrade(fresh_db)
    with psycopg.connect(fresh_db) as conn:
        conn.execute("UPDATE pgqueue.pgqueue_alembic_version SET version_num = '9999'")
    with PgQueue(fresh_db) as pgq, pytest.raises(SchemaVersionError) as raised:
        pgq.enqueue("app.tasks.report", {})
    assert "9999" in str(raised.value) and HEAD in str(raised.value)
    assert "upgrade pgqueue" in str(raised.value)


def test_a_django_managed_database_is_told_to_run_manage_py_migrate(fresh_db):
    migrate.upgrade(fresh_db, PREVIOUS)
    with psycopg.connect(fresh_db) as conn:
        conn.execute("CREATE TABLE django_migrations (id serial, app text, name text)")
    with PgQueue(fresh_db) as pgq, pytest.raises(SchemaVersionError, match=r"manage\.py migrate"):
        pgq.enqueue("app.tasks.report", {})


def test_the_alembic_how_to_pins_the_newest_revision():
    # The how-to and the module's docstring show the revision to pin: the newest, always.
    for page in (ROOT / "docs" / "how-to" / "alembic.md", ROOT / "pgqueue" / "alembic.py"):
        text = page.read_text(encoding="utf-8")
        pinned = set(re.findall(r'pgqueue\.alembic\.upgrade\(op, "(\d{4})"\)', text))
        assert pinned == {HEAD}, (page, pinned)


# -- connections ----------------------------------------------------------------------------


def test_pgq_work_on_a_database_that_does_not_exist_exits_at_once(dsn):
    missing = make_conninfo(dsn, dbname="pgqueue_no_such_database")
    started = time.monotonic()
    done = run_pgq("work", APP, "--dsn", missing)
    assert done.returncode == 1
    line = one_line(done.stderr)
    assert "database does not exist" in line and "pgqueue_no_such_database" in line
    assert time.monotonic() - started < 20


def test_pgq_work_as_a_role_that_does_not_exist_exits_at_once_without_the_password(dsn):
    wrong = make_conninfo(dsn, user="pgq_no_such_role", password="s3cret-value")
    started = time.monotonic()
    done = run_pgq("work", APP, "--dsn", wrong)
    assert done.returncode == 1
    line = one_line(done.stderr)
    assert "role does not exist" in line
    assert "s3cret-value" not in done.stderr
    assert time.monotonic() - started < 20


def test_pgq_reaper_and_dashboard_on_a_missing_database_exit_with_one_line(dsn):
    missing = make_conninfo(dsn, dbname="pgqueue_no_such_database")
    for args in (["reaper"], ["reaper", "--once"], ["dashboard", "--port", "0"]):
        done = run_pgq(*args, "--dsn", missing)
        assert done.returncode == 1, (args, done.stderr)
        assert "database does not exist" in done.stderr.splitlines()[-1], done.stderr
        assert "Traceback" not in done.stderr


def test_pgq_work_waits_for_a_server_that_is_down(tmp_path):
    # Nothing listens on this socket: an outage, which the worker waits out with a warning.
    down = f"host={tmp_path} port=5999 dbname=app user=app"
    log = tmp_path / "stderr"
    with log.open("w") as stderr:
        worker = subprocess.Popen(
            [PGQ, "work", APP, "--dsn", down], cwd=ROOT, stderr=stderr, text=True,
            env={k: v for k, v in os.environ.items() if k not in ("PGQUEUE_DSN", "DATABASE_URL")},
        )  # fmt: skip
    try:
        # Waited for by what it says, not by the clock: a loaded machine starts it slowly.
        deadline = time.monotonic() + 90
        while "database unavailable at start-up" not in log.read_text():
            assert worker.poll() is None, log.read_text()
            assert time.monotonic() < deadline, log.read_text()
            time.sleep(0.2)
        time.sleep(1)
        assert worker.poll() is None, log.read_text()  # still waiting, not given up
    finally:
        worker.terminate()
        worker.wait(timeout=30)
    assert worker.returncode == 0


def test_python_connection_errors_are_pgqueue_errors_without_the_password(dsn):
    missing = make_conninfo(dsn, dbname="pgqueue_no_such_database", password="s3cret-value")
    with PgQueue(missing) as pgq, pytest.raises(DatabaseRejectedError) as raised:
        pgq.enqueue("app.tasks.report", {})
    error = raised.value
    assert isinstance(error, PgQueueError)
    assert isinstance(error.cause, psycopg.OperationalError) and error.__cause__ is error.cause
    assert "pgqueue_no_such_database" in error.server and "s3cret" not in str(error)
    assert "createdb" in error.hint


def test_python_unreachable_server_is_database_unavailable(tmp_path):
    async def main() -> None:
        down = f"host={tmp_path} port=5999 dbname=app user=app"
        async with PgQueue(down) as pgq:
            with pytest.raises(DatabaseUnavailableError) as raised:
                await pgq.enqueue_async("app.tasks.report", {})
        assert str(tmp_path) in raised.value.server and "database app" in raised.value.server

    asyncio.run(main())


def test_a_python_caller_is_not_told_about_dash_dash_dsn():
    with pytest.raises(ConfigurationError) as raised:
        PgQueue("mysql://u@h/db")
    assert "--dsn" not in str(raised.value) and "dsn is a mysql:// URL" in str(raised.value)
    done = run_pgq("stats", "--dsn", "mysql://u@h/db")
    assert done.returncode == 1
    assert "--dsn is a mysql:// URL" in one_line(done.stderr)


# -- APP ------------------------------------------------------------------------------------


def test_app_mistakes_say_what_is_missing(tmp_path, dsn):
    (tmp_path / "myapp.py").write_text("from pgqueue import PgQueue\n\nqueue = PgQueue()\n")
    (tmp_path / "broken.py").write_text("import no_such_dependency_here\n")
    cases = {
        "myapp:pgqq": "module myapp has no attribute 'pgqq' (its PgQueue: queue)",
        "myapp": "module myapp has no attribute 'pgq' (its PgQueue: queue)",
        "nosuchmodule:pgq": "no module named 'nosuchmodule'",
    }
    for app, expected in cases.items():
        done = run_pgq("work", app, "--dsn", dsn, cwd=tmp_path)
        assert done.returncode == 1
        assert expected in one_line(done.stderr), done.stderr
    # An import failing inside the app is the app's bug: its traceback shows where.
    done = run_pgq("work", "broken:pgq", "--dsn", dsn, cwd=tmp_path)
    assert done.returncode != 0
    assert "Traceback" in done.stderr and "no_such_dependency_here" in done.stderr
    assert 'broken.py", line 1' in done.stderr
