"""Flow control, measured with real `pgq work` processes (figures for docs/benchmarks.md).

    python -m benchmarks.flow [--dsn DSN] [--workers 4]

1. concurrency limit: task capped at 3, 4 processes x 16 slots; running jobs sampled in SQL.
2. concurrency keys: 10 keys, 20 jobs each, key limit 1; most running per key.
3. rate limit: 20/s, burst 40, 4 processes; starts in the first 10 s and the steady rate.
4. fair share: queues weighted 80/20, a flood in the heavy one; the light queue's share.
5. cron: 4 processes, 5 per-second schedules for 30 s; duplicate and missing ticks.
6. delayed jobs: idle workers, jobs due 0.2-2 s ahead; lateness past run_at (database clock).
7. backpressure: single-job enqueue into a queue bounded at 10,000 (5,000 waiting) vs unbounded.
8. circuit breaker: always-failing jobs; attempts, trips, jobs left waiting.
9. autoscaling: one process with --concurrency 4:64 under a backlog, then idle.
"""

from __future__ import annotations

import argparse
import os
import random
import statistics
import subprocess
import sys
import threading
import time
from pathlib import Path
from typing import Any

import psycopg

from benchmarks.common import fresh_database, machine, server
from benchmarks.flow_tasks import EVENTS_DDL
from benchmarks.worker import stop
from pgqueue import PgQueue

ROOT = Path(__file__).resolve().parent.parent
APP = "benchmarks.flow_tasks:pgq"


def start(dsn: str, count: int, *args: str) -> list[subprocess.Popen[bytes]]:
    env = {**os.environ, "PGQUEUE_DSN": dsn}
    command = [sys.executable, "-m", "pgqueue.cli", "work", APP, "--log-level", "WARNING", *args]
    return [subprocess.Popen(command, cwd=ROOT, env=env) for _ in range(count)]


def fresh(admin: str, name: str) -> str:
    dsn = fresh_database(admin, name)
    with psycopg.connect(dsn) as conn:
        conn.execute(EVENTS_DDL)
    return dsn


def wait_until(dsn: str, sql: str, params: Any = None, timeout: float = 120.0) -> None:
    deadline = time.monotonic() + timeout
    with psycopg.connect(dsn, autocommit=True) as conn:
        while not (conn.execute(sql, params).fetchone() or [False])[0]:
            if time.monotonic() > deadline:
                raise TimeoutError(sql)
            time.sleep(0.05)


def sample_peak(dsn: str, sql: str, stop_event: threading.Event, out: list[int]) -> None:
    with psycopg.connect(dsn, autocommit=True) as conn:
        while not stop_event.is_set():
            row = conn.execute(sql).fetchone()
            out.append(int(row[0] or 0) if row else 0)
            stop_event.wait(0.005)


def run_with_sampler(dsn: str, sql: str, workers: int, done_sql: str, *args: str) -> int:
    peaks: list[int] = []
    stop_event = threading.Event()
    sampler = threading.Thread(target=sample_peak, args=(dsn, sql, stop_event, peaks))
    sampler.start()
    fleet = start(dsn, workers, *args)
    try:
        wait_until(dsn, done_sql)
    finally:
        stop_event.set()
        sampler.join()
        stop(fleet)
    return max(peaks)


def concurrency_limit(admin: str, workers: int) -> str:
    dsn = fresh(admin, "bench_flow_cap")
    app = PgQueue(dsn)
    app.enqueue_many([app.spec("flow.capped", {"seconds": 0.05}, {}) for _ in range(300)])
    app.close()
    peak = run_with_sampler(
        dsn,
        "SELECT count(*) FROM pgqueue.jobs WHERE state = 'running' AND task = 'flow.capped'",
        workers,
        "SELECT count(*) = 300 FROM bench_events",
        "--concurrency",
        "16",
    )
    return (
        f"concurrency limit 3 (task), {workers} processes x 16 slots, 300 jobs of 50 ms: "
        f"observed max running {peak}"
    )


def concurrency_keys(admin: str, workers: int) -> str:
    dsn = fresh(admin, "bench_flow_keys")
    app = PgQueue(dsn)
    app.enqueue_many(
        [
            app.spec("flow.keyed", {"seconds": 0.02}, {"concurrency_key": f"customer:{k}"})
            for k in range(10)
            for _ in range(20)
        ]
    )
    app.close()
    peak = run_with_sampler(
        dsn,
        "SELECT max(n) FROM (SELECT count(*) AS n FROM pgqueue.jobs WHERE state = 'running'"
        " GROUP BY concurrency_key) AS s",
        workers,
        "SELECT count(*) = 200 FROM bench_events",
        "--concurrency",
        "16",
    )
    return (
        f"concurrency keys (limit 1 per key), 10 keys x 20 jobs, {workers} processes: "
        f"observed max running per key {peak}"
    )


