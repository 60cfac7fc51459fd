"""The latency, idle-claim, single-enqueue, sleeping-jobs and steady-load benchmarks run end to
end (tiny sizes, the suite's server, whose fsync is off: the figures mean nothing). Figures are
never asserted, only that every step produced one."""

from __future__ import annotations

from pathlib import Path

import pytest

from benchmarks import enqueue_single, idle_claim, latency, sleep_jobs, steady

pytestmark = pytest.mark.slow


def test_latency_measures_every_stage(pg_server):
    args = ["--jobs", "20", "--rate", "50", "--runs", "1", "--kinds", "async", "--allow-fsync-off"]
    results = latency.main(["--dsn", pg_server.admin_dsn, *args, "--handoff-floor"])
    (run,) = results["async this"]
    assert run["jobs"] == 20
    assert run["staged"] > 0
    assert set(run["stages"]) == set(latency.STAGES)
    assert results["raw"][0]["p50"] > 0
    assert results["handoff"][0]["p50"] > 0
    assert results["handoff+confirm"][0]["p50"] > 0  # every handed job confirmed, none left


def test_idle_claim_times_both_checkouts(pg_server):
    here = Path(__file__).resolve().parents[2]  # this checkout, loaded a second time
    times = idle_claim.main(["--dsn", pg_server.admin_dsn, "--tree", str(here), "--claims", "4"])
    assert [len(rows) for rows, _ in times.values()] == [4, 4]


def test_sleep_jobs_and_single_enqueue_produce_figures(pg_server):
    args = [
        "--jobs",
        "100",
        "--runs",
        "1",
        "--concurrency",
        "8",
        "--kinds",
        "sync",
        "--allow-fsync-off",
    ]
    sleeping = sleep_jobs.main(["--dsn", pg_server.admin_dsn, *args])
    assert sleeping["sync this"][0] > 0
    counts = ["--count", "20", "--rounds", "1", "--producers", "2"]
    figures = enqueue_single.main(
        ["--dsn", pg_server.admin_dsn, *counts, "--kinds", "sync,group,lone"]
    )
    grouped = {f"group {side} {state}" for side in ("threads", "tasks") for state in ("on", "off")}
    assert {variant for variant, _ in figures} == {
        "raw",
        "jobs INSERT",
        "PgQueue.enqueue this",
        *grouped,
    }
    assert all(values[0] > 0 for values in figures.values())
    kinds = ["--kinds", "sync,async,task,keyed", "--commit-flush", "off", "--producers", "1"]
    figures = enqueue_single.main(
        ["--dsn", pg_server.admin_dsn, "--count", "20", "--rounds", "1", *kinds]
    )
    assert len(figures) == 6 and all(values[0] > 0 for values in figures.values())
    assert ("task.enqueue this", 1) in figures


def test_steady_load_produces_every_figure(pg_server):
    # (The idle-latency parts are latency.run_once, run by the test above.)
    args = ["--rates", "100", "--seconds", "1", "--producers", "2", "--latency-jobs", "0"]
    only = ["--quiet-jobs", "0", "--no-raw", "--runs", "1", "--allow-fsync-off"]
    threads = ["--producer-threads", "2", "--group-commit-off"]
    results = steady.main(["--dsn", pg_server.admin_dsn, *args, *only, *threads])
    assert set(results) == {"steady 100 this", f"steady 100 {steady.GROUP_COMMIT_OFF}"}
    for load in results.values():
        assert set(load) == set(steady.FIGURES) - {"max"}
        assert load["reached"][0] > 0
        assert load["p50"][0] > 0
