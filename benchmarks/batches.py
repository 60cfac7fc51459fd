"""Batch handlers against one job per call: the same 100,000 rows written by real `pgq work`
processes (figures for docs/benchmarks.md).

    python -m benchmarks.batches [--dsn DSN] [--jobs 100000] [--runs 3] [--batch-size 100]
                                 [--concurrency 10] [--pool thread|process]

Each run enqueues the jobs (bulk), then starts one `pgq work --burst` process and waits for it to
finish: ``bench.one_row`` writes its row with one ``INSERT`` per job, ``bench.many_rows`` (a batch
task) a batch's rows with one ``COPY``, both through a pool of the worker process's own
(``benchmarks/batch_tasks.py``). Throughput: rows over the time from the first row written to the
last (database clock: start-up and shutdown do not count). Also: the transactions the database
committed per job over the run (claims, acks, heartbeats and the rows' own writes), and the
batches' sizes. The two ways alternate within each run, so both see the same machine.
"""

from __future__ import annotations

import argparse
import os
import statistics
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import psycopg

from benchmarks.batch_tasks import ROWS_DDL
from benchmarks.common import fresh_database, machine, server
from pgqueue import PgQueue

ROOT = Path(__file__).resolve().parent.parent
APP = "benchmarks.batch_tasks:pgq"
TASKS = {"one job per call (INSERT)": "bench.one_row", "batches (COPY)": "bench.many_rows"}


def commits(conn: psycopg.Connection[Any]) -> int:
    row = conn.execute(
        "SELECT xact_commit FROM pg_stat_database WHERE datname = current_database()"
    ).fetchone()
    return int(row[0]) if row else 0


def measure(admin: str, task: str, args: argparse.Namespace) -> dict[str, float]:
    """One drain of ``args.jobs`` jobs of ``task``: rows/s, commits per job, mean batch size."""
    dsn = fresh_database(admin, "bench_batches")
    with psycopg.connect(dsn, autocommit=True) as conn:
        conn.execute(ROWS_DDL)
        app = PgQueue(dsn)
        app.enqueue_many([app.spec(task, {"n": n}, {"queue": "default"}) for n in range(args.jobs)])
        app.close()
        conn.execute("VACUUM ANALYZE pgqueue.jobs")
        conn.execute("SELECT pg_stat_force_next_flush()")
        before = commits(conn)
        env = {
            **os.environ,
            "PGQUEUE_DSN": dsn,
            "BENCH_BATCH_SIZE": str(args.batch_size),
            "BENCH_POOL_SIZE": str(args.concurrency),
        }
        command = [
            sys.executable, "-m", "pgqueue.cli", "work", APP, "--burst", "--log-level", "WARNING",
            "--concurrency", str(args.concurrency), "--pool", args.pool,
        ]  # fmt: skip
        worker = subprocess.Popen(command, cwd=ROOT, env=env)
        if worker.wait(600) != 0:
            raise RuntimeError(f"pgq work exited with {worker.returncode}")
        time.sleep(0.5)  # the worker's backends are gone: their counts are flushed
        after = commits(conn)
        row = conn.execute(
            "SELECT count(*), extract(epoch FROM max(at) - min(at)), count(DISTINCT xmin::text)"
            " FROM bench_rows"
        ).fetchone()
    assert row is not None
    rows, span, writes = int(row[0]), float(row[1] or 0), int(row[2])
    if rows != args.jobs:
        raise RuntimeError(f"{rows} rows written for {args.jobs} jobs")
    return {
        "rows/s": rows / span if span > 0 else float("nan"),
        "commits/job": (after - before) / rows,
        # Each write is a transaction of its own: the rows' xmin count them.
        "rows/write": rows / writes,
    }


def summary(values: list[float], digits: int = 0) -> str:
    return (
        f"{statistics.median(values):,.{digits}f} "
        f"({min(values):,.{digits}f}-{max(values):,.{digits}f})"
    )


def main(argv: list[str] | None = None) -> dict[str, list[dict[str, float]]]:
    """Run the benchmark; returns every run's figures, by handler."""
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--dsn")
    parser.add_argument("--jobs", type=int, default=100_000)
    parser.add_argument("--runs", type=int, default=3)
    parser.add_argument("--batch-size", type=int, default=100)
    parser.add_argument("--concurrency", type=int, default=10)
    parser.add_argument("--pool", choices=("thread", "process"), default="thread")
    args = parser.parse_args(argv)
    with server(args.dsn) as admin:
        print(
            f"machine: {machine(admin)}; {args.jobs:,} jobs, 1 worker process, "
            f"--concurrency {args.concurrency}, --pool {args.pool}, batch_size {args.batch_size}",
            flush=True,
        )
        results: dict[str, list[dict[str, float]]] = {label: [] for label in TASKS}
        for _ in range(args.runs):
            for label, task in TASKS.items():
                results[label].append(measure(admin, task, args))
        print(f"\nEach figure: median of {args.runs} run(s) (min-max).\n")
        print("| handler | rows/s | transactions per job | rows per write |")
        print("|---|---|---|---|")
        for label, runs in results.items():
            print(
                f"| {label} | {summary([r['rows/s'] for r in runs])} | "
                f"{summary([r['commits/job'] for r in runs], 2)} | "
                f"{summary([r['rows/write'] for r in runs], 1)} |"
            )
        one, many = (statistics.median(r["rows/s"] for r in runs) for runs in results.values())
        print(f"\nbatches / one job per call: {many / one:.2f}x", flush=True)
    return results


if __name__ == "__main__":
    main()
