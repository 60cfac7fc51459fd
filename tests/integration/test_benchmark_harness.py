"""The comparison harness runs end to end (tiny sizes, pgqueue and the raw ceilings only: the
peers need network installs). Figures are never asserted, only that every step produced one."""

from __future__ import annotations

import dataclasses
import math

from benchmarks import compare

TINY = compare.Sizes(
    enqueue_1=20,
    enqueue_8=16,
    bulk=200,
    drain=300,
    latency_rate=50,
    latency_seconds=0.4,
    deep=400,
    deep_window=0.5,
    ready_wait=1.5,
    drain_timeout=120,
)
WORKLOADS = ("enqueue_1", "bulk", "drain_1")


def test_compare_runs_pgqueue_and_the_raw_ceiling(pg_server, tmp_path):
    results = compare.main(
        [
            "--dsn",
            pg_server.admin_dsn,
            "--systems",
            "raw,raw_leased,pgqueue",
            "--workloads",
            ",".join(WORKLOADS),
            "--runs",
            "1",
            "--no-docs",
            "--results-dir",
            str(tmp_path),
        ],
        sizes_override=TINY,
    )
    for workload in WORKLOADS:
        for system in ("raw", "raw_leased", "pgqueue"):
            (value,) = results.figures[workload][system]
            assert value > 0, (workload, system)
    # Every drained job was run by a handler, and the drain finished.
    assert not [n for n in results.notes if "not finished" in n or "counted" in n]
    assert list(tmp_path.glob("compare-*.json"))


REAL = dataclasses.replace(
    TINY,
    io=150,
    row=100,
    steady_rates=(100,),
    steady_seconds=1,
    producers=2,
    mixed=150,
    mixed_over=1,
    mixed_rate=100,
    settle=30,
)


def test_real_job_workloads_run_for_pgqueue_and_the_raw_ceiling(pg_server, tmp_path):
    # The 10 ms jobs, the row-writing jobs, a steady load and the mixed load, at tiny sizes:
    # every figure comes out, every job ran, every row was written. (Celery, Dramatiq and arq
    # go through the same code with their own drivers; they need installs, so not here.)
    results = compare.main(
        [
            "--dsn",
            pg_server.admin_dsn,
            "--systems",
            "raw,pgqueue_def",
            "--workloads",
            "io_sync,row,steady,mixed",
            "--runs",
            "1",
            "--no-docs",
            "--results-dir",
            str(tmp_path),
        ],
        sizes_override=REAL,
    )
    figures = results.figures
    assert 0 < figures["io_sync"]["pgqueue_def"][0] <= 110  # % of the 64-slot ceiling
    assert figures["row"]["pgqueue_def"][0] > 0
    for system in ("raw", "pgqueue_def"):
        for key in ("sent", "p50", "p99", "p999", "peak"):
            (value,) = figures[f"steady_100_{key}"][system]
            assert value >= 0 and not math.isnan(value), (key, system)
    # The raw ceiling has no scheduled jobs: no mixed figures for it.
    assert "raw" not in figures["mixed_due_p50"]
    assert figures["mixed_due_p999"]["pgqueue_def"][0] >= 0
    # Every job started and every row was written (no note says otherwise).
    assert not [n for n in results.notes if "started" in n or "rows" in n], results.notes
