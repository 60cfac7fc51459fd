from __future__ import annotations

import shutil
import subprocess
import threading

import psycopg
import pytest

from pgqueue.db import migrate

PGQ = shutil.which("pgq") or "pgq"


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
    migrate.upgrade(fresh_db)
    from alembic.script import ScriptDirectory

    script = ScriptDirectory.from_config(migrate.alembic_config())
    revisions = [r.revision for r in script.walk_revisions()]  # head first
    for _ in revisions:
        migrate.downgrade(fresh_db, "-1")
    assert migrate.current_revision(fresh_db) is None
    for rev in reversed(revisions):
        migrate.upgrade(fresh_db, "+1")
        assert migrate.current_revision(fresh_db) == rev


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
    with psycopg.connect(fresh_db, autocommit=True) as conn:
        conn.execute(text)
    assert migrate.current_revision(fresh_db) == migrate.head_revision()
    migrate.upgrade(fresh_db)  # nothing left to do


@pytest.mark.parametrize("version_check", ["server_version_num"])
def test_server_is_supported(fresh_db, version_check):
    with psycopg.connect(fresh_db) as conn:
        version = int(conn.execute(f"SHOW {version_check}").fetchone()[0])
    assert version >= 140000
