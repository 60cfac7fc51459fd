"""The maintenance service after a held snapshot (pgqueue/worker/maintainer.py): once the
snapshot has ended, one pass brings ``pgqueue.jobs``'s indexes back near their size before the
hold, where VACUUM alone leaves them bloated; while a snapshot is still held it does nothing;
a lock it would have to wait for makes it give up (claims go on meanwhile) and leave no
half-built index; a role that does not own the tables is told, not failed.

Jobs go through as a worker takes them (the worker's own statements: enqueue, claim_jobs,
ack_jobs), a few hundred at a time."""

from __future__ import annotations

import asyncio
import itertools
import json
import threading
import time
import uuid
from collections.abc import Iterator
from contextlib import contextmanager
from datetime import timedelta
from typing import Any

import psycopg
import pytest
from psycopg import sql
from psycopg.conninfo import make_conninfo
from typer.testing import CliRunner

from pgqueue.cli import app
from pgqueue.db import roles
from pgqueue.db.queries import query
from pgqueue.db.roles import RoleNames
from pgqueue.handler.job_context import CLAIMED_COLUMNS
from pgqueue.worker.claim_cursor import ClaimCursor
from pgqueue.worker.maintainer import Maintainer, Report
from pgqueue.worker.metrics import HorizonCollector, WorkerMetrics
from pgqueue.worker.observer import WorkerObserver
from tests.helpers import wait_for

BATCH = 500
_ID, _TOKEN = CLAIMED_COLUMNS.index("id"), CLAIMED_COLUMNS.index("lease_token")
_roles = itertools.count()


def churn(conn: psycopg.Connection[Any], jobs: int) -> None:
    """``jobs`` jobs enqueued, claimed and acked, ``BATCH`` at a time."""
    worker_id = str(uuid.uuid4())
    for _ in range(0, jobs, BATCH):
        conn.execute(
            "SELECT pgqueue.enqueue('work', '{}', 'q') FROM generate_series(1, %s)", (BATCH,)
        )
        params = {
            "queues": ["q"],
            "tasks": ["work"],
            "limit": BATCH,
            "lease": timedelta(seconds=60),
            "worker_id": worker_id,
            **ClaimCursor(["q"]).params(),
        }
        rows = conn.execute(query("claim_jobs"), params).fetchall()
        assert len(rows) == BATCH
        conn.execute(
            query("ack_jobs"),
            {
                "ids": [r[_ID] for r in rows],
                "tokens": [r[_TOKEN] for r in rows],
                "results": [None] * len(rows),
            },
        )


def sizes(conn: psycopg.Connection[Any]) -> tuple[int, int]:
    """``pgqueue.jobs``'s table and indexes, in bytes."""
    row = conn.execute(
        "SELECT pg_relation_size('pgqueue.jobs'), pg_indexes_size('pgqueue.jobs')"
    ).fetchone()
    assert row is not None
    return int(row[0]), int(row[1])


@contextmanager
def held_snapshot(dsn: str) -> Iterator[None]:
    with psycopg.connect(dsn, application_name="nightly report") as holder:
        holder.execute("BEGIN ISOLATION LEVEL REPEATABLE READ")
        holder.execute("SELECT count(*) FROM pgqueue.jobs")
        try:
            yield
        finally:
            holder.rollback()


def bloat(dsn: str, conn: psycopg.Connection[Any], jobs: int = 15_000) -> tuple[int, int]:
    """A quiet queue's sizes, then ``jobs`` run through under a held snapshot, released: the
    sizes before the hold."""
    churn(conn, 2 * BATCH)
    conn.execute("VACUUM ANALYZE pgqueue.jobs")
    before = sizes(conn)
    with held_snapshot(dsn):
        churn(conn, jobs)
    return before


def maintain(maintainer: Maintainer) -> Report:
    return asyncio.run(maintainer.maintain())


