"""Table sizes over a long run: N jobs through real workers with history retention on.

    python -m benchmarks.retention [--dsn DSN] [--jobs 1000000] [--workers 1] [--concurrency 64]
                                   [--history 60] [--prune-interval 10] [--backlog 100000]

The producer keeps a bounded backlog (like a live system, not one giant batch) while worker
processes drain it. Every succeeded job is recorded in job_history (record_succeeded on) and
kept ``--history`` seconds; the workers' pruners delete expired rows in small batches. Printed:
the hot table's total size (pgqueue.jobs with its indexes and TOAST) and job_history's, before,
during (every 10 % of the run) and after, plus the rate. Autovacuum runs with stock settings; no
manual VACUUM is done until the final "after VACUUM" line.
"""

from __future__ import annotations

import argparse
import signal
import subprocess
import time
from typing import Any

import psycopg

from benchmarks.common import fresh_database, machine, server
from benchmarks.worker import start_workers
from pgqueue import PgQueue

SIZES = """
SELECT pg_total_relation_size('pgqueue.jobs'),
       pg_total_relation_size('pgqueue.job_history'),
       (SELECT count(*) FROM pgqueue.jobs),
       (SELECT count(*) FROM pgqueue.job_history),
       (SELECT coalesce(sum(autovacuum_count), 0) FROM pg_stat_user_tables
         WHERE schemaname = 'pgqueue' AND relname = 'jobs')
"""


def mib(size: int) -> str:
    return f"{size / 1024 / 1024:,.2f} MiB"


def sizes(conn: psycopg.Connection[Any]) -> tuple[int, int, int, int, int]:
    row = conn.execute(SIZES).fetchone()
    assert row is not None
    return row[0], row[1], row[2], row[3], row[4]


def report(label: str, conn: psycopg.Connection[Any]) -> tuple[int, int]:
    hot, history, live, kept, vacuums = sizes(conn)
    print(
        f"{label:<28} hot table {mib(hot):>12} ({live:>7,} live rows)   "
        f"job_history {mib(history):>12} ({kept:>9,} rows)   autovacuums of jobs: {vacuums}",
        flush=True,
    )
    return hot, history


def run(args: argparse.Namespace) -> None:
    with server(args.dsn) as admin:
        db = fresh_database(admin, "pgqueue_bench_retention")
        print(f"machine: {machine(db)}")
        print(
            f"{args.jobs:,} no-op jobs, {args.workers} worker process(es) x {args.concurrency}, "
            f"backlog <= {args.backlog:,}, every succeeded job recorded, history kept "
            f"{args.history:g}s, pruned every {args.prune_interval:g}s"
        )
        app = PgQueue(db)
        app.retention.set(record_succeeded=True, history=args.history)
        conn = psycopg.connect(db, autocommit=True)
        for table, options in args.autovacuum:
            conn.execute(f"ALTER TABLE pgqueue.{table} SET ({options})")  # trusted CLI input
        conn.execute("VACUUM ANALYZE pgqueue.jobs")
        report("before", conn)
        workers = start_workers(
            db,
            args.workers,
            args.concurrency,
            "--prune-interval",
            f"{args.prune_interval}s",
        )
        enqueued = 0
        next_report = args.jobs // 10
        started = time.perf_counter()
        try:
            while enqueued < args.jobs:
                live = conn.execute("SELECT count(*) FROM pgqueue.jobs").fetchone()
                backlog = int(live[0]) if live else 0
                done = enqueued - backlog
                if done >= next_report:
                    report(f"{done:>9,} jobs through", conn)
                    next_report += args.jobs // 10
                if backlog < args.backlog // 2:
                    chunk = min(args.chunk, args.jobs - enqueued)
                    app.enqueue_many([app.spec("bench.noop", {}, {}) for _ in range(chunk)])
                    enqueued += chunk
                else:
                    time.sleep(0.05)
            while True:
                live = conn.execute("SELECT count(*) FROM pgqueue.jobs").fetchone()
                if not live or live[0] == 0:
                    break
                time.sleep(0.05)
            elapsed = time.perf_counter() - started
            report(f"{args.jobs:>9,} jobs through", conn)
            print(f"throughput: {args.jobs / elapsed:,.0f} jobs/s over {elapsed:,.0f}s")
            # Let the pruners catch up with the last retention window.
            time.sleep(args.history + 2 * args.prune_interval)
            report("after retention window", conn)
        finally:
            for worker in workers:
                worker.send_signal(signal.SIGTERM)
            for worker in workers:
                try:
                    worker.wait(60)
                except subprocess.TimeoutExpired:
                    worker.kill()
            app.close()
        conn.execute("VACUUM pgqueue.jobs")
        conn.execute("VACUUM pgqueue.job_history")
        report("after VACUUM", conn)
        conn.close()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--dsn")
    parser.add_argument("--jobs", type=int, default=1_000_000)
    parser.add_argument("--workers", type=int, default=1)
    parser.add_argument("--concurrency", type=int, default=64)
    parser.add_argument("--backlog", type=int, default=100_000)
    parser.add_argument("--chunk", type=int, default=20_000)
    parser.add_argument("--history", type=float, default=60.0, help="seconds of history kept")
    parser.add_argument("--prune-interval", type=float, default=10.0)
    parser.add_argument(
        "--autovacuum",
        nargs=2,
        action="append",
        default=[],
        metavar=("TABLE", "OPTIONS"),
        help="extra storage options, e.g. jobs 'autovacuum_vacuum_cost_delay = 0'",
    )
    run(parser.parse_args())


if __name__ == "__main__":
    main()
