"""Worker throughput and latency with real `pgq work` processes.

    python -m benchmarks.worker [--dsn DSN] [--runs 3] [--jobs 20000] [--concurrency 64]
    python -m benchmarks.worker --sync-ratio [--runs 5] [--jobs 100000] [--concurrency 64]

1. drain: N no-op jobs enqueued up front, then 1 and 4 worker processes start; jobs/s from the
   first job taken to the last job gone.
2. latency: idle workers (1 process), jobs enqueued one per transaction at a steady rate; the
   delay from just before the enqueue's commit to the handler starting, p50 and p99.

``--sync-ratio`` runs only this instead: N no-op jobs drained by one `pgq work --burst` process
(thread pool), an `async def` handler and a plain `def` one in turn, ``--runs`` interleaved
pairs; prints every pair, the medians and the sync/async ratio (median of the pairs' ratios).
These drains are timed inside the worker (first job started to last job run, as
`benchmarks.compare` does): start-up and exit never count, and nothing polls the table.
Run it with each interpreter's venv (`.venv-3.12/bin/python -m benchmarks.worker ...`) for the
figures of that Python: the workers are started with the same interpreter.
"""

from __future__ import annotations

import argparse
import json
import os
import signal
import statistics
import subprocess
import sys
import tempfile
import time
from functools import partial
from pathlib import Path
from typing import Any

import psycopg

from benchmarks.common import fmt, fresh_database, machine, median_of, server
from pgqueue import PgQueue

ROOT = Path(__file__).resolve().parent.parent
APP = "benchmarks.bench_tasks:pgq"


def start_workers(
    dsn: str, count: int, concurrency: int, *extra: str
) -> list[subprocess.Popen[bytes]]:
    env = {**os.environ, "PGQUEUE_DSN": dsn}
    command = [
        sys.executable,
        "-m",
        "pgqueue.cli",
        "work",
        APP,
        "--concurrency",
        str(concurrency),
        "--log-level",
        "WARNING",
        *extra,
    ]
    return [subprocess.Popen(command, cwd=ROOT, env=env) for _ in range(count)]


def stop(workers: list[subprocess.Popen[bytes]]) -> None:
    for w in workers:
        w.send_signal(signal.SIGTERM)
    for w in workers:
        w.wait(60)


def remaining(conn: psycopg.Connection[Any]) -> int:
    row = conn.execute("SELECT count(*) FROM pgqueue.jobs").fetchone()
    return int(row[0]) if row else 0


def drain(dsn: str, jobs: int, processes: int, concurrency: int, task: str) -> float:
    app = PgQueue(dsn)
    app.enqueue_many([app.spec(task, {}, {}) for _ in range(jobs)])
    app.close()
    with psycopg.connect(dsn, autocommit=True) as conn:
        conn.execute("VACUUM ANALYZE pgqueue.jobs")
        workers = start_workers(dsn, processes, concurrency, "--burst")
        while remaining(conn) == jobs:
            time.sleep(0.002)
        started = time.perf_counter()
        while remaining(conn) > 0:
            time.sleep(0.005)
        elapsed = time.perf_counter() - started
    for w in workers:
        w.wait(60)
    return jobs / elapsed


def latency(dsn: str, rate: float, seconds: float) -> tuple[float, float]:
    with psycopg.connect(dsn, autocommit=True) as conn:
        conn.execute("CREATE TABLE IF NOT EXISTS bench_latency (job_id bigint, delay float8)")
        conn.execute("TRUNCATE bench_latency")
    workers = start_workers(dsn, 1, 16, "--poll-interval", "5s")
    app = PgQueue(dsn)
    try:
        time.sleep(2.0)  # workers up, connected, listening and idle
        count = int(rate * seconds)
        next_at = time.perf_counter()
        for _ in range(count):
            app.enqueue("bench.latency", {"sent": time.time()})
            next_at += 1.0 / rate
            time.sleep(max(0.0, next_at - time.perf_counter()))
        with psycopg.connect(dsn) as conn:
            while True:
                row = conn.execute("SELECT count(*) FROM bench_latency").fetchone()
                if row and row[0] >= count:
                    break
                time.sleep(0.05)
            delays = sorted(r[0] for r in conn.execute("SELECT delay FROM bench_latency"))
    finally:
        app.close()
        stop(workers)
    p50 = statistics.median(delays) * 1000
    p99 = delays[min(len(delays) - 1, int(len(delays) * 0.99))] * 1000
    return p50, p99