class Seen(WorkerObserver):
    def __init__(self) -> None:
        self.steps: list[tuple[str, str, int]] = []

    def maintained(self, action: str, relation: str, reclaimed: int) -> None:
        self.steps.append((action, relation, reclaimed))


def invalid_indexes(conn: psycopg.Connection[Any]) -> list[str]:
    return [
        r[0]
        for r in conn.execute(
            "SELECT indexrelid::regclass::text FROM pg_index WHERE NOT indisvalid"
        ).fetchall()
    ]


def test_the_indexes_come_back_to_size_once_the_snapshot_has_ended(dsn, conn):
    before_table, before_indexes = bloat(dsn, conn)
    # What autovacuum does once the snapshot has ended: the dead entries go, the pages stay.
    conn.execute("VACUUM pgqueue.jobs")
    _, vacuumed = sizes(conn)
    assert vacuumed > 2 * before_indexes, (before_indexes, vacuumed)

    seen = Seen()
    maintainer = Maintainer(dsn)
    maintainer.observer = seen
    report = maintain(maintainer)

    table, indexes = sizes(conn)
    assert indexes <= 2 * before_indexes, (before_indexes, vacuumed, indexes, report)
    assert table <= 2 * before_table, (before_table, table, report)
    assert report.waiting is None and not report.gave_up
    assert "jobs" in report.vacuumed
    assert "jobs_pkey" in report.rebuilt
    assert all(after < before for before, after in report.rebuilt.values())
    assert ("reindex", "jobs_pkey") in {(a, r) for a, r, _ in seen.steps}
    assert sum(n for a, _, n in seen.steps if a == "reindex") > 0
    assert invalid_indexes(conn) == []
    assert conn.execute("SELECT count(*) FROM pgqueue.jobs").fetchone() == (0,)
    print(report.lines(), (before_table, before_indexes), (table, indexes))

    # Nothing more to do: the next pass leaves them be.
    again = maintain(maintainer)
    assert again.vacuumed == {} and again.rebuilt == {}, again


def test_nothing_is_done_while_the_snapshot_is_held(dsn, conn):
    churn(conn, 2 * BATCH)
    conn.execute("VACUUM ANALYZE pgqueue.jobs")
    with held_snapshot(dsn):
        churn(conn, 10_000)
        time.sleep(0.6)
        maintainer = Maintainer(dsn, held_after=0.5)
        vacuums = conn.execute(
            "SELECT vacuum_count FROM pg_stat_user_tables WHERE relid = 'pgqueue.jobs'::regclass"
        ).fetchone()
        bloated = sizes(conn)
        report = maintain(maintainer)
        assert report.waiting is not None and "nightly report" in report.waiting
        assert report.vacuumed == {} and report.rebuilt == {}
        assert sizes(conn) == bloated
        time.sleep(0.7)  # the statistics reach the view
        assert (
            conn.execute(
                "SELECT vacuum_count FROM pg_stat_user_tables"
                " WHERE relid = 'pgqueue.jobs'::regclass"
            ).fetchone()
            == vacuums
        )
    # Released: the next pass does the work.
    report = maintain(maintainer)
    assert report.waiting is None and report.rebuilt, report


def test_a_lock_it_would_wait_for_makes_it_give_up_and_claims_go_on(dsn, conn):
    bloat(dsn, conn)
    with psycopg.connect(dsn) as locker:
        # Conflicts with VACUUM and REINDEX CONCURRENTLY, not with claims (as autovacuum or a
        # CREATE INDEX CONCURRENTLY would).
        locker.execute("LOCK TABLE pgqueue.jobs IN SHARE UPDATE EXCLUSIVE MODE")
        maintainer = Maintainer(dsn, lock_timeout=3.0)
        result: list[Report] = []
        thread = threading.Thread(target=lambda: result.append(maintain(maintainer)))
        thread.start()
        wait_for(
            lambda: conn.execute(
                "SELECT count(*) FROM pg_locks l JOIN pg_stat_activity a USING (pid)"
                " WHERE NOT l.granted AND a.query LIKE 'VACUUM%%'"
            ).fetchone()[0],
            message="the maintenance VACUUM waiting for the lock",
        )
        # Meanwhile jobs go through (each statement bounded: none may queue behind it).
        conn.execute("SET statement_timeout = '2s'")
        churn(conn, BATCH)
        conn.execute("RESET statement_timeout")
        thread.join(30)
        [report] = result
        assert "jobs" in report.gave_up and "lock timeout" in report.gave_up["jobs"]
        locker.rollback()
    assert invalid_indexes(conn) == []
    # The lock gone, the next pass does it.
    report = maintain(maintainer)
    assert report.rebuilt and not report.gave_up, report


