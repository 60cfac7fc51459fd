"""Sync handlers in threads vs child processes (`pgq work --pool thread|process`).

    python -m benchmarks.pools [--dsn DSN] [--runs 1] [--concurrency 8]
        [--noop-jobs 5000] [--sleep-jobs 2000] [--recycle 100]

One real `pgq work` process per measurement. It is started first and warmed up (a batch of jobs
run, so every child process exists and has imported the app: start-up is reported apart, then
short jobs, so auto-prefetch sees short jobs as it would in a steady stream of them), then
the measured jobs are enqueued in one transaction; jobs/s counts from that commit to the last
job gone. Workloads: no-op sync handlers (the pool's own cost per job) and 10 ms
``time.sleep`` handlers (concurrency-bound: at most concurrency / 10 ms). The extra process row
recycles every child after ``--recycle`` jobs (``--max-jobs-per-child``).
"""

from __future__ import annotations

import argparse
import os
import signal
import statistics
import subprocess
import sys
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import psycopg

from benchmarks.common import fresh_database, machine, server
from pgqueue import PgQueue

ROOT = Path(__file__).resolve().parent.parent
APP = "benchmarks.pool_tasks:pgq"


@dataclass(frozen=True)
class Case:
    workload: str
    task: str
    args: dict[str, Any]
    jobs: int
    pool: str
    extra: tuple[str, ...] = ()

    @property
    def label(self) -> str:
        return self.pool + (f" ({' '.join(self.extra)})" if self.extra else "")


def remaining(conn: psycopg.Connection[Any]) -> int:
    row = conn.execute("SELECT count(*) FROM pgqueue.jobs").fetchone()
    return int(row[0]) if row else 0


def drain_wait(conn: psycopg.Connection[Any], timeout: float = 300.0) -> None:
    deadline = time.monotonic() + timeout
    while remaining(conn) > 0:
        if time.monotonic() > deadline:
            raise RuntimeError("jobs did not drain")
        time.sleep(0.005)


def measure(dsn: str, case: Case, concurrency: int) -> tuple[float, float]:
    """(jobs/s, seconds from the worker's start to its warm-up batch done)."""
    env = {**os.environ, "PGQUEUE_DSN": dsn}
    command = [
        sys.executable,
        "-m",
        "pgqueue.cli",
        "work",
        APP,
        "--pool",
        case.pool,
        "--concurrency",
        str(concurrency),
        "--log-level",
        "WARNING",
        "--poll-interval",
        "1s",
        *case.extra,
    ]
    app = PgQueue(dsn)
    with psycopg.connect(dsn, autocommit=True) as conn:
        conn.execute("VACUUM ANALYZE pgqueue.jobs")
        began = time.perf_counter()
        worker = subprocess.Popen(command, cwd=ROOT, env=env)
        try:
            # Warm up: enough slow jobs at once that every slot gets one (every child started),
            # then short ones, so the worker's moving average of job durations (auto-prefetch
            # is for short jobs) forgets the slow ones.
            app.enqueue_many([app.spec("pools.sleep", {"seconds": 0.2}, {})] * concurrency * 2)
            drain_wait(conn)
            app.enqueue_many([app.spec("pools.noop", {}, {})] * 300)
            drain_wait(conn)
            warm = time.perf_counter() - began
            app.enqueue_many([app.spec(case.task, case.args, {})] * case.jobs)
            started = time.perf_counter()
            drain_wait(conn)
            elapsed = time.perf_counter() - started
        finally:
            app.close()
            worker.send_signal(signal.SIGTERM)
            worker.wait(60)
    return case.jobs / elapsed, warm


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--dsn")
    parser.add_argument("--runs", type=int, default=1)
    parser.add_argument("--concurrency", type=int, default=8)
    parser.add_argument("--noop-jobs", type=int, default=5000)
    parser.add_argument("--sleep-jobs", type=int, default=2000)
    parser.add_argument("--recycle", type=int, default=100, help="max-jobs-per-child row")
    args = parser.parse_args()
    noop: tuple[str, str, dict[str, Any], int] = ("no-op sync", "pools.noop", {}, args.noop_jobs)
    sleep: tuple[str, str, dict[str, Any], int] = (
        "10 ms time.sleep",
        "pools.sleep",
        {"seconds": 0.01},
        args.sleep_jobs,
    )
    recycle = ("--max-jobs-per-child", str(args.recycle))
    cases = [
        Case(*noop, "thread"),
        Case(*noop, "process"),
        Case(*noop, "process", recycle),
        Case(*sleep, "thread"),
        Case(*sleep, "process"),
    ]
    with server(args.dsn) as admin:
        db = fresh_database(admin, "pgqueue_bench_pools")
        print(f"machine: {machine(db)}")
        print(f"concurrency {args.concurrency}, one worker process, median of {args.runs} run(s)")
        print()
        print(f"| {'workload':<18} | {'pool':<34} | {'jobs':>6} | {'jobs/s':>8} | {'start':>7} |")
        print(f"|{'-' * 20}|{'-' * 36}|{'-' * 7}:|{'-' * 9}:|{'-' * 8}:|")
        for case in cases:
            results = [measure(db, case, args.concurrency) for _ in range(args.runs)]
            rate = statistics.median(r[0] for r in results)
            warm = statistics.median(r[1] for r in results)
            print(
                f"| {case.workload:<18} | {case.label:<34} | {case.jobs:>6,} | {rate:>8,.0f} "
                f"| {warm:>6.1f}s |",
                flush=True,
            )
        print()
        print("start: from spawning `pgq work` to its warm-up batch done (children included)")


if __name__ == "__main__":
    main()
