"""Least privilege: `pgq roles` creates producer, worker and admin roles; the producer and the
worker run under them, and each can do its part and nothing more."""

from __future__ import annotations

import itertools
import json
import os
from collections.abc import Iterator
from datetime import timedelta
from typing import Any

import psycopg
import pytest
from psycopg import errors, sql
from psycopg.conninfo import make_conninfo
from typer.testing import CliRunner

from pgqueue import PgQueue
from pgqueue.cli.app import app as cli
from pgqueue.db.roles import ROLE_SETTINGS, RoleNames, script
from pgqueue.errors import ConfigurationError
from tests.helpers import ledger, scalar, thread_worker, wait_for
from tests.integration import worker_app

pytestmark = pytest.mark.slow
_counter = itertools.count()
runner = CliRunner()


@pytest.fixture
def roles(app_dsn: str) -> Iterator[RoleNames]:
    # Roles are cluster-wide: unique names per test, one of them as hostile as a name can be.
    n = f"{os.getpid()}_{next(_counter)}"
    names = RoleNames(
        producer=f"pgq_producer_{n}",
        worker=f'pgq worker "{n}"; DROP TABLE pgqueue.jobs; --',
        admin=f"pgq_admin_{n}",
    )
    for _ in range(2):  # idempotent: a second run after an upgrade changes nothing
        result = runner.invoke(cli, ["roles", "--apply", "--dsn", app_dsn, *_options(names)])
        assert result.exit_code == 0, result.output
    yield names
    with psycopg.connect(app_dsn, autocommit=True) as conn:
        for _, name in names.items():
            conn.execute(sql.SQL("DROP OWNED BY {}").format(sql.Identifier(name)))
            conn.execute(sql.SQL("DROP ROLE {}").format(sql.Identifier(name)))


def _options(names: RoleNames) -> list[str]:
    return ["--producer", names.producer, "--worker", names.worker, "--admin", names.admin]


def as_role(dsn: str, role: str) -> str:
    return make_conninfo(dsn, user=role)


def denied(dsn: str, statement: str, params: Any = None) -> bool:
    with psycopg.connect(dsn, autocommit=True) as conn:
        try:
            conn.execute(statement, params)
        except errors.InsufficientPrivilege:
            return True
    return False


