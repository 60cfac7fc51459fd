"""A snapshot held in another connection, as operators meet it (a REPEATABLE READ transaction
left idle): `pgq status` names the backend, the metrics show its age and the jobs table's dead
tuples, the dashboard's state has it, and the view `pgqueue.horizon` shows it to workers and
admins (other roles' backends included) but not to producers."""

from __future__ import annotations

import itertools
import json
import os
import time
import urllib.request
from collections.abc import Iterator
from contextlib import contextmanager

import psycopg
import pytest
from prometheus_client.parser import text_string_to_metric_families
from psycopg import errors, sql
from psycopg.conninfo import make_conninfo
from typer.testing import CliRunner

from pgqueue.cli import app
from pgqueue.db import roles
from pgqueue.db.roles import RoleNames
from pgqueue.worker.metrics import MetricsServer
from tests.dashboard_helpers import dashboard
from tests.helpers import wait_for

runner = CliRunner()
_counter = itertools.count()
HOLDER = "nightly report"


@contextmanager
def held_snapshot(dsn: str) -> Iterator[int]:
    """A REPEATABLE READ transaction that read the jobs table once and then sits idle in
    another connection (as another role would, for pg_stat_activity: a session of its own)."""
    with psycopg.connect(dsn, application_name=HOLDER) as holder:
        holder.execute("BEGIN ISOLATION LEVEL REPEATABLE READ")
        holder.execute("SELECT count(*) FROM pgqueue.jobs")
        try:
            yield holder.info.backend_pid
        finally:
            holder.rollback()


def dead_jobs(pgq, conn, n: int = 50) -> None:
    """Rows the held snapshot keeps: jobs enqueued and deleted after it began."""
    for i in range(n):
        pgq.enqueue("t", {"n": i})
    conn.execute("DELETE FROM pgqueue.jobs")


def status(*args: str):
    result = runner.invoke(app, ["status", *args], catch_exceptions=False)
    assert result.exit_code == 0, result.output
    return result.output


def test_status_names_the_backend_that_holds_the_horizon(dsn, pgq, conn):
    with held_snapshot(dsn) as pid:
        time.sleep(1.2)
        output = " ".join(status("--dsn", dsn, "--snapshot-warn", "1s").split())
        assert "warning: snapshot held for" in output
        assert f"by backend pid {pid} (application_name '{HOLDER}', state idle in transaction" in (
            output
        )
        assert "VACUUM cannot remove dead rows until it ends" in output
        assert "jobs table:" in output and "dead tuples" in output

        # Below the threshold: the table line, no warning.
        assert "warning" not in status("--dsn", dsn, "--snapshot-warn", "1h")

        report = json.loads(status("--dsn", dsn, "--json", "--snapshot-warn", "1s"))["horizon"]
        [mine] = [h for h in report["holders"] if h["pid"] == pid]
        assert (mine["holder"], mine["name"], mine["state"]) == (
            "backend",
            HOLDER,
            "idle in transaction",
        )
        assert mine["age_seconds"] > 1 and mine["xmin_age"] >= 0
        assert report["oldest_snapshot_age_seconds"] >= mine["age_seconds"]
        assert f"pid {pid}" in report["warning"]
        assert "jobs" in {t["table_name"] for t in report["tables"]}
    after = json.loads(status("--dsn", dsn, "--json"))["horizon"]
    assert pid not in {h["pid"] for h in after["holders"]}


def test_a_bad_threshold_is_one_line():
    result = runner.invoke(app, ["status", "--snapshot-warn", "soon"])
    assert result.exit_code == 2
    assert "--snapshot-warn" in result.output and "Traceback" not in result.output


Samples = dict[tuple[str, tuple[tuple[str, str], ...]], float]


def scrape(port: int) -> Samples:
    with urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=10) as response:
        text = response.read().decode()
    return {
        (sample.name, tuple(sorted(sample.labels.items()))): sample.value
        for family in text_string_to_metric_families(text)
        for sample in family.samples
    }


