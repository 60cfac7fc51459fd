from __future__ import annotations

import json
import os
import shutil
import subprocess
from datetime import timedelta
from pathlib import Path

import psycopg
from typer.testing import CliRunner

from pgqueue.cli import app

runner = CliRunner()
PGQ = shutil.which("pgq") or "pgq"


def invoke(*args: str):
    return runner.invoke(app, list(args), catch_exceptions=False)


def test_enqueue_from_the_shell(dsn, conn):
    result = invoke(
        "enqueue",
        "reports.build",
        "--args",
        '{"month": "2026-11"}',
        "--queue",
        "reports",
        "--delay",
        "5m",
        "--priority",
        "-1",
        "--dsn",
        dsn,
    )
    assert result.exit_code == 0, result.output
    job_id = int(result.output.strip())
    row = conn.execute(
        "SELECT queue, task, args, state, priority FROM pgqueue.jobs WHERE id = %s", (job_id,)
    ).fetchone()
    assert row == ("reports", "reports.build", {"month": "2026-11"}, "scheduled", -1)


def test_enqueue_with_dependencies_result_ttl_and_concurrency_key(dsn, conn):
    parent = int(invoke("enqueue", "etl.extract", "--dsn", dsn).output.strip())
    other = int(invoke("enqueue", "etl.extract", "--dsn", dsn).output.strip())
    result = invoke(
        "enqueue", "etl.load", "--depends-on", str(parent), "--depends-on", str(other),
        "--result-ttl", "1h", "--concurrency-key", "customer-7", "--dsn", dsn,
    )  # fmt: skip
    child = int(result.output.strip())
    row = conn.execute(
        "SELECT state, result_ttl, concurrency_key FROM pgqueue.jobs WHERE id = %s", (child,)
    ).fetchone()
    assert row == ("waiting", timedelta(hours=1), "customer-7")
    # A dependency on a job that does not exist is refused, and nothing is written.
    missing = runner.invoke(app, ["enqueue", "etl.load", "--depends-on", "999999", "--dsn", dsn])
    assert missing.exit_code == 1 and "999999" in missing.output, missing.output
    assert conn.execute("SELECT count(*) FROM pgqueue.jobs").fetchone()[0] == 3


def test_enqueue_idempotency_and_json_output(dsn):
    first = invoke("enqueue", "t", "--idempotency-key", "k", "--json", "--dsn", dsn)
    again = invoke("enqueue", "t", "--idempotency-key", "k", "--json", "--dsn", dsn)
    a, b = json.loads(first.output), json.loads(again.output)
    assert a["created"] and not b["created"] and a["id"] == b["id"]


def test_enqueue_deduplication_flags(dsn, conn):
    debounce = ["--unique", "--unique-among", "pending", "--on-conflict", "replace", "--dsn", dsn]
    first = invoke("enqueue", "index.doc", "--args", '{"doc": 7}', "--delay", "1m", *debounce)
    again = invoke("enqueue", "index.doc", "--args", '{"doc": 7}', "--json", *debounce)
    job = int(first.output.strip())
    assert json.loads(again.output) == {"id": job, "created": False, "replaced": True}
    text = invoke("enqueue", "index.doc", "--args", '{"doc": 7}', *debounce)
    assert text.output.strip() == f"{job} (replaced the pending job's arguments)"
    # By some arguments only; throttled per minute.
    by = ["--unique-by", "doc", "--throttle", "1m", "--dsn", dsn]
    one = invoke("enqueue", "index.doc", "--args", '{"doc": 8, "v": 1}', *by).output.strip()
    two = invoke("enqueue", "index.doc", "--args", '{"doc": 8, "v": 2}', *by).output.strip()
    assert two == f"{one} (existing job)"
    key = conn.execute("SELECT idempotency_key FROM pgqueue.jobs WHERE id = %s", (int(one),))
    assert key.fetchone()[0].startswith("index.doc:")
    for args, message in [
        (["--unique", "--unique-by", "doc"], "pass either --unique or --unique-by"),
        (["--on-conflict", "merge"], "'merge' is not one of"),
        (["--unique-among", "pending"], "unique_among needs a key"),
        (["--unique", "--throttle", "1.5s"], "whole number of seconds"),
    ]:
        result = runner.invoke(app, ["enqueue", "index.doc", *args, "--dsn", dsn])
        assert result.exit_code in (1, 2), (args, result.output)
        assert message in " ".join(result.output.split()), (args, result.output)
    assert conn.execute("SELECT count(*) FROM pgqueue.jobs").fetchone()[0] == 2