def test_a_reindex_that_failed_leaves_nothing_behind(dsn, conn):
    """An invalid index such as a REINDEX CONCURRENTLY that was cancelled leaves (its
    ``_ccnew`` copy, still written by every update) is dropped by the next pass."""
    conn.execute("SELECT pgqueue.enqueue('work', '{}', 'q') FROM generate_series(1, 2)")
    with pytest.raises(psycopg.errors.UniqueViolation):
        conn.execute(
            "CREATE UNIQUE INDEX CONCURRENTLY jobs_ready_idx_ccnew ON pgqueue.jobs (queue)"
        )
    assert invalid_indexes(conn) == ["pgqueue.jobs_ready_idx_ccnew"]
    report = maintain(Maintainer(dsn))
    assert report.dropped == ["jobs_ready_idx_ccnew"]
    assert invalid_indexes(conn) == []


def test_a_role_that_does_not_own_the_tables_is_told(dsn, conn, caplog):
    bloat(dsn, conn, jobs=10_000)
    names = RoleNames(*(f"maint_{kind}_{next(_roles)}" for kind in ("p", "w", "a")))
    roles.apply(dsn, names)
    conn.execute(sql.SQL("ALTER ROLE {} PASSWORD 'pw'").format(sql.Identifier(names.worker)))
    worker_dsn = make_conninfo(dsn, user=names.worker, password="pw")
    report = maintain(Maintainer(worker_dsn))
    assert "jobs_pkey" in report.not_ours
    assert report.vacuumed == {} and report.rebuilt == {} and not report.gave_up
    assert "run pgq maintain as the owner" in caplog.text
    if conn.info.server_version >= 170000:
        # From PostgreSQL 17 the owner may lend it the MAINTAIN privilege instead.
        conn.execute(
            sql.SQL("GRANT MAINTAIN ON ALL TABLES IN SCHEMA pgqueue TO {}").format(
                sql.Identifier(names.worker)
            )
        )
        report = maintain(Maintainer(worker_dsn))
        assert "jobs_pkey" in report.rebuilt and not report.not_ours, report


def test_pgq_maintain_once_says_what_it_did(dsn, conn):
    bloat(dsn, conn, jobs=10_000)
    result = CliRunner().invoke(app, ["maintain", "--dsn", dsn, "--once"], catch_exceptions=False)
    assert result.exit_code == 0, result.output
    assert "rebuilt jobs_pkey: " in result.output
    again = CliRunner().invoke(app, ["maintain", "--dsn", dsn, "--once"])
    assert again.output.strip() == "nothing to reclaim"


@pytest.mark.parametrize(
    ("args", "named"),
    [
        (["--bloat-factor", "0.5"], "--bloat-factor"),
        (["--interval", "0s"], "--interval"),
        (["--lock-timeout", "soon"], "--lock-timeout"),
    ],
)
def test_pgq_maintain_refuses_bad_settings_in_one_line(args, named):
    result = CliRunner().invoke(app, ["maintain", "--once", *args])
    assert result.exit_code == 2
    assert named in result.output and "Traceback" not in result.output


