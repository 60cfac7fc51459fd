from __future__ import annotations

import os
import re
import shutil
import subprocess
import sys
import threading
from pathlib import Path

import psycopg
import pytest
from psycopg import sql
from psycopg.conninfo import make_conninfo

from pgqueue.db import migrate
from pgqueue.db.schema_check import migrations_dir
from scripts import schema

# The venv's pgq, also when the venv is not on PATH (pytest run as .venv/bin/pytest).
PGQ = shutil.which("pgq") or str(Path(sys.executable).with_name("pgq"))


def tables(dsn: str) -> set[str]:
    with psycopg.connect(dsn) as conn:
        return {
            r[0]
            for r in conn.execute(
                "SELECT schemaname || '.' || tablename FROM pg_tables"
                " WHERE schemaname NOT IN ('pg_catalog', 'information_schema')"
            ).fetchall()
        }


def test_upgrade_downgrade_upgrade(fresh_db):
    assert migrate.current_revision(fresh_db) is None
    migrate.upgrade(fresh_db)
    head = migrate.head_revision()
    assert migrate.current_revision(fresh_db) == head
    assert {"pgqueue.jobs", "pgqueue.dead_letters"} <= tables(fresh_db)

    migrate.downgrade(fresh_db, "base")
    assert migrate.current_revision(fresh_db) is None
    assert tables(fresh_db) == {"pgqueue.pgqueue_alembic_version"}

    migrate.upgrade(fresh_db)
    assert migrate.current_revision(fresh_db) == head
    with psycopg.connect(fresh_db) as conn:
        assert conn.execute("SELECT pgqueue.enqueue('t')").fetchone()[0] >= 1


def test_every_revision_downgrades_and_upgrades_one_step_at_a_time(fresh_db):
    """Each downgrade gives back exactly the schema its revision's upgrade found (the same
    pg_dump, function bodies included: a downgrade includes the very file the upgrade to that
    revision did), and upgrading again gives the schema a fresh install gets."""
    revisions = [r.revision for r in migrate.alembic_script().walk_revisions()]  # head first
    upgraded = {}
    for rev in reversed(revisions):
        migrate.upgrade(fresh_db, "+1")
        assert migrate.current_revision(fresh_db) == rev
        upgraded[rev] = schema.dump(fresh_db)
    for rev in revisions[1:]:
        migrate.downgrade(fresh_db, "-1")
        assert schema.dump(fresh_db) == upgraded[rev], f"downgrade to {rev}"
    migrate.downgrade(fresh_db, "-1")
    assert migrate.current_revision(fresh_db) is None
    assert tables(fresh_db) == {"pgqueue.pgqueue_alembic_version"}
    migrate.upgrade(fresh_db)
    assert schema.dump(fresh_db) == upgraded[revisions[0]]


def test_coexists_with_the_applications_own_alembic_history(fresh_db):
    with psycopg.connect(fresh_db) as conn:
        conn.execute("CREATE TABLE alembic_version (version_num varchar(32) PRIMARY KEY)")
        conn.execute("INSERT INTO alembic_version VALUES ('app_rev_42')")
    migrate.upgrade(fresh_db)
    with psycopg.connect(fresh_db) as conn:
        assert conn.execute("SELECT version_num FROM alembic_version").fetchall() == [
            ("app_rev_42",)
        ]


def test_concurrent_migrations_from_several_processes(fresh_db):
    """A deploy's migrate job and starting workers may all run `pgq migrate` at once."""
    procs = [
        subprocess.Popen(
            [PGQ, "migrate", "--dsn", fresh_db],
            stdout=subprocess.PIPE,
            stderr=subprocess.STDOUT,
            text=True,
        )
        for _ in range(4)
    ]
    outputs = [p.communicate(timeout=60)[0] for p in procs]
    assert [p.returncode for p in procs] == [0, 0, 0, 0], outputs
    assert migrate.current_revision(fresh_db) == migrate.head_revision()