def test_enqueue_keeps_a_key_after_the_job_and_waits_for_room(dsn, conn):
    # Every enqueue option is a flag: --unique-for, --unique-state and --wait-if-full too.
    kept = ("--idempotency-key", "k", "--unique-for", "1d", "--unique-state", "dead")
    job_id = int(invoke("enqueue", "t", *kept, "--unique-state", "cancelled", "--dsn", dsn).output)
    row = conn.execute(
        "SELECT unique_for, unique_states FROM pgqueue.jobs WHERE id = %s", (job_id,)
    ).fetchone()
    assert row == (timedelta(days=1), ["dead", "cancelled"])
    invoke("queue", "set", "full", "--max-depth", "1", "--dsn", dsn)
    invoke("enqueue", "t", "--queue", "full", "--dsn", dsn)
    result = runner.invoke(
        app, ["enqueue", "t", "--queue", "full", "--wait-if-full", "200ms", "--dsn", dsn]
    )
    assert result.exit_code == 1 and "full" in result.output, result.output
    assert "Traceback" not in result.output
    count = conn.execute("SELECT count(*) FROM pgqueue.jobs WHERE queue = 'full'").fetchone()
    assert count == (1,)
    bad = runner.invoke(app, ["enqueue", "t", "--unique-state", "lost", "--dsn", dsn])
    assert bad.exit_code == 1 and "unique_states must name final states" in bad.output


def test_enqueue_bad_input_is_a_clear_error_and_writes_nothing(dsn, conn):
    for args, message in [
        (["--args", "{oops"], "--args is not valid JSON"),
        (["--args", "[1, 2]"], "--args must be a JSON object"),
        (["--args", '{"x": NaN}'], "NaN"),
        (["--queue", ""], "queue name must not be empty"),
        (["--priority", "99999"], "priority must be between"),
    ]:
        result = runner.invoke(app, ["enqueue", "t", *args, "--dsn", dsn])
        assert result.exit_code == 1, (args, result.output)
        assert message in result.output, (args, result.output)
    bad_delay = runner.invoke(app, ["enqueue", "t", "--delay", "soon", "--dsn", dsn])
    assert bad_delay.exit_code == 2 and "invalid duration" in bad_delay.output
    assert conn.execute("SELECT count(*) FROM pgqueue.jobs").fetchone()[0] == 0


def test_stats_json(dsn):
    invoke("enqueue", "t", "--queue", "a", "--dsn", dsn)
    result = invoke("stats", "--json", "--dsn", dsn)
    [row] = json.loads(result.output)
    assert row["queue"] == "a" and row["ready"] == 1


def test_unreachable_database_is_one_clear_line():
    result = runner.invoke(
        app, ["enqueue", "t", "--dsn", "host=127.0.0.1 port=1 connect_timeout=2"]
    )
    assert result.exit_code == 1
    assert "database unreachable" in result.output or "error" in result.output


def test_embedded_server_is_started_on_demand_shared_and_stopped(tmp_path: Path):
    """No DSN anywhere: `pgq db url` starts the embedded server; a second process finds the same
    one; psql-compatible URL works; `pgq db stop` stops it."""
    env = {k: v for k, v in os.environ.items() if k not in ("PGQUEUE_DSN", "DATABASE_URL")}
    env["PGQUEUE_EMBEDDED_DIR"] = str(tmp_path / "pg")

    def pgq(*args: str) -> str:
        done = subprocess.run(
            [PGQ, *args], check=False, env=env, capture_output=True, text=True, timeout=120
        )
        assert done.returncode == 0, done.stderr
        return done.stdout.strip()

    try:
        url = pgq("db", "url")
        assert pgq("db", "url") == url
        pgq("migrate")
        job = pgq("enqueue", "hello", "--args", '{"who": "world"}')
        with psycopg.connect(url) as conn:
            assert conn.execute(
                "SELECT task FROM pgqueue.jobs WHERE id = %s", (int(job),)
            ).fetchone() == ("hello",)
        assert "schema version: 0001" in pgq("db", "status") or "schema version" in pgq(
            "db", "status"
        )
    finally:
        assert pgq("db", "stop") in ("embedded server stopped", "embedded server was not running")
    assert pgq("db", "stop") == "embedded server was not running"