def test_each_step_is_a_metric():
    metrics = WorkerMetrics()
    metrics.maintained("reindex", "jobs_pkey", 7_000_000)
    metrics.maintained("gave_up", "jobs", 0)
    sample = metrics.registry.get_sample_value
    assert sample("pgqueue_maintenance_total", {"action": "reindex", "relation": "jobs_pkey"}) == 1
    assert sample("pgqueue_maintenance_total", {"action": "gave_up", "relation": "jobs"}) == 1
    assert sample("pgqueue_maintenance_reclaimed_bytes_total", {"relation": "jobs_pkey"}) == 7e6
    assert sample("pgqueue_maintenance_reclaimed_bytes_total", {"relation": "jobs"}) is None


def test_pgq_status_shows_the_bloat_and_says_what_reclaims_it(dsn, conn):
    # What pgqueue.bloat estimates reaches the operator's surfaces: pgq status's jobs line and
    # a warning while the tables take far more than their rebuilt size, the JSON (the
    # dashboard's API reads the same report) and the metrics.
    bloat(dsn, conn, jobs=10_000)
    conn.execute("VACUUM pgqueue.jobs")  # a plain VACUUM leaves the indexes bloated
    output = " ".join(
        CliRunner().invoke(app, ["status", "--dsn", dsn], catch_exceptions=False).output.split()
    )
    assert "MB indexes (rebuilt about" in output, output
    assert "warning: pgqueue's tables take" in output and "pgq maintain" in output, output
    report = CliRunner().invoke(app, ["status", "--dsn", dsn, "--json"], catch_exceptions=False)
    tables = json.loads(report.output)["horizon"]["tables"]
    jobs = next(t for t in tables if t["table_name"] == "jobs")
    assert 0 < jobs["estimated_index_bytes"] < jobs["index_bytes"] / 2, jobs
    assert jobs["estimated_table_bytes"] is not None
    collector = HorizonCollector(dsn, max_age=0.0)
    try:
        samples = {
            (sample.name, tuple(sample.labels.values())): sample.value
            for family in collector.collect()
            for sample in family.samples
        }
    finally:
        collector.close()
    assert 0 < samples["pgqueue_index_estimated_bytes", ("jobs",)] < jobs["index_bytes"] / 2
    assert ("pgqueue_table_estimated_bytes", ("jobs",)) in samples
    # Once maintained, the line stays and the warning goes.
    maintain(Maintainer(dsn))
    output = CliRunner().invoke(app, ["status", "--dsn", dsn], catch_exceptions=False).output
    assert "rebuilt about" in output and "warning: pgqueue's tables take" not in output, output


def test_a_vacuum_that_could_not_shrink_the_table_is_tried_again(dsn, conn):
    """A transaction with an id and no snapshot (idle in a READ COMMITTED transaction that
    wrote) keeps VACUUM from removing the rows deleted after it began, yet is no held
    snapshot, and REINDEX CONCURRENTLY does not wait for it: a pass then rebuilt the indexes
    but its VACUUM freed nothing at the table's end. That size became the table's floor for
    good (the live rows were ~0 then and after, so the floor never gave way) and the table
    stayed bloated, no later pass touching it: seen in the held-snapshot chaos scenario, whose
    draining workers' transactions did the same."""
    with psycopg.connect(dsn, application_name="a writer") as writer:
        writer.execute("SELECT txid_current()")  # an id, kept until it ends; no snapshot
        before_table, _ = bloat(dsn, conn)
        conn.execute("VACUUM pgqueue.jobs")  # as autovacuum would: the live rows are 0 now
        # Young, as the draining workers' transactions were: not yet a holder to wait for.
        maintainer = Maintainer(dsn, held_after=600)
        first = maintain(maintainer)
        assert first.waiting is None and "jobs" in first.vacuumed and first.rebuilt, first
        assert first.vacuumed["jobs"][1] > 2 * before_table, first  # nothing removable yet
    # The transaction has ended: the next pass vacuums again and the table comes back.
    again = maintain(maintainer)
    table, _ = sizes(conn)
    assert "jobs" in again.vacuumed and table <= 2 * before_table, (before_table, table, again)
