"""Least-privilege roles: the SQL behind ``pgq roles``.

Three roles, each with only what its part of pgqueue needs:

* **producer**: enqueue only. ``EXECUTE`` on ``pgqueue.enqueue_input``/``enqueue_job``/
  ``enqueue``/``insert_jobs``/``job_ids_by_key`` (``SECURITY DEFINER``, so it needs no
  ``SELECT`` on jobs), ``INSERT`` on the columns a job is written with (one statement per
  job, its ``result_ttl`` included: no ``UPDATE``), ``SELECT`` on ``id`` only (``RETURNING
  id``), the id sequence,
  ``SELECT`` on ``idle_workers`` (the wake-up trigger reads it), on ``pgqueue_alembic_version``
  (the client's start-up check of the schema's revision) and on ``declared_tasks`` (the task
  names enqueue accepts).
  It cannot read other jobs' args, update or delete jobs, or write lease columns. It writes
  ids (bulk enqueue reserves them with ``nextval`` and COPYs them), but the database refuses
  an id the sequence never handed out or one a dead letter or history row holds (trigger
  ``jobs_after_insert``, migrations 0009 and 0026): a job with such an id could never be
  recorded.
* **worker**: everything a worker process does (claim, heartbeat, complete, retry, dead-letter,
  reap, prune, cron ticks, breaker and rate-limit state): ``SELECT``/``INSERT``/``UPDATE``/
  ``DELETE`` on pgqueue's tables (read-only: the retention settings and the version table),
  its sequences and functions. No DDL, no ``TRUNCATE``, no roles. Workflow enqueue
  (``chain``/``group``/``DAG``/``depends_on``) needs this role or admin: linking to existing
  jobs reads their state and results, which a producer may not.
* **admin**: operate everything (cancel, replay, pause, prune): all privileges on pgqueue's
  tables, sequences and functions. Not DDL: migrations run as the schema's owner.

Roles are cluster-wide objects named by the operator, so they are not created by a migration.
The script is idempotent (roles are created only when missing) and grants on every table in
the schema, so rerun it after each ``pgq migrate``. Names are always quoted as identifiers
(``psycopg.sql.Identifier``), never formatted into SQL.
"""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass

import psycopg
from psycopg import sql

from pgqueue.db.job_rows import JOB_INPUT
from pgqueue.errors import ConfigurationError

SCHEMA = "pgqueue"

#: Per-role session settings (``ALTER ROLE ... SET``), applied to sessions that log in as the
#: role. Why: a session left idle inside a transaction holds back the xmin horizon, so vacuum
#: cannot remove the dead rows every finished job leaves in the hot table and claims slow down
#: for everyone; a runaway statement holds row locks that stall claims and acks. pgqueue's own
#: statements are short (batched, one round trip each), so tight limits cost nothing, and a
#: worker treats a cancelled statement as transient and retries it.
ROLE_SETTINGS: dict[str, dict[str, str]] = {
    "producer": {"statement_timeout": "5s", "idle_in_transaction_session_timeout": "30s"},
    "worker": {"statement_timeout": "30s", "idle_in_transaction_session_timeout": "10s"},
    "admin": {"statement_timeout": "5min", "idle_in_transaction_session_timeout": "10min"},
}

