"""The durable-steps benchmark runs end to end (tiny sizes), DBOS included: its pinned venv is
installed on first use (benchmarks/.peers-venv-dbos) and kept. Figures are never asserted, only
that every kind of workflow ran to the end on each system, through each system's own worker."""

from __future__ import annotations

import pytest

from benchmarks import durable


def test_the_durable_benchmark_runs_pgqueue_and_dbos_through_their_workers(pg_server, capsys):
    results = durable.main(
        ["--dsn", pg_server.admin_dsn, "--jobs", "20", "--runs", "1", "--worker-jobs", "30"]
    )
    assert set(results) == {"pgqueue", "DBOS"}
    for system, by_steps in results.items():
        assert set(by_steps) == set(durable.WORKER_STEPS), system
        for steps, [worked] in by_steps.items():
            assert worked.seconds > 0, (system, steps)
    printed = capsys.readouterr().out
    assert "10 steps:" in printed  # the drained comparison ran too
    assert "DBOS / pgqueue per checkpoint, 10 steps" in printed


def test_an_unknown_system_is_named(pg_server):
    with pytest.raises(SystemExit, match="2"):
        durable.main(["--dsn", pg_server.admin_dsn, "--systems", "pgqueue,celery"])