def test_metrics_show_the_snapshot_age_and_the_dead_tuples_it_keeps(dsn, pgq, conn):
    server = MetricsServer(dsn, 0, "127.0.0.1")
    server.horizon.reader.max_age = 0.0  # every scrape reads again
    try:
        with held_snapshot(dsn):
            time.sleep(1.1)
            dead_jobs(pgq, conn)

            def kept() -> Samples | None:  # the statistics reach the view within a second or so
                s = scrape(server.port)
                return s if s.get(("pgqueue_dead_tuples", (("table", "jobs"),)), 0) >= 50 else None

            samples = wait_for(kept, timeout=20, interval=0.3, message="dead tuples counted")
            assert samples[("pgqueue_horizon_up", ())] == 1
            assert samples[("pgqueue_oldest_snapshot_age_seconds", ())] > 1
            assert samples[("pgqueue_oldest_xmin_age_transactions", ())] > 0
            assert samples[("pgqueue_table_bytes", (("table", "jobs"),))] > 0
            assert samples[("pgqueue_index_bytes", (("table", "jobs"),))] > 0
            # VACUUM cannot remove them while the snapshot is held.
            conn.execute("VACUUM pgqueue.jobs")
            assert scrape(server.port)[("pgqueue_dead_tuples", (("table", "jobs"),))] >= 50
        conn.execute("VACUUM pgqueue.jobs")
        wait_for(
            lambda: scrape(server.port)[("pgqueue_dead_tuples", (("table", "jobs"),))] == 0,
            message="the dead tuples removed once the snapshot ended",
        )
    finally:
        server.close()


def test_dashboard_state_has_the_holder_and_the_tables(dsn, pgq, conn):
    with held_snapshot(dsn) as pid, dashboard(dsn) as board:
        time.sleep(1.1)
        status_code, _, body = board.request("/api/state")
        assert status_code == 200
        report = json.loads(body)["horizon"]
        [mine] = [h for h in report["holders"] if h["pid"] == pid]
        assert (mine["name"], mine["state"]) == (HOLDER, "idle in transaction")
        assert mine["age_seconds"] > 1
        assert report["oldest_snapshot_age_seconds"] > 1
        jobs = next(t for t in report["tables"] if t["table_name"] == "jobs")
        assert jobs["table_bytes"] >= 0 and jobs["index_bytes"] > 0
        assert jobs["estimated_index_bytes"] > 0 and report["bloat_warning"] is None


@pytest.fixture
def role_names(dsn: str) -> Iterator[RoleNames]:
    # Roles are cluster-wide: names of this process and test.
    n = f"{os.getpid()}_{next(_counter)}"
    names = RoleNames(producer=f"hz_producer_{n}", worker=f"hz_worker_{n}", admin=f"hz_admin_{n}")
    roles.apply(dsn, names)
    yield names
    with psycopg.connect(dsn, autocommit=True) as conn:
        for _, name in names.items():
            conn.execute(sql.SQL("DROP OWNED BY {}").format(sql.Identifier(name)))
            conn.execute(sql.SQL("DROP ROLE {}").format(sql.Identifier(name)))


def test_workers_and_admins_see_other_roles_snapshots_and_producers_do_not(dsn, role_names):
    # pg_stat_activity hides another role's state and transaction start from a plain role: the
    # view shows them all the same (its function runs as the schema's owner), without the
    # query text.
    with held_snapshot(dsn) as pid:
        for role in (role_names.worker, role_names.admin):
            with psycopg.connect(make_conninfo(dsn, user=role), autocommit=True) as reader:
                own = reader.execute(
                    "SELECT state, xact_start FROM pg_stat_activity WHERE pid = %s", (pid,)
                ).fetchone()
                assert own == (None, None)  # what the role itself may read: no age, no state
                row = reader.execute(
                    "SELECT name, state, age_seconds >= 0, xmin_age >= 0"
                    " FROM pgqueue.horizon WHERE pid = %s",
                    (pid,),
                ).fetchone()
                assert row == (HOLDER, "idle in transaction", True, True), role
                tables = reader.execute("SELECT table_name FROM pgqueue.table_health").fetchall()
                assert ("jobs",) in tables
        producer_dsn = make_conninfo(dsn, user=role_names.producer)
        with (
            psycopg.connect(producer_dsn) as producer,
            pytest.raises(errors.InsufficientPrivilege),
        ):
            producer.execute("SELECT * FROM pgqueue.horizon")