def rate_limit(admin: str, workers: int) -> str:
    dsn = fresh(admin, "bench_flow_rate")
    app = PgQueue(dsn)
    app.enqueue_many([app.spec("flow.rated", {}, {}) for _ in range(600)])
    app.close()
    fleet = start(dsn, workers, "--concurrency", "16")
    try:
        wait_until(
            dsn, "SELECT coalesce(max(at) - min(at) > interval '12.5 s', false) FROM bench_events"
        )
    finally:
        stop(fleet)
    with psycopg.connect(dsn) as conn:
        first10, steady = conn.execute(
            "WITH s AS (SELECT extract(epoch FROM at - min(at) OVER ()) AS t FROM bench_events)"
            " SELECT count(*) FILTER (WHERE t < 10),"
            " count(*) FILTER (WHERE t >= 2.5 AND t < 12.5) / 10.0 FROM s"
        ).fetchone()  # type: ignore[misc]
    return (
        f"rate limit 20/s burst 40, {workers} processes: {first10} starts in the first 10 s "
        f"(bucket allows at most 40 + 20 x 10 = 240); steady rate {float(steady):.1f}/s "
        "over the next 10 s (configured 20/s)"
    )


def fair_share(admin: str, workers: int) -> str:
    dsn = fresh(admin, "bench_flow_fair")
    app = PgQueue(dsn)
    app.flow.configure_queue("heavy", weight=80)
    app.flow.configure_queue("light", weight=20)
    app.enqueue_many([app.spec("flow.hold", {}, {"queue": "heavy"}) for _ in range(3000)])
    app.enqueue_many([app.spec("flow.hold", {}, {"queue": "light"}) for _ in range(1000)])
    app.close()
    fleet = start(dsn, workers, "--queue", "heavy,light", "--concurrency", "16")
    try:
        wait_until(dsn, "SELECT count(*) >= 2000 FROM bench_events")
    finally:
        stop(fleet)
    with psycopg.connect(dsn) as conn:
        share = conn.execute(
            "SELECT avg((note = 'light')::int) FROM"
            " (SELECT note FROM bench_events ORDER BY at LIMIT 2000) AS s"
        ).fetchone()[0]
    return (
        f"fair share, queues weighted 80/20, flood of 3,000 jobs in the heavy queue, "
        f"{workers} processes: light queue got {float(share) * 100:.1f} % of the first 2,000 "
        "starts (configured 20 %; plain priority order would give it 0 %)"
    )


def cron(admin: str, workers: int, seconds: float = 30.0) -> str:
    dsn = fresh(admin, "bench_flow_cron")
    app = PgQueue(dsn)
    for i in range(5):
        app.cron.schedule(
            f"tick{i}", "* * * * * *", "flow.tick", {"schedule": f"tick{i}"}, queue="cron"
        )
    app.close()
    fleet = start(dsn, workers, "--queue", "cron")
    time.sleep(seconds)
    stop(fleet)
    with psycopg.connect(dsn) as conn:
        ran, distinct = conn.execute(
            "SELECT count(*), count(DISTINCT note) FROM bench_events"
        ).fetchone() or (0, 0)
        # Per schedule: seconds covered between its first and last tick that ran, vs ticks.
        missing = conn.execute(
            "SELECT coalesce(sum(span - n), 0) FROM (SELECT split_part(note, '|', 1),"
            " extract(epoch FROM max(split_part(note, '|', 2)::timestamptz)"
            "  - min(split_part(note, '|', 2)::timestamptz))::int + 1 AS span,"
            " count(DISTINCT note) AS n FROM bench_events GROUP BY 1) AS s"
        ).fetchone()
        enqueued = conn.execute("SELECT sum(ticks_enqueued) FROM pgqueue.schedules").fetchone()
    return (
        f"cron, 5 per-second schedules, {workers} processes, {seconds:.0f} s: "
        f"{enqueued[0] if enqueued else 0} ticks enqueued, {ran} ran, duplicates {ran - distinct}, "
        f"missing {missing[0] if missing else '?'}"
    )


def delayed(admin: str, workers: int, jobs: int = 60) -> str:
    dsn = fresh(admin, "bench_flow_delayed")
    fleet = start(dsn, workers, "--poll-interval", "60s")
    app = PgQueue(dsn)
    try:
        time.sleep(2.0)  # idle, listening
        rng = random.Random(7)
        for _ in range(jobs):
            app.enqueue("flow.delayed", {}, delay=rng.uniform(0.2, 2.0))
            time.sleep(0.1)
        wait_until(dsn, "SELECT count(*) = %s FROM bench_events", (jobs,))
    finally:
        app.close()
        stop(fleet)
    with psycopg.connect(dsn) as conn:
        late = sorted(
            float(r[0]) * 1000
            for r in conn.execute(
                "SELECT extract(epoch FROM at - note::timestamptz) FROM bench_events"
            ).fetchall()
        )
    p99 = late[min(len(late) - 1, int(len(late) * 0.99))]
    return (
        f"delayed jobs due 0.2-2 s ahead, {workers} idle processes (poll interval 60 s): "
        f"started after run_at by p50 {statistics.median(late):.1f} ms, p99 {p99:.1f} ms, "
        f"max {late[-1]:.1f} ms ({jobs} jobs)"
    )


