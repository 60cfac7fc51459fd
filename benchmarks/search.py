"""Job search at scale: page times for each filter over 1,000,000 live jobs and 1,000,000
history rows, and what the search indexes cost the ack that records history.

    python -m benchmarks.search [--dsn DSN] [--jobs 1000000] [--history 1000000]
                                [--dead 20000] [--runs 5] [--ack-jobs 20000]

1. fill: ``--jobs`` live jobs, ``--history`` history rows and ``--dead`` dead letters, written
   by ``INSERT ... SELECT`` over ``generate_series`` (the tests' 1M-row database is filled by
   the same function), then ``ANALYZE``.
2. pages: for each filter, the first page (50 rows) and a deep page (the 20th, reached by
   following the cursor), each timed ``--runs`` times through ``pgqueue.views.search_jobs``
   (median and max; the deep page's time is that one page's, not the walk to it).
3. ack cost (``--ack-jobs``, 0 skips it): inserting 200,000 history rows in ack-sized
   statements at revision 0011 and at head (what the new indexes cost per recorded ack row);
   then a drain of no-op jobs through one ``pgq work``
   process with ``record_succeeded`` on (every ack inserts a history row, so it maintains
   job_history's indexes), on a database at revision 0011 (before the search indexes) and one
   at head, interleaved, ``--runs`` times; and the same with ``record_succeeded`` off (the
   plain ack: a DELETE, no index written).
"""

from __future__ import annotations

import argparse
import statistics
import time
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from functools import partial
from typing import Any

import psycopg

from benchmarks.common import fresh_database, machine, server
from benchmarks.worker import drain
from pgqueue import PgQueue
from pgqueue.db import migrate, views

TASKS = 20  # bench.task_0 .. bench.task_19, evenly; plus bench.rare: one job in 100,000
QUEUES = 5  # q0 .. q4

# Live jobs: ids ascending with created_at over the last `span`; 70 % ready, 29 % scheduled for
# the next hours, 1 % ready again after a failed attempt (an error with a traceback).
FILL_JOBS = """
INSERT INTO pgqueue.jobs (queue, task, args, state, run_at, created_at, attempts, errors)
SELECT 'q' || (g %% %(queues)s),
       CASE WHEN g %% 100000 = 50000 THEN 'bench.rare' ELSE 'bench.task_' || (g %% %(tasks)s) END,
       jsonb_build_object('n', g, 'customer', g %% 1000),
       CASE WHEN g %% 100 < 29 THEN 'scheduled' ELSE 'ready' END,
       CASE WHEN g %% 100 < 29 THEN now() + (g %% 3600) * interval '1 s' ELSE now() END,
       now() - %(span)s::interval * (1 - g::float8 / %(n)s),
       CASE WHEN g %% 100 = 99 THEN 1 ELSE 0 END,
       CASE WHEN g %% 100 = 99 THEN jsonb_build_array(jsonb_build_object(
           'attempt', 1, 'error', 'TimeoutError',
           'message', 'upstream timed out after 30 s (request ' || g || ')',
           'traceback', 'Traceback (most recent call last):\n  File "app.py", line 7\n'
                        'TimeoutError: upstream timed out'))
            ELSE '[]'::jsonb END
  FROM generate_series(1, %(n)s) AS g
"""

# History: 97 %% succeeded at the first try, 2 %% cancelled, 1 %% succeeded after a failed
# attempt (ConnectionError); finished over the last `span`, in id order.
FILL_HISTORY = """
INSERT INTO pgqueue.job_history (id, queue, task, args, state, priority, attempts,
                                 max_attempts, created_at, started_at, finished_at, errors)
SELECT nextval('pgqueue.jobs_id_seq'),
       'q' || (g %% %(queues)s),
       CASE WHEN g %% 100000 = 50000 THEN 'bench.rare' ELSE 'bench.task_' || (g %% %(tasks)s) END,
       jsonb_build_object('n', g, 'customer', g %% 1000),
       CASE WHEN g %% 100 < 2 THEN 'cancelled' ELSE 'succeeded' END,
       0,
       CASE WHEN g %% 100 = 99 THEN 2 ELSE 1 END,
       5,
       f.at - interval '2 s', f.at - interval '1 s', f.at,
       CASE WHEN g %% 100 = 99 THEN jsonb_build_array(jsonb_build_object(
           'attempt', 1, 'error', 'ConnectionError',
           'message', 'connection reset by peer (request ' || g || ')',
           'traceback', 'Traceback (most recent call last):\n  File "app.py", line 9\n'
                        'ConnectionError: connection reset by peer'))
            ELSE '[]'::jsonb END
  FROM generate_series(1, %(n)s) AS g,
       LATERAL (SELECT now() - %(span)s::interval * (1 - g::float8 / %(n)s) AS at) AS f
"""

