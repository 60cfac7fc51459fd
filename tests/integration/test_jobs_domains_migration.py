"""Migration 0027 on a database in use: the columns of ``pgqueue.jobs`` become their domains with
the jobs in the table kept, and the views it drops and makes again (a view's column cannot change
its type in place) keep the rights granted on them, both ways."""

from __future__ import annotations

import itertools
import os
from collections.abc import Iterator
from typing import Any

import psycopg
import pytest
from psycopg import sql
from sqlalchemy.exc import IntegrityError

from pgqueue.db import migrate

_counter = itertools.count()

# The views over the columns that change type, and the one over one of them.
VIEWS = (
    "queue_depth",
    "queue_stats",
    "recent_failures",
    "running_jobs",
    "worker_status",
    "workflow_jobs",
    "workflow_overview",
)
JOBS = "SELECT id, queue, task, state, attempts, max_attempts, concurrency_key FROM pgqueue.jobs"


@pytest.fixture
def reader(fresh_db: str) -> Iterator[str]:
    """A role of the cluster (removed at the end) holding rights on the views at 0026."""
    name = f"pgq_view_reader_{os.getpid()}_{next(_counter)}"
    yield name
    with psycopg.connect(fresh_db, autocommit=True) as conn:
        conn.execute(sql.SQL("DROP OWNED BY {}").format(sql.Identifier(name)))
        conn.execute(sql.SQL("DROP ROLE {}").format(sql.Identifier(name)))


def view_rights(conn: psycopg.Connection[Any]) -> set[tuple[str, str, str, bool]]:
    rows = conn.execute(
        "SELECT c.relname, pg_get_userbyid(a.grantee), a.privilege_type, a.is_grantable"
        " FROM pg_class AS c, aclexplode(c.relacl) AS a"
        " WHERE c.relnamespace = 'pgqueue'::regnamespace AND c.relkind = 'v'"
        " AND a.grantee <> c.relowner"
    ).fetchall()
    return set(rows)


def column_types(conn: psycopg.Connection[Any]) -> dict[str, str]:
    rows = conn.execute(
        "SELECT attname, format_type(atttypid, atttypmod) FROM pg_attribute"
        " WHERE attrelid = 'pgqueue.jobs'::regclass AND attname IN ('queue', 'state', 'attempts')"
    ).fetchall()
    return dict(rows)


def test_the_upgrade_keeps_the_jobs_and_the_views_rights_and_the_downgrade_too(fresh_db, reader):
    migrate.upgrade(fresh_db, "0026")
    with psycopg.connect(fresh_db, autocommit=True) as conn:
        conn.execute(sql.SQL("CREATE ROLE {}").format(sql.Identifier(reader)))
        conn.execute(sql.SQL("GRANT USAGE ON SCHEMA pgqueue TO {}").format(sql.Identifier(reader)))
        conn.execute(
            sql.SQL("GRANT SELECT ON pgqueue.running_jobs, pgqueue.queue_stats TO {}").format(
                sql.Identifier(reader)
            )
        )
        conn.execute(
            sql.SQL("GRANT SELECT ON pgqueue.workflow_overview TO {} WITH GRANT OPTION").format(
                sql.Identifier(reader)
            )
        )
        conn.execute("GRANT SELECT ON pgqueue.queue_depth TO PUBLIC")
        # A producer's column rights on the table (pgq roles): the columns keep them.
        conn.execute(
            sql.SQL("GRANT INSERT (queue, task, state) ON pgqueue.jobs TO {}").format(
                sql.Identifier(reader)
            )
        )
        conn.execute(
            "INSERT INTO pgqueue.jobs (queue, task, state, concurrency_key, max_attempts,"
            " attempts, lease_expires_at)"
            " VALUES ('q', 't', 'ready', NULL, 5, 0, NULL), ('q', 't', 'scheduled', 'k', 1, 0,"
            " NULL), ('q', 'u', 'running', NULL, 3, 1, now() + interval '1 hour')"
        )
        jobs = conn.execute(JOBS + " ORDER BY id").fetchall()
        rights = view_rights(conn)
    assert len(rights) == 4

    migrate.upgrade(fresh_db, "0027")
    with psycopg.connect(fresh_db, autocommit=True) as conn:
        assert column_types(conn) == {
            "queue": "pgqueue.jobs_queue",
            "state": "pgqueue.jobs_state",
            "attempts": "pgqueue.jobs_attempts",
        }
        assert conn.execute(JOBS + " ORDER BY id").fetchall() == jobs
        assert view_rights(conn) == rights
        names = conn.execute(
            "SELECT relname FROM pg_class WHERE relnamespace = 'pgqueue'::regnamespace"
            " AND relkind = 'v' AND relname = ANY(%s)",
            (list(VIEWS),),
        ).fetchall()
        assert sorted(n for (n,) in names) == sorted(VIEWS)
        conn.execute(sql.SQL("SET ROLE {}").format(sql.Identifier(reader)))
        assert conn.execute("SELECT queue, task FROM pgqueue.running_jobs").fetchall() == [
            ("q", "u")
        ]
        conn.execute("RESET ROLE")
        column_rights = conn.execute(
            "SELECT has_column_privilege(%s, 'pgqueue.jobs', c, 'INSERT')"
            " FROM unnest(ARRAY['queue', 'task', 'state', 'attempts']) AS c",
            (reader,),
        ).fetchall()
        assert column_rights == [(True,), (True,), (True,), (False,)]

    migrate.downgrade(fresh_db, "0026")
    with psycopg.connect(fresh_db, autocommit=True) as conn:
        assert column_types(conn) == {"queue": "text", "state": "text", "attempts": "integer"}
        assert conn.execute(JOBS + " ORDER BY id").fetchall() == jobs
        assert view_rights(conn) == rights
        checks = conn.execute(
            "SELECT conname FROM pg_constraint"
            " WHERE conrelid = 'pgqueue.jobs'::regclass AND contype = 'c' ORDER BY conname"
        ).fetchall()
        assert checks == [("jobs_columns_check",), ("jobs_running_has_lease",)]


def test_an_upgrade_over_a_bad_row_fails_whole(fresh_db):
    # A row that breaks a rule (written past 0026's CHECK, made NOT VALID by hand) stops the
    # upgrade with the rule's name, and nothing of the upgrade is left behind.
    migrate.upgrade(fresh_db, "0026")
    with psycopg.connect(fresh_db, autocommit=True) as conn:
        check = conn.execute(
            "SELECT pg_get_constraintdef(oid) FROM pg_constraint"
            " WHERE conrelid = 'pgqueue.jobs'::regclass AND conname = 'jobs_columns_check'"
        ).fetchone()
        assert check is not None
        conn.execute("ALTER TABLE pgqueue.jobs DROP CONSTRAINT jobs_columns_check")
        conn.execute("INSERT INTO pgqueue.jobs (queue, task, max_attempts) VALUES ('q', 't', 0)")
        conn.execute(
            sql.SQL(
                "ALTER TABLE pgqueue.jobs ADD CONSTRAINT jobs_columns_check {} NOT VALID"
            ).format(sql.SQL(check[0]))
        )
    with pytest.raises(IntegrityError) as refused:  # alembic runs on SQLAlchemy
        migrate.upgrade(fresh_db, "0027")
    assert isinstance(refused.value.orig, psycopg.errors.CheckViolation)
    assert refused.value.orig.diag.constraint_name == "jobs_max_attempts_check"
    assert migrate.current_revision(fresh_db) == "0026"
    with psycopg.connect(fresh_db) as conn:
        assert column_types(conn)["queue"] == "text"
