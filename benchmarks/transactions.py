"""What an exactly-once effect costs: jobs writing one row, acked in batches or completed in
their own transaction (``ctx.transaction()``).

    python -m benchmarks.transactions [--dsn DSN] [--runs 3] [--jobs 20000] [--concurrency 64]

Each run drains ``--jobs`` jobs, enqueued up front, with one ``pgq work --burst`` process, for
each kind in turn (interleaved, a fresh database each): an ``async def`` and a plain ``def``
handler writing one row to an application table, either through the worker process's own
connection pool (``benchmarks.drivers.jobs``: 16 connections, the row committed before the
handler returns, the job acked afterwards with others in one statement) or in the job's
transaction (the row and the fenced completion committed together; 16 connections:
``--transaction-connections``). The rate is rows over the time between the first and the
last row written (start-up and exit do not count). A private embedded PostgreSQL with stock
settings (fsync and synchronous commit on) unless ``--dsn``: a commit per job is the cost.
"""

from __future__ import annotations

import argparse
import os
import statistics
import subprocess
import sys

import psycopg

from benchmarks.common import fresh_database, machine, server
from benchmarks.drivers import jobs
from pgqueue import PgQueue

KINDS = {
    "async, row then ack": "row.plain",
    "async, row in the completion's transaction": "row.tx",
    "def (threads), row then ack": "row.sync_plain",
    "def (threads), row in the completion's transaction": "row.sync_tx",
}
POOL = str(jobs.POOL_SIZE)


def drain(admin: str, task: str, count: int, concurrency: int) -> float:
    dsn = fresh_database(admin, "bench_tx")
    with psycopg.connect(dsn, autocommit=True) as conn:
        conn.execute(jobs.DDL)
    with PgQueue(dsn) as pgq:
        pgq.enqueue_many([pgq.spec(task, {}, {}) for _ in range(count)])
    env = {**os.environ, "PGQUEUE_DSN": dsn, "BENCH_APP_DSN": dsn}
    subprocess.run(
        [sys.executable, "-m", "pgqueue.cli", "work", "benchmarks.tx_tasks:pgq", "--burst",
         "--concurrency", str(concurrency), "--transaction-connections", POOL,
         "--log-level", "WARNING"],
        env=env, check=True, timeout=600,
    )  # fmt: skip
    with psycopg.connect(dsn) as conn:
        rows, seconds = conn.execute(
            "SELECT count(*), extract(epoch FROM max(written_at) - min(written_at)) FROM bench_rows"
        ).fetchone()  # type: ignore[misc]
        left = conn.execute("SELECT count(*) FROM pgqueue.jobs").fetchone()
    assert rows == count and left == (0,), f"{task}: {rows} rows, {left} jobs left"
    return float(rows) / float(seconds)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--dsn", help="server to measure (default: a new embedded one)")
    parser.add_argument("--runs", type=int, default=3)
    parser.add_argument("--jobs", type=int, default=20_000)
    parser.add_argument("--concurrency", type=int, default=64)
    args = parser.parse_args()
    rates: dict[str, list[float]] = {kind: [] for kind in KINDS}
    with server(args.dsn) as admin:
        about = machine(admin)
        for run in range(args.runs):
            for kind, task in KINDS.items():
                rate = drain(admin, task, args.jobs, args.concurrency)
                rates[kind].append(rate)
                print(f"run {run + 1}: {kind}: {rate:,.0f} jobs/s", file=sys.stderr, flush=True)
    print(f"machine: {about}\n")
    print(f"{args.jobs:,} jobs, 1 worker process, --concurrency {args.concurrency}\n")
    print("| jobs writing one row | jobs/s, median (min-max) |")
    print("|---|---|")
    for kind, values in rates.items():
        print(
            f"| {kind} | {statistics.median(values):,.0f} ({min(values):,.0f}-{max(values):,.0f}) |"
        )


if __name__ == "__main__":
    main()
