"""The batch benchmark runs end to end (tiny sizes). Figures are never asserted, only that each
way wrote every row, and that the batches wrote many rows per transaction."""

from __future__ import annotations

from benchmarks import batches


def test_the_batch_benchmark_drains_both_ways(pg_server):
    results = batches.main(
        ["--dsn", pg_server.admin_dsn, "--jobs", "300", "--runs", "1", "--batch-size", "50"]
    )
    [one] = results["one job per call (INSERT)"]
    [many] = results["batches (COPY)"]
    assert one["rows/s"] > 0 and many["rows/s"] > 0
    assert one["rows/write"] == 1
    assert many["rows/write"] > 10  # batches of up to 50: most of them full
