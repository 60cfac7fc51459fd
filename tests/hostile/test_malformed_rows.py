"""Rows written into pgqueue.jobs by hand, with values no enqueue call would produce, must not
crash or stall a worker: each bad job goes to the dead letters with an error naming the problem,
the good jobs around it run, and a job for a task nobody knows is left where it is."""

from __future__ import annotations

from typing import Any

import psycopg
import pytest
from psycopg import sql

from tests.helpers import ledger, scalar, thread_worker, wait_for
from tests.hostile import hostile_app

DEEP = "[" * 5000 + "]" * 5000  # jsonb stores it; Python's json.loads cannot (recursion)

# (label, task, args as SQL jsonb text, extra columns, words the dead letter's error must name)
MALFORMED: list[tuple[str, str, str, dict[str, Any], str]] = [
    ("array", "echo_one", "[1, 2]", {}, "must be a JSON object"),
    ("null", "echo_one", "null", {}, "got null"),
    ("string", "echo_one", '"just text"', {}, "got a string"),
    ("number", "echo_one", "42", {}, "got a number"),
    ("unknown parameter", "echo_one", '{"nope": 1}', {}, "missing a required argument: 'value'"),
    ("missing parameter", "echo_one", "{}", {}, "do not match"),
    ("deep", "echo_one", '{"value": ' + DEEP + "}", {}, "cannot be decoded"),
    ("huge number", "echo_one", '{"value": 1' + "0" * 5000 + "}", {}, "cannot be decoded"),
    ("absurd attempts", "echo_one", '{"value": 1}', {"attempts": 2147483647}, "no attempts left"),
    ("attempts over max", "echo_one", '{"value": 1}', {"attempts": 1000}, "no attempts left"),
    ("errors not an array", "fails", "{}", {"errors": '{"x": 1}'}, "fails on purpose"),
]


def insert_raw(conn, task, args, **columns):
    """INSERT a row the way a careless script would: any column, any value."""
    columns = {"queue": "default", "task": task, "args": args, **columns}
    statement = sql.SQL("INSERT INTO pgqueue.jobs ({}) VALUES ({}) RETURNING id").format(
        sql.SQL(", ").join(map(sql.Identifier, columns)),
        sql.SQL(", ").join(sql.Placeholder() * len(columns)),
    )
    return conn.execute(statement, list(columns.values())).fetchone()[0]


def test_malformed_rows_are_dead_lettered_with_a_clear_error(app_dsn, conn):
    bad = {label: insert_raw(conn, task, args, **more) for label, task, args, more, _ in MALFORMED}
    # A token at the top of its range wraps around instead of failing the whole claim.
    wraps = insert_raw(conn, "echo_one", '{"value": "wraps"}', lease_token=2147483647)
    # Infinite timestamps are valid PostgreSQL but not valid Python datetimes.
    infinite = insert_raw(
        conn, "echo_one", '{"value": "inf"}', run_at="-infinity", created_at="infinity"
    )
    unknown = insert_raw(conn, "no.such.task", '{"value": 1}')
    good = [insert_raw(conn, "echo_one", f'{{"value": {i}}}') for i in range(20)]
    with thread_worker(hostile_app.pgq, app_dsn, concurrency=4, lease=5.0) as worker:
        wait_for(
            lambda: (
                scalar(app_dsn, "SELECT count(*) FROM pgqueue.jobs WHERE task <> 'no.such.task'")
                == 0
            ),
            timeout=60,
            message="every job with a known task finished",
        )
        assert worker.thread.is_alive()
    dead = {
        row[0]: row[1]
        for row in conn.execute("SELECT id, last_error FROM pgqueue.dead_letters").fetchall()
    }
    for label, _, _, _, words in MALFORMED:
        assert bad[label] in dead, f"{label}: not dead-lettered"
        assert words in dead[bad[label]], f"{label}: unclear error {dead[bad[label]]!r}"
    assert set(dead) == set(bad.values())
    done = {row[0]: row[5] for row in ledger(app_dsn, "end")}
    assert set(done) == {*good, wraps, infinite}
    assert done[wraps] == '"wraps"' and done[infinite] == '"inf"'
    # Nobody runs, fails or discards a job whose task no worker knows.
    row = conn.execute(
        "SELECT state, attempts, errors FROM pgqueue.jobs WHERE id = %s", (unknown,)
    ).fetchone()
    assert row == ("ready", 0, [])
    # The worker never held a claim it could not decode: no lease ever expired.
    assert scalar(app_dsn, "SELECT count(*) FROM pgqueue.dead_letters WHERE reason ~ 'lease'") == 0


def test_a_running_row_without_a_lease_cannot_be_written(conn):
    # It would never be reaped and never run: the schema refuses it.
    with pytest.raises(psycopg.errors.CheckViolation):
        insert_raw(conn, "echo_one", "{}", state="running")
