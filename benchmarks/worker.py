"""Worker throughput and latency with real `pgq work` processes.

    python -m benchmarks.worker [--dsn DSN] [--runs 3] [--jobs 20000] [--concurrency 64]

1. drain: N no-op jobs enqueued up front, then 1 and 4 worker processes start; jobs/s from the
   first job taken to the last job gone.
2. latency: idle workers (1 process), jobs enqueued one per transaction at a steady rate; the
   delay from just before the enqueue's commit to the handler starting, p50 and p99.
"""

from __future__ import annotations

import argparse
import os
import signal
import statistics
import subprocess
import sys
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


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--dsn")
    parser.add_argument("--runs", type=int, default=3)
    parser.add_argument("--jobs", type=int, default=20_000)
    parser.add_argument("--concurrency", type=int, default=64)
    parser.add_argument("--rate", type=float, default=50.0, help="latency test jobs/s")
    args = parser.parse_args()
    with server(args.dsn) as admin:
        db = fresh_database(admin, "pgqueue_bench_worker")
        print(f"machine: {machine(db)}")
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