FILL_DEAD = """
INSERT INTO pgqueue.dead_letters (id, queue, task, args, priority, attempts, max_attempts,
                                  lease_token, created_at, errors, last_error, reason, dead_at)
SELECT nextval('pgqueue.jobs_id_seq'),
       'q' || (g %% %(queues)s),
       'bench.task_' || (g %% %(tasks)s),
       jsonb_build_object('n', g, 'customer', g %% 1000),
       0, 5, 5, 5, f.at - interval '1 min',
       jsonb_build_array(jsonb_build_object(
           'attempt', 5, 'error', 'ValueError', 'message', 'bad input ' || (g %% 50),
           'traceback', 'Traceback (most recent call last):\nValueError: bad input')),
       'bad input ' || (g %% 50), 'max attempts reached', f.at
  FROM generate_series(1, %(n)s) AS g,
       LATERAL (SELECT now() - %(span)s::interval * (1 - g::float8 / %(n)s) AS at) AS f
"""


def fill(
    dsn: str,
    *,
    jobs: int = 1_000_000,
    history: int = 1_000_000,
    dead: int = 20_000,
    span: str = "2 days",
) -> None:
    """Fill a migrated database with the benchmark's rows: the three tables at once, each
    from a connection of its own (one statement each), then ANALYZE."""
    params = {"queues": QUEUES, "tasks": TASKS, "span": span}
    parts = [(FILL_HISTORY, history), (FILL_DEAD, dead), (FILL_JOBS, jobs)]

    def insert(statement: str, rows: int) -> None:
        with psycopg.connect(dsn, autocommit=True) as conn:
            conn.execute(statement, {**params, "n": rows})

    with ThreadPoolExecutor(len(parts)) as pool:
        for done in [pool.submit(insert, statement, n) for statement, n in parts if n]:
            done.result()
    with psycopg.connect(dsn, autocommit=True) as conn:
        conn.execute("ANALYZE pgqueue.jobs, pgqueue.job_history, pgqueue.dead_letters")


def filters(conn: psycopg.Connection[Any]) -> list[tuple[str, dict[str, Any]]]:
    """The filters measured: each index path and the bounded ones."""
    mid_created = _middle(conn, "SELECT min(created_at), max(created_at) FROM pgqueue.jobs")
    mid_finished = _middle(
        conn, "SELECT min(finished_at), max(finished_at) FROM pgqueue.job_history"
    )
    some_id = conn.execute("SELECT max(id) - 12345 FROM pgqueue.jobs").fetchone()
    hour = _hour_after(mid_finished)
    return [
        ("everything", {}),
        ("id", {"id": some_id[0] if some_id else 1}),
        ("task (1 in 20)", {"task": "bench.task_7"}),
        ("task (1 in 100,000)", {"task": "bench.rare"}),
        ("queue", {"queue": "q3"}),
        ("state ready", {"state": "ready"}),
        ("state scheduled", {"state": "scheduled"}),
        ("state succeeded", {"state": "succeeded"}),
        ("state cancelled", {"state": "cancelled"}),
        ("state dead", {"state": "dead"}),
        ("task + state succeeded", {"task": "bench.task_7", "state": "succeeded"}),
        ("error text", {"error": "reset by peer"}),
        ("error text + state succeeded", {"error": "reset by peer", "state": "succeeded"}),
        ("error text, no finished match", {"error": "timed out", "state": ["succeeded", "dead"]}),
        (
            "task (1 in 100,000) finished",
            {"task": "bench.rare", "state": ["succeeded", "cancelled"]},
        ),
        ("args customer=456 + ready", {"args": {"customer": 456}, "state": "ready"}),
        ("args customer=456 finished", {"args": {"customer": 456}, "state": "succeeded"}),
        ("created since the middle", {"since": mid_created}),
        ("finished in one hour", {"finished_since": hour[0], "finished_until": hour[1]}),
    ]


def _middle(conn: psycopg.Connection[Any], sql: str) -> Any:
    row = conn.execute(sql).fetchone()
    return row[0] + (row[1] - row[0]) / 2 if row and row[0] else None


def _hour_after(when: Any) -> tuple[Any, Any]:
    from datetime import timedelta

    return when, when + timedelta(hours=1)


def timed(runs: int, call: Callable[[], Any]) -> tuple[float, float]:
    times = []
    for _ in range(runs):
        started = time.perf_counter()
        call()
        times.append((time.perf_counter() - started) * 1000)
    return statistics.median(times), max(times)


