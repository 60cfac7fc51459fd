"""Enqueue throughput: single-job transactions (1 and 8 threads) and bulk (100k jobs).

    python -m benchmarks.enqueue [--dsn DSN] [--runs 3]

Prints the median of the runs with min and max.
"""

from __future__ import annotations

import argparse
import threading
import time

from benchmarks.common import fmt, fresh_database, machine, median_of, server
from pgqueue import PgQueue

pgq_tasks = PgQueue()


@pgq_tasks.task(name="bench.send_email", queue="emails")
def send_email(to: str) -> None: ...


def single(dsn: str, threads: int, per_thread: int) -> float:
    app = PgQueue(dsn, pool_size=threads)
    app.tasks.update(pgq_tasks.tasks)
    task = send_email.options()
    barrier = threading.Barrier(threads + 1)

    def producer() -> None:
        barrier.wait()
        for i in range(per_thread):
            app.enqueue_spec(task.s(f"user{i}@example.com").spec())

    workers = [threading.Thread(target=producer) for _ in range(threads)]
    for w in workers:
        w.start()
    app.enqueue("warm.up", {})  # open the pool before the clock starts
    barrier.wait()
    started = time.perf_counter()
    for w in workers:
        w.join()
    elapsed = time.perf_counter() - started
    app.close()
    return threads * per_thread / elapsed


def bulk(dsn: str, count: int) -> float:
    app = PgQueue(dsn)
    calls = [send_email.s(f"user{i}@example.com") for i in range(count)]
    app.enqueue("warm.up", {})
    started = time.perf_counter()
    app.enqueue_many(calls)
    elapsed = time.perf_counter() - started
    app.close()
    return count / elapsed


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--dsn", help="server to measure (default: a new embedded one)")
    parser.add_argument("--runs", type=int, default=3)
    args = parser.parse_args()
    with server(args.dsn) as admin:
        db = fresh_database(admin, "pgqueue_bench_enqueue")
        print(f"machine: {machine(db)}")
        results = {
            "single-job transactions, 1 thread": median_of(args.runs, lambda: single(db, 1, 3000)),
            "single-job transactions, 8 threads": median_of(args.runs, lambda: single(db, 8, 1000)),
            "bulk enqueue_many, 100,000 jobs": median_of(args.runs, lambda: bulk(db, 100_000)),
            "bulk enqueue_many, 10,000 jobs": median_of(args.runs, lambda: bulk(db, 10_000)),
        }
        for name, stats in results.items():
            print(f"{name:<40} {fmt(stats)}")
        ten_k = results["bulk enqueue_many, 10,000 jobs"][0]
        print(f"{'10,000 jobs in one call takes':<40} {10_000 / ten_k * 1000:.0f} ms (median)")


if __name__ == "__main__":
    main()
