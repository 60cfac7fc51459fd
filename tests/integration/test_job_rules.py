"""The one-column rules of ``pgqueue.jobs`` (migration 0026): kept in domains the table's one
CHECK casts to, so a statement no longer reads back and plans nine CHECKs; every bad value is
refused as before, under the same constraint name, by INSERT, UPDATE and COPY alike."""

from __future__ import annotations

from typing import Any

import psycopg
import pytest
from psycopg import sql

# column -> a value its rule refuses; the constraint is jobs_<column>_check.
REFUSED: dict[str, Any] = {
    "queue": "",
    "task": "t" * 201,
    "state": "finished",
    "attempts": -1,
    "max_attempts": 0,
    "concurrency_key": "",
    "result_ttl": "-1 second",
    "unique_for": "0 seconds",
    "unique_states": ["succeeded", "ready"],
}

# The same columns at the edge of what they take (NULL where the column allows it).
TAKEN: dict[str, Any] = {
    "queue": "q" * 200,
    "task": "t",
    "state": "scheduled",
    "attempts": 0,
    "max_attempts": 1,
    "concurrency_key": "k" * 1000,
    "result_ttl": None,
    "unique_for": "1 microsecond",
    "unique_states": ["succeeded", "dead", "cancelled"],
}


def insert(conn: psycopg.Connection[Any], **columns: Any) -> int:
    columns = {"queue": "default", "task": "t", **columns}
    statement = sql.SQL("INSERT INTO pgqueue.jobs ({}) VALUES ({}) RETURNING id").format(
        sql.SQL(", ").join(map(sql.Identifier, columns)),
        sql.SQL(", ").join(sql.Placeholder() * len(columns)),
    )
    row = conn.execute(statement, list(columns.values())).fetchone()
    assert row is not None
    return int(row[0])


def jobs(conn: psycopg.Connection[Any]) -> int:
    row = conn.execute("SELECT count(*) FROM pgqueue.jobs").fetchone()
    assert row is not None
    return int(row[0])


def test_the_table_checks_its_columns_in_one_constraint_and_the_lease_in_another(conn):
    checks = conn.execute(
        "SELECT conname FROM pg_constraint"
        " WHERE conrelid = 'pgqueue.jobs'::regclass AND contype = 'c' ORDER BY conname"
    ).fetchall()
    assert [name for (name,) in checks] == ["jobs_columns_check", "jobs_running_has_lease"]
    domains = conn.execute(
        "SELECT t.typname, c.conname"
        " FROM pg_constraint AS c JOIN pg_type AS t ON t.oid = c.contypid"
        " WHERE t.typnamespace = 'pgqueue'::regnamespace ORDER BY 1"
    ).fetchall()
    assert sorted(domains) == sorted((f"jobs_{c}", f"jobs_{c}_check") for c in REFUSED)


@pytest.mark.parametrize("column", sorted(REFUSED))
def test_a_bad_value_is_refused_under_its_constraints_name(conn, column):
    with pytest.raises(psycopg.errors.CheckViolation) as refused:
        insert(conn, **{column: REFUSED[column]})
    assert refused.value.diag.constraint_name == f"jobs_{column}_check"
    assert f"pgqueue.jobs_{column} " in str(refused.value)
    assert jobs(conn) == 0


@pytest.mark.parametrize("column", sorted(REFUSED))
def test_an_update_to_a_bad_value_is_refused_too(conn, column):
    job = insert(conn)
    with pytest.raises(psycopg.errors.CheckViolation) as refused:
        conn.execute(
            sql.SQL("UPDATE pgqueue.jobs SET {} = %s WHERE id = %s").format(sql.Identifier(column)),
            (REFUSED[column], job),
        )
    assert refused.value.diag.constraint_name == f"jobs_{column}_check"


def test_values_at_the_edge_of_each_rule_are_taken(conn):
    job = insert(conn, **TAKEN)
    row = conn.execute(
        sql.SQL("SELECT {} FROM pgqueue.jobs WHERE id = %s").format(
            sql.SQL(", ").join(map(sql.Identifier, TAKEN))
        ),
        (job,),
    ).fetchone()
    assert row is not None
    assert row[0] == TAKEN["queue"] and row[5] == TAKEN["concurrency_key"]
    assert row[8] == TAKEN["unique_states"]


def test_copy_is_checked_and_a_refused_batch_writes_nothing(conn):
    statement = "COPY pgqueue.jobs (queue, task, priority) FROM STDIN"
    with (
        pytest.raises(psycopg.errors.CheckViolation) as refused,
        conn.cursor().copy(statement) as copy,
    ):
        copy.write_row(("default", "t", 0))
        copy.write_row(("", "t", 0))
    assert refused.value.diag.constraint_name == "jobs_queue_check"
    assert jobs(conn) == 0


def test_a_running_job_still_needs_a_lease(conn):
    with pytest.raises(psycopg.errors.CheckViolation) as refused:
        insert(conn, state="running")
    assert refused.value.diag.constraint_name == "jobs_running_has_lease"


def test_the_columns_keep_their_types(conn):
    # Views, composite types and functions return these columns: their types are unchanged.
    types = dict(
        conn.execute(
            "SELECT attname, format_type(atttypid, atttypmod) FROM pg_attribute"
            " WHERE attrelid = 'pgqueue.jobs'::regclass AND attname = ANY(%s)",
            (list(REFUSED),),
        ).fetchall()
    )
    assert types == {
        "queue": "text",
        "task": "text",
        "state": "text",
        "attempts": "integer",
        "max_attempts": "integer",
        "concurrency_key": "text",
        "result_ttl": "interval",
        "unique_for": "interval",
        "unique_states": "text[]",
    }


def test_one_after_insert_trigger_and_no_when_to_plan_per_statement(conn):
    # The id check and the NOTIFY to idle workers in one trigger function: a trigger's WHEN is
    # read back and planned once per statement, as a table's CHECKs are.
    triggers = conn.execute(
        "SELECT tgname, tgqual IS NULL FROM pg_trigger"
        " WHERE tgrelid = 'pgqueue.jobs'::regclass AND NOT tgisinternal"
        " AND tgtype & 4 <> 0 ORDER BY tgname"  # TRIGGER_TYPE_INSERT
    ).fetchall()
    assert triggers == [("jobs_after_insert", True)]
