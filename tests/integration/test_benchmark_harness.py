"""The comparison harness runs end to end (tiny sizes, pgqueue and the raw ceiling only: the
peers need network installs). Figures are never asserted, only that every step produced one."""

from __future__ import annotations

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
            "raw,pgqueue",
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
        for system in ("raw", "pgqueue"):
            (value,) = results.figures[workload][system]
            assert value > 0, (workload, system)
    # Every drained job was run by a handler, and the drain finished.
    assert not [n for n in results.notes if "not finished" in n or "counted" in n]
    assert list(tmp_path.glob("compare-*.json"))
