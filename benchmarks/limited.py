"""Limited tasks: how much of a limit is in use while jobs wait behind it, with real `pgq work`
processes (figures for docs/benchmarks.md).

    python -m benchmarks.limited [--dsn DSN] [--runs 3] [--workers 2] [--concurrency 8]

1. concurrency limit: a task with ``concurrency_limit=3``, 150 jobs of 200 ms (10 s of work);
2. concurrency keys: 4 keys x 40 jobs of 200 ms, ``key_limit=1`` (4 places in all, 8 s);
3. rate limit: 50/s with a burst of 5, 500 no-op jobs (10 s).

Every job waits from the start, so the limit should be in full use from the first job started
to the last. Measured from the handlers' 'start'/'end' rows (database clock): for concurrency
limits, the running jobs' time over that window divided by places x window (the gap between a
job's end and the start of the job taking its place, ack and claim included, counts as unused);
for the rate limit, the starts over what the bucket allows in that window (burst + rate x
window). Also printed: the wall time against the ideal, and the jobs each process ran.
"""

from __future__ import annotations

import argparse
import os
import statistics
import subprocess
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import psycopg

from benchmarks.common import fresh_database, machine, server
from benchmarks.limited_tasks import CONCURRENCY_LIMIT, EVENTS_DDL, KEY_LIMIT, RATE
from benchmarks.worker import stop
from pgqueue import PgQueue

ROOT = Path(__file__).resolve().parent.parent
APP = "benchmarks.limited_tasks:pgq"
SECONDS = 0.2
CAPPED_JOBS = 150
KEYS, PER_KEY = 4, 40
RATED_JOBS = 500


def start(dsn: str, count: int, concurrency: int) -> list[subprocess.Popen[bytes]]:
    env = {**os.environ, "PGQUEUE_DSN": dsn}
    command = [
        sys.executable, "-m", "pgqueue.cli", "work", APP, "--log-level", "WARNING",
        "--concurrency", str(concurrency),
    ]  # fmt: skip
    return [subprocess.Popen(command, cwd=ROOT, env=env) for _ in range(count)]


def events(dsn: str) -> list[tuple[int, str, float, int]]:
    """(job id, event, seconds since the first start, pid) of every row, by time."""
    with psycopg.connect(dsn) as conn:
        rows = conn.execute(
            "SELECT job_id, event, extract(epoch FROM at - min(at) OVER ()), pid"
            " FROM bench_limited ORDER BY at"
        ).fetchall()
    return [(int(r[0]), str(r[1]), float(r[2]), int(r[3])) for r in rows]


def run(
    admin: str, workers: int, concurrency: int, done: int, enqueue: Callable[[PgQueue], None]
) -> list[tuple[int, str, float, int]]:
    dsn = fresh_database(admin, "bench_limited")
    with psycopg.connect(dsn) as conn:
        conn.execute(EVENTS_DDL)
    app = PgQueue(dsn)
    enqueue(app)
    app.close()
    fleet = start(dsn, workers, concurrency)
    deadline = time.monotonic() + 300
    try:
        with psycopg.connect(dsn, autocommit=True) as conn:
            while (conn.execute("SELECT count(*) FROM bench_limited").fetchone() or [0])[0] < done:
                if time.monotonic() > deadline:
                    raise TimeoutError("jobs did not finish")
                time.sleep(0.05)
    finally:
        stop(fleet)
    return events(dsn)


def places_in_use(rows: list[tuple[int, str, float, int]], places: int) -> dict[str, Any]:
    starts = {job: at for job, event, at, _ in rows if event == "start"}
    ends = {job: at for job, event, at, _ in rows if event == "end"}
    window = max(starts.values()) - min(starts.values())
    busy = sum(min(ends[job], window) - at for job, at in starts.items() if at < window)
    total = max(ends.values()) - min(starts.values())
    return {
        "used": busy / (places * window) if window > 0 else float("nan"),
        "wall": total,
        "ideal": len(starts) * SECONDS / places,
        "processes": sorted(
            sum(1 for _, event, _, pid in rows if event == "start" and pid == p)
            for p in {pid for *_, pid in rows}
        ),
    }


def capped(admin: str, workers: int, concurrency: int) -> dict[str, Any]:
    def enqueue(app: PgQueue) -> None:
        app.enqueue_many(
            [app.spec("limited.capped", {"seconds": SECONDS}, {}) for _ in range(CAPPED_JOBS)]
        )

    rows = run(admin, workers, concurrency, 2 * CAPPED_JOBS, enqueue)
    return places_in_use(rows, CONCURRENCY_LIMIT)


def keyed(admin: str, workers: int, concurrency: int) -> dict[str, Any]:
    def enqueue(app: PgQueue) -> None:
        app.enqueue_many(
            [
                app.spec("limited.keyed", {"seconds": SECONDS}, {"concurrency_key": f"k{k}"})
                for k in range(KEYS)
                for _ in range(PER_KEY)
            ]
        )

    rows = run(admin, workers, concurrency, 2 * KEYS * PER_KEY, enqueue)
    return places_in_use(rows, KEYS * KEY_LIMIT)


def rated(admin: str, workers: int, concurrency: int) -> dict[str, Any]:
    def enqueue(app: PgQueue) -> None:
        app.enqueue_many([app.spec("limited.rated", {}, {}) for _ in range(RATED_JOBS)])

    rows = run(admin, workers, concurrency, RATED_JOBS, enqueue)
    window = rows[-1][2] - rows[0][2]
    allowed = RATE.bucket + RATE.rate * window
    return {
        "used": len(rows) / allowed,
        "wall": window,
        "ideal": (len(rows) - RATE.bucket) / RATE.rate,
        "processes": sorted(
            sum(1 for *_, pid in rows if pid == p) for p in {pid for *_, pid in rows}
        ),
    }


WORKLOADS: dict[str, tuple[str, Callable[[str, int, int], dict[str, Any]]]] = {
    "cap": (f"concurrency limit {CONCURRENCY_LIMIT}, {CAPPED_JOBS} jobs of 200 ms", capped),
    "keys": (f"{KEYS} keys x {PER_KEY} jobs of 200 ms, key limit {KEY_LIMIT}", keyed),
    "rate": (f"rate limit {RATE.rate:g}/s burst {RATE.bucket:g}, {RATED_JOBS} jobs", rated),
}


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--dsn")
    parser.add_argument("--runs", type=int, default=3)
    parser.add_argument("--workers", type=int, default=2)
    parser.add_argument("--concurrency", type=int, default=8)
    parser.add_argument("--only", help=f"comma-separated subset of {','.join(WORKLOADS)}")
    args = parser.parse_args()
    chosen = args.only.split(",") if args.only else list(WORKLOADS)
    with server(args.dsn) as admin:
        print(
            f"machine: {machine(admin)}; {args.workers} processes x {args.concurrency} slots",
            flush=True,
        )
        print("| workload | limit in use while jobs wait | wall time (ideal) | jobs per process |")
        print("|---|---|---|---|")
        for name in chosen:
            label, measure = WORKLOADS[name]
            results = [measure(admin, args.workers, args.concurrency) for _ in range(args.runs)]
            used = [r["used"] for r in results]
            walls = [r["wall"] for r in results]
            print(
                f"| {label} | {statistics.median(used) * 100:.1f} % "
                f"({min(used) * 100:.1f}-{max(used) * 100:.1f}) | "
                f"{statistics.median(walls):.2f} s ({results[0]['ideal']:.2f} s) | "
                f"{' / '.join('+'.join(map(str, r['processes'])) for r in results)} |",
                flush=True,
            )


if __name__ == "__main__":
    main()