def backpressure(admin: str, jobs: int = 2000) -> str:
    dsn = fresh(admin, "bench_flow_depth")
    app = PgQueue(dsn)
    app.flow.configure_queue("bounded", max_depth=10_000)
    app.enqueue_many([app.spec("flow.hold", {}, {"queue": q}) for q in ("bounded", "free")
                      for _ in range(5000)])  # fmt: skip
    rates: dict[str, float] = {}
    for queue in ("free", "bounded", "free", "bounded"):
        started = time.perf_counter()
        for _ in range(jobs):
            app.enqueue("flow.hold", {}, queue=queue)
        rates[queue] = jobs / (time.perf_counter() - started)
    app.close()
    return (
        f"backpressure: single-job enqueue into a queue bounded at 10,000 with 5,000+ waiting "
        f"{rates['bounded']:,.0f} jobs/s vs unbounded {rates['free']:,.0f} jobs/s"
    )


def breaker(admin: str, workers: int, seconds: float = 12.0) -> str:
    dsn = fresh(admin, "bench_flow_breaker")
    app = PgQueue(dsn)
    app.enqueue_many([app.spec("flow.fragile", {}, {}) for _ in range(500)])
    app.close()
    fleet = start(dsn, workers, "--concurrency", "16")
    time.sleep(seconds)
    stop(fleet)
    with psycopg.connect(dsn) as conn:
        ran, trips, waiting = conn.execute(
            "SELECT (SELECT count(*) FROM bench_events),"
            " (SELECT trips FROM pgqueue.circuit_breakers WHERE task = 'flow.fragile'),"
            " (SELECT count(*) FROM pgqueue.jobs WHERE state = 'ready')"
        ).fetchone() or (0, 0, 0)
    return (
        f"circuit breaker (opens at 50 % failures of >= 5 calls, cooldown 2 s), 500 always-failing "
        f"jobs, {workers} processes x 16, {seconds:.0f} s: {ran} attempts ran ({trips} trips: "
        f"one probe per cooldown after the first), {waiting} jobs still waiting, none failed "
        "because of the open breaker"
    )


def autoscale(admin: str) -> str:
    dsn = fresh(admin, "bench_flow_scale")
    app = PgQueue(dsn)
    app.enqueue_many([app.spec("flow.hold", {"seconds": 0.2}, {}) for _ in range(6000)])
    app.close()
    fleet = start(dsn, 1, "--concurrency", "4:64", "--scale-cooldown", "5s")
    samples: list[tuple[float, int, int]] = []
    began = time.monotonic()
    try:
        with psycopg.connect(dsn, autocommit=True) as conn:
            while time.monotonic() - began < 120:
                row = conn.execute(
                    "SELECT (SELECT max(concurrency) FROM pgqueue.workers),"
                    " (SELECT count(*) FROM pgqueue.jobs)"
                ).fetchone()
                if row and row[0] is not None:
                    samples.append((time.monotonic() - began, int(row[0]), int(row[1])))
                    if row[1] == 0 and row[0] == 4:
                        break
                time.sleep(0.2)
    finally:
        stop(fleet)
    top = max(n for _, n, _ in samples)
    reached = next(t for t, n, _ in samples if n == top)
    drained = next((t for t, _, left in samples if left == 0), None)
    back = samples[-1][0] if samples[-1][1] == 4 else None
    return (
        f"autoscaling --concurrency 4:64 (cooldown 5 s), 6,000 jobs of 200 ms: slots grew to "
        f"{top} in {reached:.1f} s (heartbeat-reported), backlog drained at {drained or 0:.1f} s, "
        f"back to 4 slots at {back or 0:.1f} s"
    )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--dsn")
    parser.add_argument("--workers", type=int, default=4)
    parser.add_argument(
        "--only", help="comma-separated: cap,keys,rate,fair,cron,delayed,depth,breaker,scale"
    )
    args = parser.parse_args()
    steps: dict[str, Any] = {
        "cap": lambda a: concurrency_limit(a, args.workers),
        "keys": lambda a: concurrency_keys(a, args.workers),
        "rate": lambda a: rate_limit(a, args.workers),
        "fair": lambda a: fair_share(a, args.workers),
        "cron": lambda a: cron(a, args.workers),
        "delayed": lambda a: delayed(a, 2),
        "depth": backpressure,
        "breaker": lambda a: breaker(a, args.workers),
        "scale": autoscale,
    }
    chosen = args.only.split(",") if args.only else list(steps)
    with server(args.dsn) as admin:
        print(f"machine: {machine(admin)}", flush=True)
        for name in chosen:
            print(steps[name](admin), flush=True)


if __name__ == "__main__":
    main()
