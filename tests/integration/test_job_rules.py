"""The one-column rules of ``pgqueue.jobs``: kept in domains (migration 0026) that the columns
are typed as (migration 0027), so a statement that writes the table reads back and plans no
CHECK of them (only ``jobs_running_has_lease``, which reads two columns); every bad value is
refused as before, under the same constraint name, by INSERT, UPDATE and COPY (text and binary)
alike, and clients still read the columns' base types."""

from __future__ import annotations

from datetime import timedelta
from typing import Any

import psycopg
import pytest
from psycopg import sql
from psycopg.postgres import types as pg_types

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


# column -> its type as the table declared it before 0027: the domain's base type, which the
# wire still reports (a RowDescription names a domain column by its base type's OID).
BASE_TYPES: dict[str, str] = {
    "queue": "text",
    "task": "text",
    "state": "text",
    "attempts": "int4",
    "max_attempts": "int4",
    "concurrency_key": "text",
    "result_ttl": "interval",
    "unique_for": "interval",
    "unique_states": "text[]",
}


def test_the_columns_are_their_domains_and_the_table_checks_only_the_lease(conn):
    # No table CHECK casts the columns any more (0026's jobs_columns_check): a CHECK is read
    # back and planned at every statement that writes the table, a domain once per session.
    checks = conn.execute(
        "SELECT conname FROM pg_constraint"
        " WHERE conrelid = 'pgqueue.jobs'::regclass AND contype = 'c' ORDER BY conname"
    ).fetchall()
    assert [name for (name,) in checks] == ["jobs_running_has_lease"]
    types = dict(
        conn.execute(
            "SELECT attname, format_type(atttypid, atttypmod) FROM pg_attribute"
            " WHERE attrelid = 'pgqueue.jobs'::regclass AND attname = ANY(%s)",
            (list(REFUSED),),
        ).fetchall()
    )
    assert types == {column: f"pgqueue.jobs_{column}" for column in REFUSED}
    domains = conn.execute(
        "SELECT t.typname, c.conname, c.convalidated"
        " FROM pg_constraint AS c JOIN pg_type AS t ON t.oid = c.contypid"
        " WHERE t.typnamespace = 'pgqueue'::regnamespace AND c.contype = 'c' ORDER BY 1"
    ).fetchall()
    assert sorted(domains) == sorted((f"jobs_{c}", f"jobs_{c}_check", True) for c in REFUSED)


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


# What binary COPY sends for the values above written as text (intervals as timedeltas).
BINARY: dict[Any, Any] = {
    "-1 second": timedelta(seconds=-1),
    "0 seconds": timedelta(0),
    "1 microsecond": timedelta(microseconds=1),
}


def copy_columns(column: str) -> list[str]:
    return list(dict.fromkeys(["queue", "task", column]))


def copy_row(column: str, value: Any) -> tuple[Any, ...]:
    row = {"queue": "default", "task": "t", column: value}
    return tuple(row[name] for name in copy_columns(column))


@pytest.mark.parametrize("binary", [False, True], ids=["text", "binary"])
@pytest.mark.parametrize("column", sorted(REFUSED))
def test_copy_refuses_a_bad_value_of_every_column(conn, column, binary):
    # Bulk enqueue writes with COPY (FORMAT BINARY): the domains' receive functions check
    # what the base types' would have taken.
    columns = copy_columns(column)
    statement = sql.SQL("COPY pgqueue.jobs ({}) FROM STDIN{}").format(
        sql.SQL(", ").join(map(sql.Identifier, columns)),
        sql.SQL(" (FORMAT BINARY)" if binary else ""),
    )
    with (
        pytest.raises(psycopg.errors.CheckViolation) as refused,
        conn.cursor().copy(statement) as copy,
    ):
        if binary:
            copy.set_types([BASE_TYPES[name] for name in columns])
        for value in (TAKEN[column], REFUSED[column]):
            sent = BINARY.get(value, value) if binary and isinstance(value, str) else value
            copy.write_row(copy_row(column, sent))
    assert refused.value.diag.constraint_name == f"jobs_{column}_check"
    assert jobs(conn) == 0


def test_a_running_job_still_needs_a_lease(conn):
    with pytest.raises(psycopg.errors.CheckViolation) as refused:
        insert(conn, state="running")
    assert refused.value.diag.constraint_name == "jobs_running_has_lease"


def oid(kind: str) -> int:
    if kind.endswith("[]"):
        return pg_types[kind[:-2]].array_oid
    return pg_types[kind].oid


def test_clients_read_the_base_types_of_the_table_views_and_claim(conn):
    # psycopg picks its loaders by the OIDs a result's description carries: a domain column is
    # described by its base type, so what clients read is what they read before 0027.
    cursor = conn.execute(
        sql.SQL("SELECT {} FROM pgqueue.jobs").format(
            sql.SQL(", ").join(map(sql.Identifier, BASE_TYPES))
        )
    )
    assert cursor.description is not None
    assert {c.name: c.type_code for c in cursor.description} == {
        column: oid(kind) for column, kind in BASE_TYPES.items()
    }
    job = insert(conn, max_attempts=3, concurrency_key="k", unique_states=["dead"])
    running = conn.execute(
        "SELECT * FROM pgqueue.claim(ARRAY['default'], ARRAY['t'], 1, interval '1 minute',"
        " gen_random_uuid())"
    ).fetchall()
    assert [(r[0], r[1], r[2], r[4], r[5]) for r in running if r[0] is not None] == [
        (job, "default", "t", 1, 3)
    ]
    cursor = conn.execute("SELECT queue, task, attempt, max_attempts FROM pgqueue.running_jobs")
    assert cursor.fetchall() == [("default", "t", 1, 3)]
    assert cursor.description is not None
    assert [c.type_code for c in cursor.description] == [
        pg_types["text"].oid,
        pg_types["text"].oid,
        pg_types["int4"].oid,
        pg_types["int4"].oid,
    ]


def test_one_after_insert_trigger_and_no_when_to_plan_per_statement(conn):
    # The id check and the NOTIFY to idle workers in one trigger function: a trigger's WHEN is
    # read back and planned once per statement, as a table's CHECKs are.
    triggers = conn.execute(
        "SELECT tgname, tgqual IS NULL FROM pg_trigger"
        " WHERE tgrelid = 'pgqueue.jobs'::regclass AND NOT tgisinternal"
        " AND tgtype & 4 <> 0 ORDER BY tgname"  # TRIGGER_TYPE_INSERT
    ).fetchall()
    assert triggers == [("jobs_after_insert", True)]
