"""Run the reaper from pg_cron, with no Python process at all: ``pgq cron install-reaper``.

pg_cron runs its jobs from one database per server (``cron.database_name``); the job it gets
here runs ``SELECT pgqueue.reap()`` in pgqueue's database (``cron.schedule_in_database``), so
pgqueue's database need not be pg_cron's. Schedules below a minute (``'5 seconds'``) need
pg_cron 1.5 or newer; older versions get a cron expression (every minute).
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Any, NamedTuple

import psycopg
from psycopg.conninfo import make_conninfo
from psycopg.rows import class_row

from pgqueue.db.queries import query
from pgqueue.errors import ConfigurationError

REAP_COMMAND = "SELECT pgqueue.reap()"


@dataclass(frozen=True, slots=True)
class CronJob:
    id: int
    name: str
    schedule: str
    command: str
    database: str
    active: bool


def _version(text: str) -> tuple[int, ...]:
    """'1.4-1' -> (1, 4)"""
    return tuple(int(part) for part in re.findall(r"\d+", text)[:2])


def default_schedule(version: str) -> str:
    return "5 seconds" if _version(version) >= (1, 5) else "* * * * *"


def _cron_dsn(dsn: str) -> tuple[str, str, str]:
    """(DSN of pg_cron's database, pgqueue's database name, pg_cron version)."""
    setup = _setup(dsn)
    database, cron_database, version = setup.database, setup.cron_database, setup.version
    if not cron_database:
        raise ConfigurationError(
            "pg_cron is not loaded on this server: add it to shared_preload_libraries "
            "(and set cron.database_name), restart PostgreSQL, then CREATE EXTENSION pg_cron"
        )
    if cron_database != database:
        dsn = make_conninfo(dsn, dbname=cron_database)
        version = _setup(dsn).version
    if version is None:
        raise ConfigurationError(
            f"the pg_cron extension is not created in database {cron_database!r}: "
            "run CREATE EXTENSION pg_cron there"
        )
    return dsn, str(database), str(version)


class _Setup(NamedTuple):
    database: str
    cron_database: str | None  # NULL: pg_cron is not preloaded
    version: str | None  # NULL: the extension is not created in this database


def _setup(dsn: str) -> _Setup:
    with (
        psycopg.connect(dsn, autocommit=True) as conn,
        conn.cursor(row_factory=class_row(_Setup)) as cur,
    ):
        row = cur.execute(query("pg_cron_setup")).fetchone()
    assert row is not None  # a SELECT without FROM returns one row
    return row


def reaper_job_name(database: str) -> str:
    return f"pgqueue-reaper-{database}"


def install_reaper(dsn: str, schedule: str | None = None, name: str | None = None) -> CronJob:
    """Schedule ``pgqueue.reap()`` for pgqueue's database in pg_cron (idempotent: running it
    again updates the job)."""
    cron_dsn, database, version = _cron_dsn(dsn)
    name = name or reaper_job_name(database)
    params: dict[str, Any] = {
        "name": name,
        "schedule": schedule or default_schedule(version),
        "command": REAP_COMMAND,
        "database": database,
    }
    with psycopg.connect(cron_dsn, autocommit=True) as conn:
        try:
            conn.execute(query("pg_cron_schedule"), params)
        except psycopg.errors.InvalidParameterValue as exc:
            raise ConfigurationError(
                f"pg_cron {version} rejected the schedule {params['schedule']!r}: "
                f"{exc.diag.message_primary}"
            ) from None
        with conn.cursor(row_factory=class_row(CronJob)) as cur:
            job = cur.execute(query("pg_cron_jobs"), {"name": name}).fetchone()
    assert job is not None  # scheduled just above
    return job


def uninstall_reaper(dsn: str, name: str | None = None) -> bool:
    """Remove the job; False if there was none."""
    cron_dsn, database, _ = _cron_dsn(dsn)
    with psycopg.connect(cron_dsn, autocommit=True) as conn:
        rows = conn.execute(
            query("pg_cron_unschedule"), {"name": name or reaper_job_name(database)}
        ).fetchall()
    return bool(rows)