def test_producer_can_enqueue_but_not_read_or_change_jobs(app_dsn, roles):
    secret = PgQueue(app_dsn).enqueue("billing.charge", {"card": "4111 1111 1111 1111"})
    producer_dsn = as_role(app_dsn, roles.producer)
    producer = PgQueue(producer_dsn)
    try:
        first = producer.enqueue("noop", {"n": 1}, idempotency_key="k1")
        again = producer.enqueue("noop", {"n": 2}, idempotency_key="k1")
        assert first.created and not again.created and again == first
        delayed = producer.enqueue("noop", {"n": 3}, delay=timedelta(minutes=5))
        plain = producer.enqueue_many([producer.spec("noop", {"n": i}, {}) for i in range(100)])
        assert len(plain) == 100 and all(job.created for job in plain)
        keyed = producer.enqueue_many(
            [producer.spec("noop", {}, {"idempotency_key": k}) for k in ("k1", "k2", "k2")]
        )
        assert keyed[0] == first and not keyed[0].created
        assert keyed[1].created and keyed[2] == keyed[1] and not keyed[2].created
        # flow control and results through the same role
        kept = producer.enqueue("noop", {}, result_ttl=60, concurrency_key="customer-1")
        # A job that keeps its result is written whole: no UPDATE privilege needed.
        kept_plain = producer.enqueue("noop", {}, result_ttl=61)
        kept_many = producer.enqueue_many(
            [producer.spec("noop", {}, {"result_ttl": 62, "idempotency_key": "r"})]
            + [producer.spec("noop", {}, {"result_ttl": 63}) for _ in range(70)]
        )
        unique = producer.enqueue_many(
            [producer.spec("noop", {}, {"idempotency_key": "u1", "unique_for": 60})]
        )
        # A small batch without keys (a plain multi-row INSERT) and a large one of alike jobs
        # with options (one COPY) write the same columns.
        small = producer.enqueue_many(
            [producer.spec("noop", {}, {"result_ttl": 64, "tags": ["t"]}) for _ in range(3)]
        )
        alike = producer.enqueue_many(
            [producer.spec("noop", {}, {"meta": {"m": 1}, "caused_by": first}) for _ in range(70)]
        )
        assert all(job.created for job in [*small, *alike])
        assert kept.created and unique[0].created
        # deduplication modes: the replace is an UPDATE, run by enqueue_job as its owner
        debounce = {"idempotency_key": "d", "unique_among": "pending", "on_conflict": "replace"}
        debounced = producer.enqueue(
            "noop", {"n": 1}, idempotency_key="d", unique_among="pending", on_conflict="replace"
        )
        modes = producer.enqueue_many(
            [
                producer.spec("noop", {"n": 2}, debounce),
                producer.spec("noop", {"n": 3}, {"unique_by": True, "throttle": 60}),
            ]
        )
        assert modes[0] == debounced and modes[0].replaced and modes[1].created
    finally:
        producer.close()
    with psycopg.connect(producer_dsn) as conn:
        assert conn.execute("SELECT pgqueue.enqueue('noop')").fetchone()[0] > 0
        assert conn.execute("SHOW statement_timeout").fetchone()[0] == "5s"
        assert conn.execute("SHOW idle_in_transaction_session_timeout").fetchone()[0] == "30s"
    assert scalar(app_dsn, "SELECT count(*) FROM pgqueue.jobs") == (
        1 + 1 + 1 + 100 + 1 + 1 + 71 + 2 + 1 + 2 + 3 + 70
    )
    for job_id, seconds in ((kept, 60), (kept_plain, 61), (kept_many[0], 62), (kept_many[1], 63)):
        ttl = scalar(app_dsn, "SELECT result_ttl FROM pgqueue.jobs WHERE id = %s", (job_id,))
        assert ttl == timedelta(seconds=seconds)
    assert scalar(app_dsn, "SELECT args FROM pgqueue.jobs WHERE id = %s", (debounced,)) == {"n": 2}
    assert scalar(app_dsn, "SELECT state FROM pgqueue.jobs WHERE id = %s", (delayed,)) == (
        "scheduled"
    )

    # Reading other jobs' args (or anything but ids), directly or through a function.
    for statement in [
        "SELECT args FROM pgqueue.jobs",
        "SELECT * FROM pgqueue.jobs",
        "SELECT id FROM pgqueue.jobs WHERE args ? 'card'",
        "SELECT task, queue FROM pgqueue.jobs",
        "SELECT * FROM pgqueue.dead_letters",
        "SELECT * FROM pgqueue.job_history",
        "SELECT * FROM pgqueue.queue_stats",
        "SELECT * FROM pgqueue.workers",
    ]:
        assert denied(producer_dsn, statement), statement
    # Deleting, changing, claiming, cancelling, reaping or forging a running job.
    for statement, params in [
        ("DELETE FROM pgqueue.jobs WHERE id = %s", (secret,)),
        ("UPDATE pgqueue.jobs SET args = '{}' WHERE id = %s", (secret,)),
        ("UPDATE pgqueue.jobs SET result_ttl = '1 hour' WHERE id = %s", (secret,)),
        ("UPDATE pgqueue.jobs SET state = 'running' WHERE id = %s", (secret,)),
        ("TRUNCATE pgqueue.jobs", None),
        ("SELECT pgqueue.cancel(%s)", (secret,)),
        ("SELECT pgqueue.reap()", None),
        (
            "INSERT INTO pgqueue.jobs (queue, task, state, lease_expires_at, worker_id)"
            " VALUES ('default', 'noop', 'running', now() + interval '1 day', gen_random_uuid())",
            None,
        ),
        ("INSERT INTO pgqueue.jobs (queue, task, attempts) VALUES ('default', 'noop', 3)", None),
    ]:
        assert denied(producer_dsn, statement, params), statement
    assert scalar(
        app_dsn, "SELECT args->>'card' FROM pgqueue.jobs WHERE id = %s", (secret,)
    ).startswith("4111")


def test_worker_runs_jobs_under_its_role_without_ddl_or_settings(app_dsn, roles):
    owner = PgQueue(app_dsn)
    ok = owner.enqueue("noop", {"n": 1})
    flaky = owner.enqueue(worker_app.flaky, {"fail_times": 1})
    broken = owner.enqueue(worker_app.always_fails, {})
    # A job whose worker vanished: the reaper (running as the worker role) must recover it.
    orphan = owner.enqueue("noop", {"n": 2})
    with psycopg.connect(app_dsn, autocommit=True) as conn:
        conn.execute(
            "UPDATE pgqueue.jobs SET state = 'running', attempts = 1, lease_token = 1,"
            " lease_expires_at = now() - interval '1 minute', worker_id = gen_random_uuid()"
            " WHERE id = %s",
            (orphan,),
        )
    owner.close()
    worker_dsn = as_role(app_dsn, roles.worker)
    # (The tasks' effects ledger is written with the test's own connection, PGQUEUE_DSN.)
    with thread_worker(worker_app.pgq, worker_dsn, concurrency=4, lease=5.0) as worker:
        wait_for(
            lambda: scalar(app_dsn, "SELECT count(*) FROM pgqueue.jobs") == 0,
            timeout=60,
            message="all jobs finished under the worker role",
        )
    assert worker.worker.stats.succeeded == 3 and worker.worker.stats.dead == 1
    assert {row[0] for row in ledger(app_dsn, "end")} == {ok, flaky, orphan}
    assert scalar(app_dsn, "SELECT id FROM pgqueue.dead_letters") == broken
    # DML is the worker's job; the schema, the retention settings and roles are not.
    for statement in [
        "TRUNCATE pgqueue.jobs",
        "DROP TABLE pgqueue.dead_letters",
        "ALTER TABLE pgqueue.jobs ADD COLUMN x int",
        "UPDATE pgqueue.retention SET record_succeeded = true",
        "DELETE FROM pgqueue.pgqueue_alembic_version",
        "CREATE ROLE sneaky",
    ]:
        assert denied(worker_dsn, statement), statement
    with psycopg.connect(worker_dsn) as conn:
        settings = ROLE_SETTINGS["worker"]
        assert conn.execute("SHOW statement_timeout").fetchone()[0] == settings["statement_timeout"]