# Columns bulk enqueue writes (COPY or multi-row INSERT). Lease and attempt columns are not
# among them, so a producer cannot forge a running or half-used job. ``id`` is: COPY needs the
# ids bulk enqueue reserved (no RETURNING), so instead of revoking it the database checks every
# id a producer inserts (pgqueue.check_job_ids, run by the trigger jobs_after_insert).
# They are the job input's stored attributes (pgqueue.db.job_rows), fair_rank included (a job's
# place in a fair queue: bulk enqueue COPYs it), so a new stored option needs no edit here.
_ENQUEUE_COLUMNS = tuple(column.name for column in JOB_INPUT if column.stored)
_PRODUCER_FUNCTIONS = (
    "enqueue_input",
    "enqueue_job",
    "enqueue",
    "job_ids_by_key",
    "insert_jobs",
    "kept_keys",
    "drop_raced_keyed_jobs",
    "queue_depth_up_to",
    "mark_keyed",
    "fair_rank",
    # Run by the id check on the producer's inserts (also executable by PUBLIC, so an upgrade
    # does not break enqueue before this script is rerun).
    "check_job_ids",
)
# The worker process does much more than claim and ack: it writes retries and dead letters,
# prunes history and dead letters (retention), advances cron schedules, records circuit-breaker
# outcomes and rate-limit tokens, and registers itself. So it gets DML on pgqueue's tables, but
# not on these (read-only for it), and never DDL, TRUNCATE or role management.
_WORKER_READ_ONLY = ("retention", "pgqueue_alembic_version")

_MAX_ROLE_NAME = 63  # NAMEDATALEN - 1: longer names would be truncated silently


@dataclass(frozen=True)
class RoleNames:
    producer: str = "pgqueue_producer"
    worker: str = "pgqueue_worker"
    admin: str = "pgqueue_admin"

    def items(self) -> list[tuple[str, str]]:
        return [("producer", self.producer), ("worker", self.worker), ("admin", self.admin)]

    def validate(self) -> None:
        names = [name for _, name in self.items()]
        for kind, name in self.items():
            if not name or len(name.encode("utf-8")) > _MAX_ROLE_NAME or "\x00" in name:
                raise ConfigurationError(
                    f"{kind} role name must be 1 to {_MAX_ROLE_NAME} bytes without NUL, "
                    f"got {name!r:.80}"
                )
        if len(set(names)) != len(names):
            raise ConfigurationError("the producer, worker and admin roles need distinct names")


def statements(names: RoleNames, *, login: bool = True) -> list[sql.Composed]:
    """Every statement of the script, in order."""
    names.validate()
    return [
        *_create_roles(names, login),
        *_settings(names),
        *_grants(names),
        *_durable_grants(names),
    ]


def script(names: RoleNames, *, login: bool = True) -> str:
    """The script as text, for ``pgq roles`` to print (and psql to run)."""
    return "".join(f"{stmt.as_string(None)};\n" for stmt in statements(names, login=login))


def apply(dsn: str, names: RoleNames, *, login: bool = True) -> None:
    """Run the script in one transaction (needs CREATEROLE and the schema's owner)."""
    with psycopg.connect(dsn) as conn:
        for stmt in statements(names, login=login):
            conn.execute(stmt)


def _create_roles(names: RoleNames, login: bool) -> Iterator[sql.Composed]:
    # A DO block makes the script idempotent (CREATE ROLE has no IF NOT EXISTS). The name is a
    # literal inside the block and format('%I') quotes it; the dollar-quote tag is chosen so it
    # cannot occur in the body, whatever the name.
    option = "LOGIN" if login else "NOLOGIN"
    for _, name in names.items():
        body = sql.SQL(
            "BEGIN IF NOT EXISTS (SELECT FROM pg_catalog.pg_roles WHERE rolname = {name}) THEN "
            "EXECUTE pg_catalog.format('CREATE ROLE %I " + option + "', {name}); END IF; "
            "EXECUTE pg_catalog.format('GRANT CONNECT ON DATABASE %I TO %I', "
            "pg_catalog.current_database(), {name}); END"
        ).format(name=sql.Literal(name))
        text = body.as_string(None)
        tag = "$pgqueue_roles$"
        counter = 0
        while tag in text:
            counter += 1
            tag = f"$pgqueue_roles{counter}$"
        yield sql.SQL("DO {tag} {body} {tag}").format(tag=sql.SQL(tag), body=sql.SQL(text))


def _settings(names: RoleNames) -> Iterator[sql.Composed]:
    for kind, name in names.items():
        for setting, value in ROLE_SETTINGS[kind].items():
            yield sql.SQL("ALTER ROLE {} SET {} = {}").format(
                sql.Identifier(name), sql.Identifier(setting), sql.Literal(value)
            )