def pages(dsn: str, runs: int, depth: int = 20) -> None:
    pgq = PgQueue(dsn)
    try:
        with psycopg.connect(dsn, autocommit=True) as conn:
            measured = filters(conn)
        print(f"\n{'filter':<32} {'first page':>18} {'page ' + str(depth):>18}  rows/page")
        for label, where in measured:
            first = views.search_jobs(pgq, **where)
            cursor = first.cursor
            for _ in range(depth - 2):
                if cursor is None:
                    break
                cursor = views.search_jobs(pgq, after=cursor, **where).cursor
            t1 = timed(runs, partial(views.search_jobs, pgq, **where))
            if cursor is None:
                deep = "(fewer pages)"
            else:
                med, high = timed(runs, partial(views.search_jobs, pgq, after=cursor, **where))
                deep = f"{med:7.1f} ms ({high:5.1f})"
            print(
                f"{label:<32} {t1[0]:7.1f} ms ({t1[1]:5.1f}) {deep:>18}  {len(first.jobs)}",
                flush=True,
            )
    finally:
        pgq.close()


def ack_cost(admin_dsn: str, jobs: int, runs: int) -> None:
    print(f"\nack cost: drain {jobs:,} no-op jobs, 1 pgq work process, concurrency 64")
    figures: dict[tuple[str, bool], list[float]] = {}
    for run in range(runs):
        for revision in ("0011", "head"):
            for record in (True, False):
                dsn = fresh_database(admin_dsn, "pgqueue_bench_ack", migrated=False)
                migrate.upgrade(dsn, revision)
                with psycopg.connect(dsn, autocommit=True) as conn:
                    conn.execute("UPDATE pgqueue.retention SET record_succeeded = %s", (record,))
                rate = drain(dsn, jobs, 1, 64, "bench.noop")
                figures.setdefault((revision, record), []).append(rate)
        print(f"  run {run + 1}/{runs} done", flush=True)
    for record in (True, False):
        for revision in ("0011", "head"):
            values = figures[(revision, record)]
            label = "before (0011)" if revision == "0011" else "after (0012)"
            print(
                f"  record_succeeded={'on ' if record else 'off'} {label:<14} "
                f"{statistics.median(values):8,.0f} jobs/s "
                f"(min {min(values):,.0f}, max {max(values):,.0f})"
            )


HISTORY_BATCH = """
INSERT INTO pgqueue.job_history (id, queue, task, args, state, priority, attempts,
                                 max_attempts, created_at, started_at, finished_at)
SELECT nextval('pgqueue.jobs_id_seq'), 'q' || (g %% 5), 'bench.task_' || (g %% 20),
       jsonb_build_object('n', g), 'succeeded', 0, 1, 5, now(), now(), now()
  FROM generate_series(1, %(batch)s) AS g
"""


def history_insert_cost(admin_dsn: str, rows: int, runs: int, batch: int = 256) -> None:
    """The part of a recording ack that the search indexes touch: inserting succeeded jobs
    into job_history, ``batch`` rows per statement (an ack batch), at revision 0011 and at
    head, interleaved; microseconds per row."""
    print(f"\nhistory insert: {rows:,} rows in statements of {batch} (an ack batch's insert)")
    figures: dict[str, list[float]] = {}
    for _ in range(runs):
        for revision in ("0011", "head"):
            dsn = fresh_database(admin_dsn, "pgqueue_bench_history", migrated=False)
            migrate.upgrade(dsn, revision)
            with psycopg.connect(dsn, autocommit=True) as conn:
                started = time.perf_counter()
                for _ in range(rows // batch):
                    conn.execute(HISTORY_BATCH, {"batch": batch})
                elapsed = time.perf_counter() - started
            figures.setdefault(revision, []).append(elapsed / rows * 1e6)
    for revision in ("0011", "head"):
        values = figures[revision]
        label = "before (0011)" if revision == "0011" else "after (0012)"
        print(
            f"  {label:<14} {statistics.median(values):6.1f} us/row "
            f"(min {min(values):.1f}, max {max(values):.1f})"
        )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--dsn", help="server to measure (default: a new embedded one)")
    parser.add_argument("--jobs", type=int, default=1_000_000)
    parser.add_argument("--history", type=int, default=1_000_000)
    parser.add_argument("--dead", type=int, default=20_000)
    parser.add_argument("--runs", type=int, default=5)
    parser.add_argument("--ack-jobs", type=int, default=20_000, help="0: skip the ack cost")
    args = parser.parse_args()
    with server(args.dsn) as admin:
        dsn = fresh_database(admin, "pgqueue_bench_search")
        print(machine(dsn))
        started = time.perf_counter()
        fill(dsn, jobs=args.jobs, history=args.history, dead=args.dead)
        print(
            f"filled {args.jobs:,} jobs, {args.history:,} history rows, {args.dead:,} dead "
            f"letters in {time.perf_counter() - started:.1f} s"
        )
        if args.jobs or args.history or args.dead:
            pages(dsn, args.runs)
        if args.ack_jobs:
            history_insert_cost(admin, 200_000, args.runs)
            ack_cost(admin, args.ack_jobs, args.runs)


if __name__ == "__main__":
    main()