def test_admin_operates_with_the_cli(app_dsn, roles):
    owner = PgQueue(app_dsn)
    job = owner.enqueue("noop", {})
    owner.close()
    with psycopg.connect(app_dsn, autocommit=True) as conn:
        conn.execute(
            "WITH gone AS (DELETE FROM pgqueue.jobs WHERE id = %s RETURNING *)"
            " INSERT INTO pgqueue.dead_letters (id, queue, task, args, priority, attempts,"
            " max_attempts, lease_token, created_at, reason)"
            " SELECT id, queue, task, args, priority, 5, 5, 1, created_at, 'test' FROM gone",
            (job,),
        )
    admin_dsn = as_role(app_dsn, roles.admin)
    listed = runner.invoke(cli, ["dlq", "list", "--json", "--dsn", admin_dsn])
    assert listed.exit_code == 0, listed.output
    assert [row["id"] for row in json.loads(listed.output)] == [job]
    for command in (
        ["dlq", "replay", "--all"],
        ["pause", "default"],
        ["resume", "default"],
        ["cancel", str(job)],
        ["stats", "--json"],
    ):
        result = runner.invoke(cli, [*command, "--dsn", admin_dsn])
        assert result.exit_code == 0, (command, result.output)
    assert scalar(app_dsn, "SELECT state FROM pgqueue.job_history WHERE id = %s", (job,)) == (
        "cancelled"
    )


def test_roles_script_quotes_every_name_and_rejects_bad_ones():
    text = script(RoleNames(producer="p$pgqueue_roles$x", worker='w"; --', admin="a'b"))
    # The dollar-quote tag was changed so a name containing it cannot end the DO block early.
    assert "$pgqueue_roles1$" in text
    assert 'TO "w""; --"' in text and "'a''b'" in text
    result = runner.invoke(cli, ["roles", "--producer", "x" * 64])
    assert result.exit_code == 1 and "63 bytes" in result.output
    with pytest.raises(ConfigurationError):
        RoleNames(producer="same", worker="same").validate()


