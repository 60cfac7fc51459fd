"""Jobs that wait: N jobs that each sleep 10 ms, one worker process with 64 slots.

    python -m benchmarks.sleep_jobs [--dsn DSN] [--jobs 20000] [--runs 3] [--concurrency 64]
                                    [--seconds 0.01] [--kinds sync,async] [--tree PATH ...]

``sync``: a plain ``def`` handler calling ``time.sleep`` (the handler threads); ``async``: an
``async def`` one awaiting ``asyncio.sleep``. The ceiling is concurrency / seconds (6,400 jobs/s
for 64 slots and 10 ms). One ``pgq work --concurrency 64`` process per measurement, warmed up
with a first batch (its threads started, auto-prefetch on), then the jobs are inserted in one
transaction; jobs/s from the first job started to the last one ended (inside the handlers,
as `benchmarks.compare` times drains), and from that commit to the table being empty (polled
every 50 ms: the acks and the wake-up included).
``--tree`` measures other checkouts' pgqueue too, interleaved (as ``benchmarks.latency``).
"""

from __future__ import annotations

import argparse
import json
import statistics
import tempfile
import time
from pathlib import Path

import psycopg

from benchmarks.common import fresh_database, machine, server
from benchmarks.latency import ROOT, check_durable, environments, start_worker, stop

TASKS = {"sync": "latency.sleep_sync", "async": "latency.sleep_async"}


def drain(dsn: str, task: str, jobs: int, seconds: float, batch: int = 0) -> float:
    """Insert ``jobs`` jobs in one transaction; jobs/s from its commit to an empty table."""
    with psycopg.connect(dsn, autocommit=True) as conn:
        conn.execute(
            "INSERT INTO pgqueue.jobs (queue, task, args)"
            " SELECT 'default', %s, jsonb_build_object('seconds', %s::float8, 'batch', %s::int)"
            " FROM generate_series(1, %s)",
            (task, seconds, batch, jobs),
        )
        committed = time.perf_counter()
        deadline = committed + 60 + 10 * jobs * seconds
        while True:
            row = conn.execute("SELECT count(*) FROM pgqueue.jobs").fetchone()
            if row and row[0] == 0:
                return jobs / (time.perf_counter() - committed)
            if time.perf_counter() > deadline:
                raise RuntimeError(f"{row[0] if row else '?'} jobs left after the deadline")
            time.sleep(0.05)


def measure(
    dsn: str, task: str, jobs: int, seconds: float, concurrency: int, env: dict[str, str], tmp: Path
) -> tuple[float, float]:
    """Jobs/s from the commit to an empty table, and from the first job started to the last
    one ended (inside the handlers)."""
    stages = Path(tempfile.mkstemp(dir=tmp, prefix="stages-")[1])
    proc = start_worker(dsn, stages, env, concurrency=concurrency)
    try:
        drain(dsn, task, max(concurrency * 20, jobs // 5), seconds)  # warm-up
        outside = drain(dsn, task, jobs, seconds, batch=1)
    finally:
        stop(proc)
    for line in stages.read_text().splitlines():
        kind, *fields = line.split()
        if kind == "span" and fields[3] == "1":
            count, elapsed = int(fields[2]), float(fields[1]) - float(fields[0])
            # How long the slots were not inside a handler, per job.
            between = (concurrency * elapsed - float(fields[4])) / count
            print(
                f"  mean handler {float(fields[4]) / count * 1e3:.2f} ms, slot idle"
                f" {between * 1e3:.2f} ms per job",
                flush=True,
            )
            return outside, count / elapsed
    raise RuntimeError("the worker wrote no span for the measured jobs")


def main(argv: list[str] | None = None) -> dict[str, list[float]]:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawTextHelpFormatter)
    p.add_argument("--dsn", help="an existing server (default: a new embedded one)")
    p.add_argument("--jobs", type=int, default=20000)
    p.add_argument("--runs", type=int, default=3)
    p.add_argument("--concurrency", type=int, default=64)
    p.add_argument("--seconds", type=float, default=0.01)
    p.add_argument("--kinds", default="sync,async")
    p.add_argument("--tree", type=Path, action="append", default=[], help="another checkout")
    p.add_argument(
        "--allow-fsync-off", action="store_true", help="smoke tests: figures mean nothing"
    )
    args = p.parse_args(argv)
    trees = {"this": ROOT, **{str(t): t.resolve() for t in args.tree}}
    ceiling = args.concurrency / args.seconds
    with server(args.dsn) as admin, tempfile.TemporaryDirectory() as tmp:
        if not args.allow_fsync_off:
            check_durable(admin)
        dsn = fresh_database(admin, "pgqueue_sleep_jobs")
        print(machine(dsn), flush=True)
        envs = environments(trees, Path(tmp))
        results: dict[str, list[float]] = {}
        for run in range(args.runs):
            for kind in [k for k in args.kinds.split(",") if k]:
                for name, env in envs.items():
                    outside, inside = measure(
                        dsn, TASKS[kind], args.jobs, args.seconds, args.concurrency, env, Path(tmp)
                    )
                    results.setdefault(f"{kind} {name}", []).append(inside)
                    results.setdefault(f"{kind} {name} (commit to empty table)", []).append(outside)
                    print(
                        f"run {run + 1} {kind} {name}: {inside:,.0f} jobs/s"
                        f" ({inside / ceiling:.0%} of {ceiling:,.0f}) first start to last end;"
                        f" {outside:,.0f} from the commit to an empty table",
                        flush=True,
                    )
        print(f"\nmedian of runs (min-max), ceiling {ceiling:,.0f} jobs/s:")
        for label, values in results.items():
            median = statistics.median(values)
            print(
                f"  {label}: {median:,.0f} ({min(values):,.0f}-{max(values):,.0f}),"
                f" {median / ceiling:.0%}"
            )
        print("BENCH-RESULT " + json.dumps(results), flush=True)
    return results


if __name__ == "__main__":
    main()
