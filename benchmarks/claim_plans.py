"""A busy worker's claim: planned on every call (PostgreSQL's custom plan) against its generic
plan (``WorkerDB.fetch`` of a name in ``GENERIC_PLANNED``), interleaved on one connection.

    python -m benchmarks.claim_plans [--dsn DSN] [--limits 1,20,64] [--claims 150] [--rounds 8]

Per limit: a table of ``rounds x 2 x claims x limit`` ready jobs (analyzed), then ``rounds``
rounds of ``claims`` claims of ``limit`` jobs each, the two variants alternating in order from
round to round. Prints each round's median milliseconds per claim (client-side, one round trip
each) and the medians over the rounds.
"""

from __future__ import annotations

import argparse
import asyncio
import statistics
import time
import uuid
from datetime import timedelta
from typing import Any

import psycopg

from benchmarks.common import fresh_database, server
from pgqueue.worker import store
from pgqueue.worker.store import WorkerDB

VARIANTS = {"custom": frozenset[str](), "generic": frozenset({"claim_jobs"})}


def claim_params(queue: str, limit: int) -> dict[str, Any]:
    return {
        "queues": [queue],
        "tasks": ["t"],
        "limit": limit,
        "worker_id": str(uuid.uuid4()),
        "lease": timedelta(seconds=30),
        "running": [0],
        "after_priority": [None],
        "after_run_at": [None],
        "after_id": [None],
    }


async def measure(
    dsn: str, queue: str, limit: int, claims: int, rounds: int
) -> dict[str, list[float]]:
    db = WorkerDB(dsn, size=1)
    await db.open()
    medians: dict[str, list[float]] = {name: [] for name in VARIANTS}
    try:
        for round_ in range(rounds):
            order = list(VARIANTS) if round_ % 2 == 0 else list(reversed(VARIANTS))
            for name in order:
                store.GENERIC_PLANNED = VARIANTS[name]
                times = []
                for _ in range(claims):
                    started = time.perf_counter()
                    rows = await db.fetch("claim_jobs", claim_params(queue, limit))
                    times.append(time.perf_counter() - started)
                    if len(rows) != limit:
                        raise RuntimeError(f"claimed {len(rows)} of {limit}")
                medians[name].append(statistics.median(times) * 1000)
    finally:
        await db.close()
    return medians


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--dsn")
    parser.add_argument("--limits", default="1,20,64")
    parser.add_argument("--claims", type=int, default=150)
    parser.add_argument("--rounds", type=int, default=8)
    args = parser.parse_args()
    generic = store.GENERIC_PLANNED
    with server(args.dsn) as admin:
        dsn = fresh_database(admin, "bench_claim_plans")
        print(
            "| jobs per claim | jobs in the table | custom plan (ms/claim) | generic plan"
            " | generic / custom |"
        )
        print("|---|---|---|---|---|")
        for limit in (int(x) for x in args.limits.split(",")):
            queue = f"claims-{limit}"
            jobs = args.rounds * len(VARIANTS) * args.claims * limit + 100
            with psycopg.connect(dsn, autocommit=True) as conn:
                conn.execute("DELETE FROM pgqueue.jobs")
                conn.execute(
                    "INSERT INTO pgqueue.jobs (queue, task)"
                    " SELECT %s, 't' FROM generate_series(1, %s)",
                    (queue, jobs),
                )
                conn.execute("VACUUM ANALYZE pgqueue.jobs")
            medians = asyncio.run(measure(dsn, queue, limit, args.claims, args.rounds))
            custom, gen = (statistics.median(medians[n]) for n in ("custom", "generic"))
            ratios = [g / c for g, c in zip(medians["generic"], medians["custom"], strict=True)]
            print(
                f"| {limit} | {jobs:,} | {custom:.2f} ({min(medians['custom']):.2f}-"
                f"{max(medians['custom']):.2f}) | {gen:.2f} ({min(medians['generic']):.2f}-"
                f"{max(medians['generic']):.2f}) | {statistics.median(ratios):.2f} |",
                flush=True,
            )
    store.GENERIC_PLANNED = generic


if __name__ == "__main__":
    main()