def _grants(names: RoleNames) -> Iterator[sql.Composed]:
    schema = sql.Identifier(SCHEMA)
    everyone = sql.SQL(", ").join(sql.Identifier(name) for _, name in names.items())
    producer, worker, admin = (sql.Identifier(n) for _, n in names.items())

    def table(name: str) -> sql.Composable:
        return sql.Identifier(SCHEMA, name)

    yield sql.SQL("GRANT USAGE ON SCHEMA {} TO {}").format(schema, everyone)

    # producer
    columns = sql.SQL(", ").join(map(sql.Identifier, _ENQUEUE_COLUMNS))
    yield sql.SQL("GRANT INSERT ({}) ON {} TO {}").format(columns, table("jobs"), producer)
    yield sql.SQL("GRANT SELECT (id) ON {} TO {}").format(table("jobs"), producer)
    yield sql.SQL("GRANT USAGE ON SEQUENCE {} TO {}").format(table("jobs_id_seq"), producer)
    # Bounded queues are checked against their max_depth before a bulk enqueue, and fair
    # queues' jobs are ranked. (No UPDATE: a job is written whole, its result_ttl included.)
    yield sql.SQL("GRANT SELECT (name, max_depth, fair) ON {} TO {}").format(
        table("queues"), producer
    )
    # The wake-up trigger runs as the inserting role: it notifies only while a worker is idle.
    yield sql.SQL("GRANT SELECT ON {} TO {}").format(table("idle_workers"), producer)
    # A client checks the schema's revision once, and the task names it enqueues.
    for name in ("pgqueue_alembic_version", "declared_tasks"):
        yield sql.SQL("GRANT SELECT ON {} TO {}").format(table(name), producer)
    for function in _PRODUCER_FUNCTIONS:
        yield sql.SQL("GRANT EXECUTE ON FUNCTION {} TO {}").format(table(function), producer)

    # worker
    yield sql.SQL("GRANT SELECT, INSERT, UPDATE, DELETE ON ALL TABLES IN SCHEMA {} TO {}").format(
        schema, worker
    )
    for name in _WORKER_READ_ONLY:
        yield sql.SQL("REVOKE INSERT, UPDATE, DELETE ON {} FROM {}").format(table(name), worker)
    yield sql.SQL("GRANT USAGE ON ALL SEQUENCES IN SCHEMA {} TO {}").format(schema, worker)
    yield sql.SQL("GRANT EXECUTE ON ALL FUNCTIONS IN SCHEMA {} TO {}").format(schema, worker)

    # admin
    for kind in ("TABLES", "SEQUENCES", "FUNCTIONS"):
        privilege = "EXECUTE" if kind == "FUNCTIONS" else "ALL PRIVILEGES"
        yield sql.SQL("GRANT {} ON ALL {} IN SCHEMA {} TO {}").format(
            sql.SQL(privilege), sql.SQL(kind), schema, admin
        )


# -- durable jobs (migration 0020) ----------------------------------------------------------
# Who may emit and who may read events and checkpoints. The producer may emit
# (pgqueue.emit_event is SECURITY DEFINER: it completes waiting steps and wakes their jobs
# without the producer holding any right on jobs or job_steps) and reads nothing of them. The
# worker's and the admin's grants above already cover job_steps, events and both functions
# (every table and function in the schema): the worker writes checkpoints, parks jobs, emits
# from handlers and prunes; the admin reads the views. EXECUTE on park_for_event is never the
# producer's (it parks running jobs).
_PRODUCER_DURABLE_FUNCTIONS = ("emit_event",)


def _durable_grants(names: RoleNames) -> Iterator[sql.Composed]:
    producer = sql.Identifier(names.producer)
    for function in _PRODUCER_DURABLE_FUNCTIONS:
        yield sql.SQL("GRANT EXECUTE ON FUNCTION {} TO {}").format(
            sql.Identifier(SCHEMA, function), producer
        )