def drain_timed_inside(dsn: str, jobs: int, concurrency: int, task: str) -> float:
    """One burst worker drains ``jobs`` of ``task`` (its handler notes the first and last job
    it ran); jobs/s between those two."""
    app = PgQueue(dsn)
    app.enqueue_many([app.spec(task, {}, {}) for _ in range(jobs)])
    app.close()
    with psycopg.connect(dsn, autocommit=True) as conn:
        conn.execute("VACUUM ANALYZE pgqueue.jobs")
    with tempfile.TemporaryDirectory(prefix="pgqueue-bench-stats-") as stats_dir:
        os.environ["BENCH_STATS_DIR"] = stats_dir
        try:
            (worker,) = start_workers(dsn, 1, concurrency, "--burst")
        finally:
            del os.environ["BENCH_STATS_DIR"]
        if worker.wait(600) != 0:
            raise RuntimeError(f"worker exited with status {worker.returncode}")
        (path,) = Path(stats_dir).glob("*.json")
        stats = json.loads(path.read_text())
    if stats["count"] != jobs:
        raise RuntimeError(f"{task}: {stats['count']} of {jobs} jobs ran")
    return jobs / (stats["last"] - stats["first"])


def sync_ratio(db: str, jobs: int, concurrency: int, runs: int) -> None:
    """The sync/async drain ratio of one worker process, interleaved pairs in one run."""
    pairs: list[tuple[float, float]] = []
    for run in range(runs):
        # Alternate which one goes first, so neither always gets the warmer machine.
        order = ("bench.counted", "bench.sync_counted")
        rates = {
            task: drain_timed_inside(db, jobs, concurrency, task)
            for task in (order if run % 2 == 0 else order[::-1])
        }
        pair = rates["bench.counted"], rates["bench.sync_counted"]
        pairs.append(pair)
        print(
            f"run {run + 1}: async {pair[0]:,.0f} jobs/s, sync {pair[1]:,.0f} jobs/s, "
            f"sync/async {pair[1] / pair[0]:.2f}",
            flush=True,
        )
    async_rates = [a for a, _ in pairs]
    sync_rates = [s for _, s in pairs]
    print(
        f"drain {jobs:,} no-op jobs, 1 process x {concurrency} (thread pool), median of {runs}: "
        f"async {statistics.median(async_rates):,.0f} jobs/s "
        f"(min {min(async_rates):,.0f}, max {max(async_rates):,.0f}), "
        f"sync {statistics.median(sync_rates):,.0f} jobs/s "
        f"(min {min(sync_rates):,.0f}, max {max(sync_rates):,.0f}), "
        f"sync/async {statistics.median(s / a for a, s in pairs):.2f}"
    )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--dsn")
    parser.add_argument("--runs", type=int, default=3)
    parser.add_argument("--jobs", type=int, default=20_000)
    parser.add_argument("--concurrency", type=int, default=64)
    parser.add_argument("--rate", type=float, default=50.0, help="latency test jobs/s")
    parser.add_argument(
        "--sync-ratio",
        action="store_true",
        help="only the sync/async drain ratio of one process (see above)",
    )
    args = parser.parse_args()
    with server(args.dsn) as admin:
        db = fresh_database(admin, "pgqueue_bench_worker")
        print(f"machine: {machine(db)}")
        if args.sync_ratio:
            sync_ratio(db, args.jobs, args.concurrency, args.runs)
            return
        for processes in (1, 4):
            for task in ("bench.noop", "bench.sync_noop"):
                stats = median_of(
                    args.runs,
                    partial(drain, db, args.jobs, processes, args.concurrency, task),
                )
                kind = "async" if task == "bench.noop" else "sync"
                print(
                    f"drain {args.jobs:,} {kind} no-op jobs, {processes} process(es) x "
                    f"{args.concurrency}: {fmt(stats)}"
                )
        p50s, p99s = [], []
        for _ in range(args.runs):
            p50, p99 = latency(db, args.rate, 10.0)
            p50s.append(p50)
            p99s.append(p99)
        print(
            f"enqueue->start latency at {args.rate:g} jobs/s, idle worker: "
            f"p50 {statistics.median(p50s):.1f} ms, p99 {statistics.median(p99s):.1f} ms "
            f"(median of {args.runs} runs)"
        )


if __name__ == "__main__":
    main()
