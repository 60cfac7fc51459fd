"""Retention: settings shared through the database, pruning in small batches by the workers."""

from __future__ import annotations

import json
from datetime import timedelta
from typing import Any

import psycopg
import pytest
from psycopg import sql
from typer.testing import CliRunner

from pgqueue import InvalidJobError, chain
from pgqueue.cli import app as cli_app
from tests.helpers import scalar, thread_worker, wait_for
from tests.integration import workflow_app
from tests.integration.workflow_app import add, fail, plain, step

APP = workflow_app.pgq


def count(dsn: str, table: str) -> int:
    query = sql.SQL("SELECT count(*) FROM pgqueue.{}").format(sql.Identifier(table))
    with psycopg.connect(dsn) as conn:
        row = conn.execute(query).fetchone()
    return int(row[0]) if row else 0


def execute(dsn: str, statement: str, params: Any = None) -> None:
    with psycopg.connect(dsn, autocommit=True) as conn:
        conn.execute(statement, params)


def test_settings_defaults_changes_and_validation(pgq):
    settings = pgq.retention.settings()
    assert settings.history_retention == timedelta(days=7)
    assert settings.record_succeeded is False and settings.dead_letter_retention is None
    changed = pgq.retention.set(history=3600, dead_letters=timedelta(days=30))
    assert changed.history_retention == timedelta(hours=1)
    assert changed.dead_letter_retention == timedelta(days=30)
    assert changed.record_succeeded is False  # untouched
    assert pgq.retention.set(dead_letters="never").dead_letter_retention is None
    with pytest.raises(InvalidJobError, match="must be a duration or 'never'"):
        pgq.retention.set(dead_letters="sometimes")
    with pytest.raises(InvalidJobError, match="must not be negative"):
        pgq.retention.set(history=-1)
    # an operator who deleted the row gets the defaults back
    execute(pgq.dsn, "DELETE FROM pgqueue.retention")
    assert pgq.retention.settings().history_retention == timedelta(days=7)


def test_history_is_pruned_in_batches_and_kept_results_stay_until_they_expire(app_dsn, pgq):
    pgq.retention.set(record_succeeded=True, history=0)
    kept = pgq.enqueue(add, {"x": 1})  # result_ttl 1 h on the task
    pgq.enqueue_many([plain.s(i) for i in range(95)])
    # No pruner in the worker: with history=0 its first pass (once the first claim is done)
    # would take what this test prunes in batches below.
    with thread_worker(APP, app_dsn, burst=True, prune_interval=None) as w:
        w.join()
    assert count(app_dsn, "job_history") == 96
    report = pgq.retention.prune(batch_size=10)  # ten statements or so, each its own transaction
    assert report.history == 95
    assert pgq.result(kept, timeout=1) == 1  # still within its result_ttl
    execute(app_dsn, "UPDATE pgqueue.job_history SET keep_until = now() - interval '1 s'")
    assert pgq.retention.prune().history == 1
    assert count(app_dsn, "job_history") == 0


def test_pruning_a_workflow_removes_its_nodes_and_the_workflow(app_dsn, pgq):
    run = pgq.enqueue_workflow(chain(add.s(1), add.s()))
    with thread_worker(APP, app_dsn):
        assert run.result(timeout=60) == 1
    assert pgq.retention.prune().history == 0  # results kept for the workflow's result_ttl (1 day)
    execute(app_dsn, "UPDATE pgqueue.job_history SET keep_until = now() - interval '1 s'")
    report = pgq.retention.prune()
    assert (report.history, report.workflows) == (2, 1)
    assert count(app_dsn, "workflow_nodes") == 0 and count(app_dsn, "workflows") == 0


def test_dead_letters_are_kept_until_replayed_or_purged_by_age(app_dsn, pgq):
    ids = [pgq.enqueue(fail, {"label": str(i)}) for i in range(4)]
    with thread_worker(APP, app_dsn, burst=True) as w:
        w.join()
    execute(
        app_dsn,
        "UPDATE pgqueue.dead_letters SET dead_at = now() - interval '40 days' WHERE id = ANY(%s)",
        (ids[:3],),
    )
    assert pgq.retention.prune().dead_letters == 0  # default: kept until replayed
    pgq.retention.set(dead_letters=timedelta(days=30))
    assert pgq.retention.prune(batch_size=2).dead_letters == 3
    assert [d["id"] for d in pgq.admin.dead_letters()] == [ids[3]]


