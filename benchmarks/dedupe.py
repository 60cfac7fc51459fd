"""What the deduplication modes (migration 0014) cost the statements of jobs without them.

    python -m benchmarks.dedupe [--dsn DSN] [--rounds 7] [--jobs 4000] [--base-tree PATH]

One server, two databases: one migrated to 0012 (the schema before the modes), one to head.
The same statements, byte for byte, run against each in turn, the order swapped every round so
drift spreads over both, with ``synchronous_commit = off`` so what is measured is the
statements' own work (indexes, constraints, triggers) rather than the disk's flushes:

* the single plain enqueue (``insert_job``, one job per autocommit transaction);
* the claim and ack of those jobs (``claim_jobs`` 100 at a time, then ``ack_jobs``);
* a keyed enqueue through ``pgqueue.enqueue_job``, a new key each time, and the same keys again
  (the holder found): the keyed path, whose enqueue now looks the holder up first;
* with ``--base-tree`` (a checkout of the code before the modes), the client's own work per
  single enqueue (``PgQueue.spec`` of a plain job: option checks and defaults), timed in a
  subprocess in each tree.

Prints each figure's median with min and max over the rounds. The statements are this tree's,
so they must run on both revisions: later migrations change ``insert_job`` (0013's metadata
and tags, 0015's fair queues), and the figures in docs/benchmarks.md come from the checkout
that added 0014 (``git worktree add ../at-0014 a6ef8df``).
"""

from __future__ import annotations

import argparse
import statistics
import subprocess
import sys
import time
import uuid
from collections.abc import Callable
from datetime import timedelta
from pathlib import Path

import psycopg

from benchmarks.common import fresh_database, machine, server
from pgqueue.db import migrate
from pgqueue.db.queries import query

BEFORE = "0012"
TASK = "bench.noop"

_SPEC_TIMING = """
import timeit
from pgqueue import PgQueue
pgq = PgQueue("postgresql://unused")
@pgq.task(name="bench.noop")
def noop(n: int) -> None: ...
n = 20000
print(min(timeit.repeat(lambda: noop.s(1).spec(), number=n, repeat=5)) / n * 1e6)
"""


def _connect(dsn: str) -> psycopg.Connection[tuple[object, ...]]:
    conn = psycopg.connect(dsn, autocommit=True, prepare_threshold=0)
    conn.execute("SET synchronous_commit = off")
    return conn


def enqueue_plain(dsn: str, jobs: int) -> float:
    params = {"queue": "default", "task": TASK, "args": '{"n": 1}', "priority": 0,
              "run_at": None, "delay": None, "max_attempts": 5, "result_ttl": None}  # fmt: skip
    with _connect(dsn) as conn:
        started = time.perf_counter()
        for _ in range(jobs):
            conn.execute(query("insert_job"), params)
        return jobs / (time.perf_counter() - started)


def claim_and_ack(dsn: str, jobs: int) -> float:
    worker = uuid.uuid4()
    params = {"queues": ["default"], "after_priority": [None], "after_run_at": [None],
              "after_id": [None], "tasks": [TASK], "limit": 100,
              "lease": timedelta(seconds=60), "worker_id": worker}  # fmt: skip
    done = 0
    with _connect(dsn) as conn:
        started = time.perf_counter()
        while True:
            claimed = conn.execute(query("claim_jobs"), params).fetchall()
            if not claimed:
                break
            ids, tokens = [r[0] for r in claimed], [r[6] for r in claimed]
            conn.execute(
                query("ack_jobs"), {"ids": ids, "tokens": tokens, "results": [None] * len(ids)}
            )
            done += len(ids)
        elapsed = time.perf_counter() - started
    assert done == jobs, f"claimed {done} of {jobs}"
    return jobs / elapsed


def enqueue_keyed(dsn: str, jobs: int, round_: int, again: bool) -> float:
    statement = (
        "SELECT id, created FROM pgqueue.enqueue_job(task => %s, args => '{}',"
        " idempotency_key => %s)"
    )
    with _connect(dsn) as conn:
        started = time.perf_counter()
        for n in range(jobs):
            conn.execute(statement, (TASK, f"k{round_}:{n}"))
        rate = jobs / (time.perf_counter() - started)
        if not again:
            return rate
        started = time.perf_counter()
        for n in range(jobs):
            conn.execute(statement, (TASK, f"k{round_}:{n}"))
        return jobs / (time.perf_counter() - started)


