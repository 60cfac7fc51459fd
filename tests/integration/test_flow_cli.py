"""`pgq queue`, `pgq task`: flow-control settings from the shell, visible in SQL."""

from __future__ import annotations

import json

from typer.testing import CliRunner

from pgqueue.cli import app as cli_app
from tests.helpers import scalar


def run(*args: str):
    return CliRunner().invoke(cli_app, list(args))


def test_queue_settings_set_list_and_clear(dsn):
    result = run("queue", "set", "reports", "--weight", "20", "--max-depth", "500",
                 "--concurrency", "2", "--rate", "10/s", "--burst", "30", "--dsn", dsn)  # fmt: skip
    assert result.exit_code == 0, result.output
    [row] = json.loads(run("queue", "list", "--json", "--dsn", dsn).output)
    assert row == {
        "queue": "reports",
        "paused": False,
        "weight": 20,
        "max_depth": 500,
        "concurrency_limit": 2,
        "rate_limit": 10.0,
        "rate_burst": 30.0,
        "fair": False,
    }
    assert run("queue", "set", "reports", "--fair", "--dsn", dsn).exit_code == 0
    [row] = json.loads(run("queue", "list", "--json", "--dsn", dsn).output)
    assert row["fair"] is True and row["weight"] == 20
    assert run("queue", "set", "reports", "--no-fair", "--dsn", dsn).exit_code == 0
    assert scalar(dsn, "SELECT fair FROM pgqueue.queues WHERE name = 'reports'") is False
    # Only what is given changes; 'none' clears.
    assert run("queue", "set", "reports", "--max-depth", "none", "--dsn", dsn).exit_code == 0
    [row] = json.loads(run("queue", "list", "--json", "--dsn", dsn).output)
    assert row["max_depth"] is None and row["weight"] == 20 and row["rate_limit"] == 10.0
    assert (
        scalar(dsn, "SELECT concurrency_limit FROM pgqueue.queue_depth WHERE queue = 'reports'")
        == 2
    )
    bad = run("queue", "set", "reports", "--weight", "heavy", "--dsn", dsn)
    assert bad.exit_code == 1 and "--weight must be a whole number" in bad.output
    bad = run("queue", "set", "reports", "--rate", "fast", "--dsn", dsn)
    assert bad.exit_code == 1 and "invalid rate limit" in bad.output
    bad = run("queue", "set", "reports", "--concurrency", "0", "--dsn", dsn)
    assert bad.exit_code == 1 and "positive integer" in bad.output


def test_task_limits_set_and_list(dsn):
    result = run("task", "set", "reports.build", "--concurrency", "3", "--key-limit", "2",
                 "--rate", "120/m", "--dsn", dsn)  # fmt: skip
    assert result.exit_code == 0, result.output
    [row] = json.loads(run("task", "list", "--json", "--dsn", dsn).output)
    assert row["task"] == "reports.build" and row["concurrency_limit"] == 3
    assert row["key_limit"] == 2 and row["rate_limit"] == 2.0 and row["rate_burst"] == 120.0
    assert row["from_code"] is False
    assert row["key_rate_limit"] is None
    assert run("task", "set", "reports.build", "--rate", "none", "--dsn", dsn).exit_code == 0
    [row] = json.loads(run("task", "list", "--json", "--dsn", dsn).output)
    assert row["rate_limit"] is None and row["concurrency_limit"] == 3
    # Per key: a token bucket per key; 'none' lifts the limit of running jobs per key.
    result = run("task", "set", "reports.build", "--key-rate", "10/s", "--key-burst", "20",
                 "--key-limit", "none", "--dsn", dsn)  # fmt: skip
    assert result.exit_code == 0, result.output
    [row] = json.loads(run("task", "list", "--json", "--dsn", dsn).output)
    assert row["key_rate_limit"] == 10.0 and row["key_rate_burst"] == 20.0
    assert row["key_limit"] is None and row["concurrency_limit"] == 3
    bad = run("task", "set", "reports.build", "--key-burst", "5", "--dsn", dsn)
    assert bad.exit_code == 1 and "--key-burst needs --key-rate" in bad.output


def test_work_rejects_a_bad_concurrency_range(dsn):
    result = run("work", "tests.integration.flow_app:pgq", "--concurrency", "8:2", "--dsn", dsn)
    assert result.exit_code == 1 and "1 <= MIN <= MAX" in result.output