def test_workers_prune_in_their_maintenance_loop(app_dsn, pgq):
    pgq.retention.set(record_succeeded=True, history=0, dead_letters=1)
    pgq.enqueue_many([plain.s(i) for i in range(30)])
    pgq.enqueue(fail, {"label": "x"})
    with thread_worker(APP, app_dsn, prune_interval=0.3):
        wait_for(lambda: scalar(app_dsn, "SELECT count(*) FROM pgqueue.jobs") == 0)
        wait_for(
            lambda: count(app_dsn, "job_history") == 0 and count(app_dsn, "dead_letters") == 0,
            timeout=30,
            message="the pruner to empty history and dead letters",
        )


def test_safety_net_settles_waiting_jobs_whose_parent_left_unnoticed(app_dsn, pgq):
    lost = pgq.enqueue_workflow(chain(step.s("A"), step.s("B")))
    done = pgq.enqueue_workflow(chain(step.s("C"), step.s("D")))
    with psycopg.connect(app_dsn, autocommit=True) as conn:
        # Remove both roots behind pgqueue's back (no trigger fires): one leaves a succeeded
        # record, the other nothing at all.
        conn.execute("SET session_replication_role = replica")
        conn.execute(
            "DELETE FROM pgqueue.jobs WHERE id = ANY(%s)", ([lost.job_ids[0], done.job_ids[0]],)
        )
        conn.execute(
            "INSERT INTO pgqueue.job_history (id, queue, task, args, state, priority, attempts,"
            " max_attempts, created_at, result, keep_until)"
            " VALUES (%s, 'default', 'wf.step', '{}', 'succeeded', 0, 1, 5, now(), '\"C\"',"
            " now() + interval '1 hour')",
            (done.job_ids[0],),
        )
    assert pgq.run(_settle()) == 2
    assert (
        scalar(app_dsn, "SELECT state FROM pgqueue.jobs WHERE id = %s", (done.job_ids[1],))
        == "ready"
    )
    assert (
        scalar(
            app_dsn,
            "SELECT errors -> -1 ->> 'message' FROM pgqueue.job_history WHERE id = %s",
            (lost.job_ids[1],),
        )
        == f"cancelled: upstream job {lost.job_ids[0]} ended lost"
    )
    assert pgq.run(_settle()) == 0  # nothing left to settle


def _settle():
    from pgqueue.db.retention import settle_waiting

    return settle_waiting()


def test_cli_retention(app_dsn):
    runner = CliRunner()
    result = runner.invoke(
        cli_app,
        [
            "retention",
            "set",
            "--history",
            "2h",
            "--record-succeeded",
            "--dead-letters",
            "30d",
            "--json",
            "--dsn",
            app_dsn,
        ],
    )
    assert result.exit_code == 0, result.output
    [row] = json.loads(result.output)
    assert row["history_retention"] == 7200 and row["record_succeeded"] is True
    assert row["dead_letter_retention"] == 30 * 86400
    shown = runner.invoke(cli_app, ["retention", "show", "--json", "--dsn", app_dsn])
    assert json.loads(shown.output)[0]["history_retention"] == 7200
    never = runner.invoke(
        cli_app, ["retention", "set", "--dead-letters", "never", "--json", "--dsn", app_dsn]
    )
    assert json.loads(never.output)[0]["dead_letter_retention"] is None
    bad = runner.invoke(cli_app, ["retention", "set", "--dead-letters", "soon", "--dsn", app_dsn])
    assert bad.exit_code != 0 and "invalid duration" in bad.output
    pruned = runner.invoke(cli_app, ["retention", "prune", "--json", "--dsn", app_dsn])
    assert json.loads(pruned.output) == {
        "history": 0,
        "dead_letters": 0,
        "workflows": 0,
        "steps": 0,
        "events": 0,
    }
