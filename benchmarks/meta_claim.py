"""What metadata and tags cost the claim and the single enqueue (migration 0013).

    python -m benchmarks.meta_claim [--dsn DSN] [--claims 400] [--enqueues 6000]

The claim (``claim_jobs``) returns three more columns (``meta``, ``tags`` and ``last_trace``)
and the single enqueue (``insert_job``) binds two more parameters. Both statements are run as
they are and as they were before (the same text without them), interleaved on one database of
200,000 ready jobs without metadata: each claim of 256 jobs in a transaction rolled back, each
enqueue autocommitted. Prints the medians (and spread) of each.
"""

from __future__ import annotations

import argparse
import statistics
import time
from typing import Any

import psycopg

from benchmarks.common import fresh_database, machine, server
from pgqueue.db.queries import query

_CLAIM_PARAMS = {
    "queues": ["default"],
    "tasks": ["noop"],
    "limit": 256,
    "lease": "30 seconds",
    "worker_id": "00000000-0000-0000-0000-000000000001",
    "after_priority": [None],
    "after_run_at": [None],
    "after_id": [None],
}
_ENQUEUE_PARAMS = {
    "queue": "default",
    "task": "noop",
    "args": "{}",
    "priority": 0,
    "run_at": None,
    "delay": None,
    "max_attempts": 5,
    "result_ttl": None,
}


def statements() -> dict[str, tuple[str, str]]:
    """(before, now) of each statement."""
    claim = query("claim_jobs")
    old_claim = claim.replace(", j.meta, j.tags,\n          j.errors -> -1 ->> 'trace'", "")
    insert = query("insert_job")
    old_insert = insert.replace(",\n                          meta, tags)", ")").replace(
        ", %(meta)s::jsonb, %(tags)s::text[]", ""
    )
    assert old_claim != claim and "meta" not in old_insert
    return {"claim": (old_claim, claim), "insert": (old_insert, insert)}


def spread(name: str, values: list[float], unit: float, label: str) -> str:
    v = sorted(values)
    return (
        f"{name}: median {statistics.median(v) * unit:.1f} {label}, "
        f"p10 {v[len(v) // 10] * unit:.1f}, p90 {v[9 * len(v) // 10] * unit:.1f}"
    )


def measure(dsn: str, claims: int, enqueues: int) -> None:
    texts = statements()
    with psycopg.connect(dsn, autocommit=True) as conn:
        conn.execute(
            "INSERT INTO pgqueue.jobs (queue, task, args) SELECT 'default', 'noop', "
            "jsonb_build_object('n', g) FROM generate_series(1, 200000) AS g"
        )
        conn.execute("VACUUM ANALYZE pgqueue.jobs")
        times: dict[str, list[float]] = {"before": [], "now": []}
        for i in range(claims):
            for side in ("before", "now") if i % 2 else ("now", "before"):
                text = texts["claim"][side == "now"]
                with conn.transaction(force_rollback=True):
                    started = time.perf_counter()
                    rows = conn.execute(text, _CLAIM_PARAMS, prepare=True).fetchall()
                    times[side].append(time.perf_counter() - started)
                assert len(rows) == 256
        for side in ("before", "now"):
            print(spread(f"claim of 256 jobs, {side}", times[side][40:], 1e3, "ms"))
        times = {"before": [], "now": []}
        params: dict[str, dict[str, Any]] = {
            "before": _ENQUEUE_PARAMS,
            "now": {**_ENQUEUE_PARAMS, "meta": None, "tags": None},
        }
        for i in range(enqueues):
            for side in ("before", "now") if i % 2 else ("now", "before"):
                started = time.perf_counter()
                conn.execute(texts["insert"][side == "now"], params[side], prepare=True)
                times[side].append(time.perf_counter() - started)
        for side in ("before", "now"):
            print(spread(f"single enqueue, {side}", times[side][500:], 1e6, "us"))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--dsn")
    parser.add_argument("--claims", type=int, default=400)
    parser.add_argument("--enqueues", type=int, default=6000)
    options = parser.parse_args()
    with server(options.dsn) as admin:
        print(machine(admin))
        measure(fresh_database(admin, "pgqueue_bench_meta"), options.claims, options.enqueues)


if __name__ == "__main__":
    main()