def test_a_producer_cannot_enqueue_an_id_that_is_taken_or_was_never_handed_out(app_dsn, roles):
    # Producers write ids (bulk enqueue reserves them with nextval, then COPYs them), so the
    # database checks the ids a producer inserts: one a dead letter or a history row already
    # holds would make the job's own outcome impossible to write later.
    owner = PgQueue(app_dsn)
    dead, done, replayed = (owner.enqueue("noop", {"n": n}) for n in range(3))
    owner.close()
    with psycopg.connect(app_dsn, autocommit=True) as conn:
        conn.execute(
            "WITH gone AS (DELETE FROM pgqueue.jobs WHERE id = ANY(%s) RETURNING *)"
            " INSERT INTO pgqueue.dead_letters (id, queue, task, args, priority, attempts,"
            " max_attempts, lease_token, created_at, reason)"
            " SELECT id, queue, task, args, priority, 5, 5, 1, created_at, 'test' FROM gone",
            ([dead, replayed],),
        )
        conn.execute(
            "WITH gone AS (DELETE FROM pgqueue.jobs WHERE id = %s RETURNING *)"
            " INSERT INTO pgqueue.job_history (id, queue, task, args, state, priority, attempts,"
            " max_attempts, created_at) SELECT id, queue, task, args, 'succeeded', priority, 1,"
            " 5, created_at FROM gone",
            (done,),
        )
        last = conn.execute("SELECT last_value FROM pgqueue.jobs_id_seq").fetchone()[0]

    def plain(conn: psycopg.Connection[Any], job_id: int) -> None:
        conn.execute(
            "INSERT INTO pgqueue.jobs (id, queue, task) VALUES (%s, 'default', 'noop')", (job_id,)
        )

    def copied(conn: psycopg.Connection[Any], job_id: int) -> None:
        # With a good id in the same COPY: one bad row refuses the whole statement.
        good = conn.execute("SELECT nextval('pgqueue.jobs_id_seq')").fetchone()[0]
        with conn.cursor().copy("COPY pgqueue.jobs (id, queue, task, args) FROM STDIN") as copy:
            copy.write_row((good, "default", "noop", "{}"))
            copy.write_row((job_id, "default", "noop", "{}"))

    def keyed(conn: psycopg.Connection[Any], job_id: int) -> None:
        conn.execute(
            "SELECT * FROM pgqueue.insert_jobs(ARRAY[jsonb_populate_record("
            "NULL::pgqueue.job_input, jsonb_build_object('id', %s::bigint, 'queue', 'default',"
            " 'task', 'noop', 'priority', 0, 'max_attempts', 5, 'idempotency_key', %s::text))])",
            (job_id, f"key-{job_id}"),
        )

    def as_producer(conn: psycopg.Connection[Any], job_id: int) -> None:
        # Logged in as another role, acting as the producer.
        conn.execute(sql.SQL("SET ROLE {}").format(sql.Identifier(roles.producer)))
        plain(conn, job_id)

    producer_dsn = as_role(app_dsn, roles.producer)
    for dsn, writes in ((producer_dsn, (plain, copied, keyed)), (app_dsn, (as_producer,))):
        for job_id, words in (
            (dead, "a dead letter"),
            (done, "job_history"),
            (last + 1000, "never handed out"),  # (the COPY case takes a few ids)
            (2**63 - 1, "never handed out"),
        ):
            for write in writes:
                with (
                    psycopg.connect(dsn, autocommit=True) as conn,
                    pytest.raises(errors.IntegrityError) as refused,
                ):
                    write(conn, job_id)
                assert f"job id {job_id}" in str(refused.value) and words in str(refused.value)
    assert scalar(app_dsn, "SELECT count(*) FROM pgqueue.jobs") == 0
    # Roles that may write dead letters themselves are not checked (it would cost every
    # enqueue): the worker survives what they write (tests/hostile/test_unwritable_outcomes.py).
    worker_dsn = as_role(app_dsn, roles.worker)
    with psycopg.connect(worker_dsn, autocommit=True) as conn:
        plain(conn, done)
        conn.execute("DELETE FROM pgqueue.jobs WHERE id = %s", (done,))
    # Ids the sequence handed out go in; a dead letter replayed with its own id is not a
    # collision (the same statement moved it).
    producer = PgQueue(producer_dsn)
    try:
        assert len(producer.enqueue_many([producer.spec("noop", {}, {}) for _ in range(70)])) == 70
    finally:
        producer.close()
    admin = runner.invoke(
        cli, ["dlq", "replay", "--id", str(replayed), "--dsn", as_role(app_dsn, roles.admin)]
    )
    assert admin.exit_code == 0 and "replayed 1" in admin.output, admin.output
    assert scalar(app_dsn, "SELECT count(*) FROM pgqueue.jobs") == 71


def test_a_producer_emits_events_but_reads_no_checkpoints(app_dsn, roles):
    producer_dsn = as_role(app_dsn, roles.producer)
    producer = PgQueue(producer_dsn)
    try:
        assert producer.emit_event("invoice-7-paid", {"amount": 12}) is True
    finally:
        producer.close()
    with psycopg.connect(producer_dsn) as conn:
        assert conn.execute("SELECT pgqueue.emit_event('invoice-7-paid', '1')").fetchone() == (
            False,
        )
    for statement in [
        "SELECT * FROM pgqueue.events",
        "SELECT * FROM pgqueue.job_steps",
        "SELECT * FROM pgqueue.job_step_status",
        "SELECT * FROM pgqueue.event_status",
        "DELETE FROM pgqueue.events",
        "SELECT * FROM pgqueue.park_for_event(1, 1, 1, 'w', 'e', NULL)",
    ]:
        assert denied(producer_dsn, statement), statement
    # The worker writes checkpoints and reads events; the admin reads both views.
    for role, statement in [
        (roles.worker, "SELECT count(*) FROM pgqueue.events"),
        (roles.worker, "DELETE FROM pgqueue.job_steps WHERE job_id = 0"),
        (roles.admin, "SELECT count(*) FROM pgqueue.job_step_status"),
        (roles.admin, "SELECT count(*) FROM pgqueue.event_status"),
    ]:
        assert not denied(as_role(app_dsn, role), statement), (role, statement)
