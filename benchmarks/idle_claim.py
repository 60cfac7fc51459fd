"""An idle worker's claim on its own: this checkout's ``WorkerDB.before_commit`` against another
checkout's, interleaved on one server, one job ready before each claim.

    python -m benchmarks.idle_claim --tree BASE [--dsn DSN] [--claims 500]

The other checkout's ``pgqueue/worker/store.py`` is loaded as a module of its own (it imports
the rest of pgqueue from this checkout, so it must still find what it imports there). Each
variant has a one-connection pool; per claim a job is enqueued (on a connection with
asynchronous commit, so the producer's WAL flush stays out of it), then timed: the call ->
its rows (what an idle worker waits for before it starts the jobs), and the rows -> the
commit and ``next_due`` done. Prints the medians and 90th percentiles, ms.
"""

from __future__ import annotations

import argparse
import asyncio
import importlib.util
import statistics
import time
from pathlib import Path
from types import ModuleType
from typing import Any

import psycopg

from benchmarks.claim_plans import claim_params
from benchmarks.common import fresh_database, server
from pgqueue.worker import store


def other_store(tree: Path) -> ModuleType:
    path = tree / "pgqueue" / "worker" / "store.py"
    spec = importlib.util.spec_from_file_location("other_store", path)
    if spec is None or spec.loader is None:
        raise SystemExit(f"no pgqueue/worker/store.py in {tree}")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


async def measure(dsn: str, stores: dict[str, Any], claims: int) -> dict[str, list[list[float]]]:
    dbs = {name: module.WorkerDB(dsn, size=1) for name, module in stores.items()}
    for db in dbs.values():
        await db.open()
    times: dict[str, list[list[float]]] = {name: [[], []] for name in dbs}
    with psycopg.connect(dsn, autocommit=True) as producer:
        producer.execute("SET synchronous_commit = off")
        try:
            for n in range(claims):
                order = list(dbs) if n % 2 == 0 else list(reversed(dbs))
                for name in order:
                    producer.execute(
                        "INSERT INTO pgqueue.jobs (queue, task) VALUES ('default', 't')"
                    )
                    await asyncio.sleep(0.002)  # idle, as a worker waiting for a NOTIFY is
                    started = time.perf_counter()
                    rows, due, commit = await dbs[name].before_commit(
                        "claim_jobs", "next_due", claim_params("default", 1), generic=True
                    )
                    arrived = time.perf_counter()
                    await commit
                    await due
                    done = time.perf_counter()
                    if len(rows) != 1:
                        raise RuntimeError(f"{name} claimed {len(rows)} jobs, not 1")
                    times[name][0].append((arrived - started) * 1000)
                    times[name][1].append((done - arrived) * 1000)
        finally:
            for db in dbs.values():
                await db.close()
    return times


def p90(values: list[float]) -> float:
    return statistics.quantiles(values, n=10)[-1]


def main(argv: list[str] | None = None) -> dict[str, list[list[float]]]:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--tree", type=Path, required=True, help="the other checkout")
    parser.add_argument("--dsn")
    parser.add_argument("--claims", type=int, default=500)
    args = parser.parse_args(argv)
    stores = {"this": store, str(args.tree): other_store(args.tree)}
    with server(args.dsn) as admin:
        dsn = fresh_database(admin, "bench_idle_claim")
        times = asyncio.run(measure(dsn, stores, args.claims))
    print("| ms | call -> rows p50 | p90 | rows -> commit and next_due done p50 | p90 |")
    print("|---|---|---|---|---|")
    for name, (rows, rest) in times.items():
        print(
            f"| {name} | {statistics.median(rows):.3f} | {p90(rows):.3f}"
            f" | {statistics.median(rest):.3f} | {p90(rest):.3f} |"
        )
    return times


if __name__ == "__main__":
    main()