def reset(dsn: str) -> None:
    with psycopg.connect(dsn, autocommit=True) as conn:
        conn.execute("TRUNCATE pgqueue.jobs")
        conn.execute("VACUUM ANALYZE pgqueue.jobs")


def spec_cost(tree: Path) -> float:
    """Microseconds of client work per plain single enqueue, in that tree's code."""
    out = subprocess.run(
        [sys.executable, "-c", _SPEC_TIMING], cwd=tree, capture_output=True, text=True, check=True
    ).stdout
    return float(out.strip().splitlines()[-1])


def summary(values: list[float], unit: str) -> str:
    digits = 1 if unit else 2
    low, high = min(values), max(values)
    return f"{statistics.median(values):,.{digits}f} {unit} ({low:,.{digits}f}-{high:,.{digits}f})"


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--dsn", help="server to measure (default: a new embedded one)")
    parser.add_argument("--rounds", type=int, default=7)
    parser.add_argument("--jobs", type=int, default=4000)
    parser.add_argument("--base-tree", type=Path, help="a checkout of the code before 0014")
    args = parser.parse_args(argv)
    figures: dict[str, dict[str, list[float]]] = {}
    measures: dict[str, Callable[[str, int], float]] = {
        "plain enqueue (insert_job), jobs/s": lambda dsn, r: enqueue_plain(dsn, args.jobs),
        "claim 100 + ack, jobs/s": lambda dsn, r: claim_and_ack(dsn, args.jobs),
        "keyed enqueue, new key (enqueue_job), jobs/s": (
            lambda dsn, r: enqueue_keyed(dsn, args.jobs // 2, r, again=False)
        ),
        "keyed enqueue, key held (enqueue_job), jobs/s": (
            lambda dsn, r: enqueue_keyed(dsn, args.jobs // 2, r + 1000, again=True)
        ),
    }
    with server(args.dsn) as admin:
        print(machine(admin))
        sides = {
            "before (0012)": fresh_database(admin, "bench_dedupe_before", migrated=False),
            "after (0014)": fresh_database(admin, "bench_dedupe_after", migrated=False),
        }
        migrate.upgrade(sides["before (0012)"], BEFORE)
        migrate.upgrade(sides["after (0014)"])
        for round_ in range(args.rounds):
            order = list(sides.items())
            if round_ % 2:
                order.reverse()
            for _, dsn in order:
                reset(dsn)
            # Each measure on one side then the other (the plain jobs enqueued first are the
            # ones claimed and acked next).
            for name, measure in measures.items():
                for side, dsn in order:
                    figures.setdefault(name, {}).setdefault(side, []).append(measure(dsn, round_))
            print(f"round {round_ + 1} of {args.rounds} done", file=sys.stderr)
    if args.base_tree:
        trees = {"before (0012)": args.base_tree, "after (0014)": Path.cwd()}
        client = figures.setdefault("client work per plain enqueue (JobCall.spec), us", {})
        for _ in range(args.rounds):
            for side, tree in trees.items():
                client.setdefault(side, []).append(spec_cost(tree))
    print(f"\n{args.rounds} rounds, {args.jobs:,} jobs each, median (min-max)\n")
    print("| measurement | before (0012) | after (0014) | after / before, same round |")
    print("|---|---|---|---|")
    for name, by_side in figures.items():
        unit = name.rsplit(", ", 1)[1]
        before, after = by_side["before (0012)"], by_side["after (0014)"]
        # Paired by round: both sides ran back to back, so the ratio cancels what the machine
        # did to that round.
        ratios = [a / b for a, b in zip(after, before, strict=True)]
        cells = [summary(before, unit), summary(after, unit), summary(ratios, "").strip()]
        print(f"| {name.rsplit(', ', 1)[0]} | {' | '.join(cells)} |")


if __name__ == "__main__":
    main()