def test_concurrent_migrations_from_threads(fresh_db):
    threads = [threading.Thread(target=migrate.upgrade, args=(fresh_db,)) for _ in range(3)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert migrate.current_revision(fresh_db) == migrate.head_revision()


def test_offline_sql_applies_cleanly_with_psql_semantics(fresh_db):
    text = migrate.upgrade_sql()
    assert "CREATE TABLE pgqueue.jobs" in text and "pgqueue_alembic_version" in text
    # The function and view files the revisions include are in the SQL, not their \i lines.
    assert not re.search(r"^\\i ", text, re.MULTILINE)
    claim = (migrations_dir() / "sql/functions/claim/0010.sql").read_text()
    assert claim.strip() in text
    # Inside its transaction it takes the lock online migrations take, so they wait for it.
    assert text.startswith(f"BEGIN;\n\nSELECT pg_advisory_xact_lock({migrate.MIGRATION_LOCK_KEY});")
    with psycopg.connect(fresh_db, autocommit=True) as conn:
        conn.execute(text)
    assert migrate.current_revision(fresh_db) == migrate.head_revision()
    migrate.upgrade(fresh_db)  # nothing left to do


@pytest.mark.parametrize("version_check", ["server_version_num"])
def test_server_is_supported(fresh_db, version_check):
    with psycopg.connect(fresh_db) as conn:
        version = int(conn.execute(f"SHOW {version_check}").fetchone()[0])
    assert version >= 140000


def test_offline_sql_without_a_transaction_and_from_a_revision(fresh_db):
    text = migrate.upgrade_sql(transaction=False)
    assert not re.findall(r"(?m)^(?:BEGIN|COMMIT);$", text)
    assert "pg_advisory_xact_lock" in text
    with psycopg.connect(fresh_db) as conn:  # the caller's one transaction
        conn.execute(text)
    assert migrate.current_revision(fresh_db) == migrate.head_revision()

    previous = migrate.alembic_script().get_revision(migrate.head_revision()).down_revision
    assert isinstance(previous, str)
    downgrade = migrate.downgrade_sql(previous, migrate.head_revision(), transaction=False)
    with psycopg.connect(fresh_db) as conn:
        conn.execute(downgrade)
    assert migrate.current_revision(fresh_db) == previous
    with psycopg.connect(fresh_db) as conn:
        conn.execute(migrate.upgrade_sql(from_revision=previous))
    assert migrate.current_revision(fresh_db) == migrate.head_revision()


def test_importing_migrate_does_not_import_alembic_or_sqlalchemy():
    """Only migrating needs alembic and SQLAlchemy, so pgqueue can be imported without them."""
    code = (
        "import sys, pgqueue.db.migrate; "
        "print(sorted({m.split('.')[0] for m in sys.modules} & {'alembic', 'sqlalchemy'}))"
    )
    out = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, check=True, timeout=60
    )
    assert out.stdout.strip() == "[]"


def pgq_migrate(*args: str) -> subprocess.CompletedProcess[str]:
    env = {k: v for k, v in os.environ.items() if k not in ("PGQUEUE_DSN", "DATABASE_URL")}
    return subprocess.run(
        [sys.executable, "-m", "pgqueue.cli", "migrate", *args],
        capture_output=True,
        text=True,
        timeout=120,
        env=env,
        check=False,
    )


def assert_one_line_error(result: subprocess.CompletedProcess[str], expected: str) -> None:
    assert result.returncode == 1, result
    assert "Traceback" not in result.stderr
    lines = result.stderr.strip().splitlines()
    assert len(lines) == 1, result.stderr
    assert lines[0].startswith("pgq migrate failed: ")
    assert expected in lines[0]


@pytest.mark.parametrize(
    "dsn",
    [
        "host=127.0.0.1 port=1 dbname=app connect_timeout=5",
        # SQLAlchemy's URL form, as apps keep it in DATABASE_URL.
        "postgresql+psycopg://app@127.0.0.1:1/app?connect_timeout=5",
    ],
)
def test_pgq_migrate_unreachable_server_is_one_line(dsn):
    assert_one_line_error(pgq_migrate("--dsn", dsn), "Connection refused")


def test_pgq_migrate_bad_dsn_is_one_line():
    assert_one_line_error(pgq_migrate("--dsn", "not a dsn"), "not a valid PostgreSQL DSN")


def test_pgq_migrate_unknown_revision_is_one_line(fresh_db):
    assert_one_line_error(
        pgq_migrate("--dsn", fresh_db, "--revision", "nope"), "Can't locate revision"
    )


def test_pgq_migrate_without_privileges_is_one_line(fresh_db):
    role = f"pgq_no_create_{os.getpid()}"
    with psycopg.connect(fresh_db, autocommit=True) as conn:
        conn.execute(sql.SQL("DROP ROLE IF EXISTS {}").format(sql.Identifier(role)))
        conn.execute(sql.SQL("CREATE ROLE {} LOGIN").format(sql.Identifier(role)))
    try:
        result = pgq_migrate("--dsn", make_conninfo(fresh_db, user=role))
        assert_one_line_error(result, "permission denied for database")
    finally:
        with psycopg.connect(fresh_db, autocommit=True) as conn:
            conn.execute(sql.SQL("DROP ROLE {}").format(sql.Identifier(role)))
    assert migrate.current_revision(fresh_db) is None
