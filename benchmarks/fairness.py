"""Tenant fairness: how long one tenant's lone job waits behind another tenant's flood, in a
queue served first come first served (FIFO) and in a fair queue, and what fairness costs
(figures for docs/benchmarks.md).

    python -m benchmarks.fairness [--dsn DSN] [--runs 3] [--flood 100000] [--jobs 20000]
                                  [--workers 2] [--concurrency 8] [--only pickup,drain,enqueue]

1. pickup: ``--flood`` no-op jobs wait in queue ``tenants``, all of tenant A (1 key) or spread
   over 1,000 tenants (key by key); ``--workers`` `pgq work` processes start; once 1,000 flood
   jobs were claimed, one job of tenant B is enqueued. Its pickup latency (claimed minus
   enqueued, both by the database clock) and the flood jobs claimed between its enqueue and
   its claim (from ``started_at``, every finished job recorded in ``job_history``), FIFO
   against fair (``configure_queue(fair=True)``), runs interleaved. Every job has a key (its
   tenant) in both modes, so both take the flow-controlled claim; only the order differs.
2. drain: jobs/s draining ``--jobs`` no-op jobs with ``pgq work --burst`` processes (first job
   taken to last job gone): no key (the plain claim_jobs statement), keyed FIFO, fair with one
   key, fair with 1,000 keys.
3. enqueue: one job per transaction (2,000 jobs) and one bulk enqueue of ``--flood`` jobs, in
   jobs/s: no key in a plain queue, no key in a fair queue, keyed in a plain queue, keyed in
   a fair queue. Commits do not wait for the WAL flush here (``synchronous_commit=off`` on
   the producer's connections), so the figures compare the statements' work, not the disk.
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
from psycopg.conninfo import make_conninfo

from benchmarks.common import fresh_database, machine, server
from benchmarks.fairness_tasks import EVENTS_DDL, PROBE, QUEUE
from benchmarks.worker import stop
from pgqueue import PgQueue
from pgqueue.rules.job_specs import JobSpec

ROOT = Path(__file__).resolve().parent.parent
APP = "benchmarks.fairness_tasks:pgq"
WARM = 1_000  # flood jobs claimed before the probe is enqueued
SINGLE = 2_000


def start(dsn: str, workers: int, concurrency: int, *extra: str) -> list[subprocess.Popen[bytes]]:
    env = {**os.environ, "PGQUEUE_DSN": dsn}
    command = [
        sys.executable, "-m", "pgqueue.cli", "work", APP, "--log-level", "WARNING",
        "--concurrency", str(concurrency), "--queue", QUEUE, *extra,
    ]  # fmt: skip
    return [subprocess.Popen(command, cwd=ROOT, env=env) for _ in range(workers)]


def count(conn: psycopg.Connection[Any], sql: str) -> int:
    row = conn.execute(sql).fetchone()
    return int(row[0]) if row else 0


def tenants(keys: int) -> list[str]:
    return ["tenant-a"] if keys == 1 else [f"tenant-{i:04d}" for i in range(keys)]


def flood(app: PgQueue, jobs: int, keys: int | None) -> list[JobSpec]:
    """``jobs`` no-op jobs, key by key (None: no key, the plain task)."""
    if keys is None:
        return [
            app.spec("fairness.plain", {"tenant": "tenant-a"}, {"queue": QUEUE})
            for _ in range(jobs)
        ]
    return [
        app.spec("fairness.work", {"tenant": tenant}, {"concurrency_key": tenant, "queue": QUEUE})
        for tenant in tenants(keys)
        for _ in range(jobs // keys)
    ]


def database(admin: str, fair: bool) -> tuple[str, PgQueue]:
    dsn = fresh_database(admin, "bench_fairness")
    with psycopg.connect(dsn) as conn:
        conn.execute(EVENTS_DDL)
    app = PgQueue(dsn)
    if fair:
        app.flow.configure_queue(QUEUE, fair=True)
    return dsn, app


def pickup(
    admin: str, fair: bool, keys: int, jobs: int, workers: int, concurrency: int
) -> dict[str, float]:
    dsn, app = database(admin, fair)
    try:
        app.retention.set(record_succeeded=True)  # every job's started_at, for the count
        app.enqueue_many(flood(app, jobs, keys))
        with psycopg.connect(dsn, autocommit=True) as conn:
            conn.execute("VACUUM ANALYZE pgqueue.jobs")
            fleet = start(dsn, workers, concurrency)
            try:
                ready = "SELECT count(*) FROM pgqueue.jobs WHERE state = 'ready'"
                while count(conn, ready) > jobs - WARM:
                    time.sleep(0.02)
                with psycopg.connect(dsn) as tx, tx.transaction():
                    app.enqueue(
                        "fairness.work",
                        {"tenant": PROBE},
                        concurrency_key=PROBE,
                        queue=QUEUE,
                        conn=tx,
                    )
                deadline = time.monotonic() + 900
                while not count(conn, "SELECT count(*) FROM bench_fairness"):
                    if time.monotonic() > deadline:
                        raise TimeoutError("the probe job never started")
                    time.sleep(0.01)
                row = conn.execute(
                    "SELECT extract(epoch FROM b.started_at - b.created_at),"
                    "       (SELECT count(*) FROM (SELECT started_at FROM pgqueue.job_history"
                    "                              UNION ALL"
                    "                              SELECT started_at FROM pgqueue.jobs) AS f"
                    "         WHERE f.started_at > b.created_at AND f.started_at < b.started_at)"
                    "  FROM bench_fairness AS b"
                ).fetchone()
                assert row is not None
            finally:
                stop(fleet)
    finally:
        app.close()
    return {"latency": float(row[0]), "before": float(row[1])}


def drain(admin: str, kind: str, jobs: int, workers: int, concurrency: int) -> float:
    keys = {"plain": None, "keyed": 1, "fair, 1 key": 1, "fair, 1,000 keys": 1000}[kind]
    dsn, app = database(admin, kind.startswith("fair"))
    try:
        app.enqueue_many(flood(app, jobs, keys))
    finally:
        app.close()
    with psycopg.connect(dsn, autocommit=True) as conn:
        conn.execute("VACUUM ANALYZE pgqueue.jobs")
        fleet = start(dsn, workers, concurrency, "--burst")
        left = "SELECT count(*) FROM pgqueue.jobs"
        while count(conn, left) == jobs:
            time.sleep(0.002)
        started = time.perf_counter()
        while count(conn, left) > 0:
            time.sleep(0.01)
        elapsed = time.perf_counter() - started
    for worker in fleet:
        worker.wait(60)
    return jobs / elapsed


ENQUEUE_KINDS = {
    # name: (fair queue, key)
    "no key, plain queue": (False, None),
    "no key, fair queue": (True, None),
    "keyed, plain queue": (False, "tenant-a"),
    "keyed, fair queue": (True, "tenant-a"),
}


def enqueue(admin: str, kind: str, bulk: int) -> tuple[float, float]:
    """(single enqueues per second, bulk-enqueued jobs per second)."""
    fair, key = ENQUEUE_KINDS[kind]
    dsn, setup = database(admin, fair)
    setup.close()
    app = PgQueue(make_conninfo(dsn, options="-c synchronous_commit=off"))
    try:
        options = {"queue": QUEUE, **({"concurrency_key": key} if key else {})}
        spec = app.spec("fairness.work", {"tenant": "tenant-a"}, options)
        app.enqueue_spec(spec)  # the pool's connection is open
        started = time.perf_counter()
        for _ in range(SINGLE):
            app.enqueue_spec(spec)
        single = SINGLE / (time.perf_counter() - started)
        specs = [spec] * bulk
        started = time.perf_counter()
        app.enqueue_many(specs)
        many = bulk / (time.perf_counter() - started)
    finally:
        app.close()
    return single, many


def spread(values: list[float], unit: str, digits: int = 0) -> str:
    return (
        f"{statistics.median(values):,.{digits}f} {unit} "
        f"(min {min(values):,.{digits}f}, max {max(values):,.{digits}f})"
    )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--dsn", help="admin DSN of the server (default: a new embedded one)")
    parser.add_argument("--runs", type=int, default=3)
    parser.add_argument("--flood", type=int, default=100_000)
    parser.add_argument("--jobs", type=int, default=20_000)
    parser.add_argument("--workers", type=int, default=2)
    parser.add_argument("--concurrency", type=int, default=8)
    parser.add_argument("--only", default="pickup,drain,enqueue")
    args = parser.parse_args()
    parts = set(args.only.split(","))
    with server(args.dsn) as admin:
        print(machine(admin))
        print(
            f"{args.workers} `pgq work` processes x {args.concurrency} slots, "
            f"{args.runs} runs interleaved; flood {args.flood:,} jobs, drain {args.jobs:,}\n"
        )
        if "pickup" in parts:
            print("| flood | order | B's pickup latency (s) | flood jobs claimed before B |")
            print("|---|---|---|---|")
            for keys in (1, 1000):
                found: dict[bool, list[dict[str, float]]] = {False: [], True: []}
                for _ in range(args.runs):
                    for fair in (False, True):
                        found[fair].append(
                            pickup(admin, fair, keys, args.flood, args.workers, args.concurrency)
                        )
                for fair in (False, True):
                    runs = found[fair]
                    who = "1 tenant" if keys == 1 else f"{keys:,} tenants"
                    print(
                        f"| {args.flood:,} jobs of {who} | {'fair' if fair else 'FIFO'}"
                        f" | {spread([r['latency'] for r in runs], 's', 3)}"
                        f" | {spread([r['before'] for r in runs], '')} |"
                    )
            print()
        if "drain" in parts:
            kinds = ("plain", "keyed", "fair, 1 key", "fair, 1,000 keys")
            rates: dict[str, list[float]] = {kind: [] for kind in kinds}
            for _ in range(args.runs):
                for kind in kinds:
                    rates[kind].append(
                        drain(admin, kind, args.jobs, args.workers, args.concurrency)
                    )
            print(f"| drain {args.jobs:,} no-op jobs | jobs/s | against no key |")
            print("|---|---|---|")
            base = statistics.median(rates["plain"])
            for kind in kinds:
                print(
                    f"| {kind} | {spread(rates[kind], '')}"
                    f" | {statistics.median(rates[kind]) / base:.2f} |"
                )
            print()
        if "enqueue" in parts:
            measures: dict[str, list[tuple[float, float]]] = {k: [] for k in ENQUEUE_KINDS}
            for _ in range(args.runs):
                for kind in ENQUEUE_KINDS:
                    measures[kind].append(enqueue(admin, kind, args.flood))
            print(f"| enqueue | 1 job per transaction (jobs/s) | bulk {args.flood:,} (jobs/s) |")
            print("|---|---|---|")
            for kind, values in measures.items():
                print(
                    f"| {kind} | {spread([v[0] for v in values], '')}"
                    f" | {spread([v[1] for v in values], '')} |"
                )


if __name__ == "__main__":
    main()
