"""Where single-job enqueue time goes: the same one-job transaction with pieces taken away.

    python -m benchmarks.enqueue_anatomy [--dsn DSN] [--count 2000] [--runs 3]

On a migrated pgqueue database, with 1 and 8 producer threads (one connection each, autocommit,
prepared statements), jobs/s of:

* ``raw table``: INSERT into a minimal table (the raw ceiling of ``benchmarks.compare``);
* ``jobs INSERT``: a plain INSERT into ``pgqueue.jobs`` (its indexes, its NOTIFY trigger);
* ``jobs INSERT, no trigger``: the same with ``jobs_after_insert`` disabled (no NOTIFY, no id
  check);
* ``jobs-shaped, no CHECKs``: a copy of ``pgqueue.jobs`` (columns, defaults, indexes) without its
  CHECK constraints and trigger: what the constraints cost (PostgreSQL re-reads and re-plans
  every CHECK expression once per statement, so on one-row inserts they are not cheap);
* ``PgQueue.enqueue``: the library call (``insert_job``: one plain INSERT, its NOT EXISTS on the
  queue's settings, trigger; a keyed job would go through ``pgqueue.enqueue_input``);
* ``PgQueue.enqueue, no trigger``: the library call without the NOTIFY.

The trigger is disabled only inside this benchmark's own database.

Then bulk enqueue of ``--bulk`` jobs (default 100,000) in parts, seconds (median of the runs):
building the ``job.s()`` calls, validating them (``JobCall.spec``), writing them
(``enqueue_many`` of the validated specs: one round trip for ids and clock, COPY, commit), and the
same rows written by a bare psycopg ``COPY`` (what the server needs, with no library around it).
"""

from __future__ import annotations

import argparse
import statistics
import time
from collections.abc import Callable

import psycopg

from benchmarks.common import fresh_database, machine, server
from benchmarks.drivers import protocol, raw_driver
from pgqueue import PgQueue
from pgqueue.rules.job_specs import JobSpec

# The task bulk enqueue builds jobs of (its own PgQueue: only the jobs' descriptions are used).
_tasks = PgQueue()


@_tasks.task(name="bench.job")
async def _bench_job(sent: float | None = None) -> None:
    pass


BARE_COPY = (
    "COPY pgqueue.jobs (id, queue, task, args, priority, run_at, state, max_attempts) FROM STDIN"
)

JOBS_INSERT = (
    "INSERT INTO pgqueue.jobs (queue, task, args, state)"
    " VALUES ('default', 'bench.job', %s, 'ready')"
)
# NOT NULL constraints come along with LIKE; CHECK constraints and triggers do not.
NO_CHECKS_DDL = (
    "CREATE TABLE jobs_no_checks (LIKE pgqueue.jobs"
    " INCLUDING DEFAULTS INCLUDING IDENTITY INCLUDING INDEXES)"
)
NO_CHECKS_INSERT = JOBS_INSERT.replace("pgqueue.jobs", "jobs_no_checks")


def _insert(dsn: str, statement: str) -> Callable[[], Callable[[], object]]:
    def make() -> Callable[[], object]:
        conn = psycopg.connect(dsn, autocommit=True)
        return lambda: conn.execute(statement, ("{}",), prepare=True)

    return make


def _library(dsn: str) -> Callable[[], Callable[[], object]]:
    def make() -> Callable[[], object]:
        app = PgQueue(dsn, pool_size=1)
        return lambda: app.enqueue("bench.job", {})

    return make


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--dsn")
    parser.add_argument("--count", type=int, default=2000, help="jobs per measurement")
    parser.add_argument("--runs", type=int, default=3)
    parser.add_argument("--bulk", type=int, default=100_000, help="jobs per bulk measurement")
    args = parser.parse_args(argv)
    with server(args.dsn) as admin:
        dsn = fresh_database(admin, "bench_enqueue_anatomy")
        with psycopg.connect(dsn, autocommit=True) as conn:
            conn.execute(raw_driver.DDL)
            conn.execute(NO_CHECKS_DDL)
        print(f"machine: {machine(dsn)}")

        def trigger(enabled: bool) -> None:
            verb = "ENABLE" if enabled else "DISABLE"
            with psycopg.connect(dsn, autocommit=True) as conn:
                conn.execute(f"ALTER TABLE pgqueue.jobs {verb} TRIGGER jobs_after_insert")

        variants: list[tuple[str, bool, Callable[[], Callable[[], object]]]] = [
            ("raw table", True, _insert(dsn, raw_driver.INSERT_ONE)),
            ("jobs INSERT", True, _insert(dsn, JOBS_INSERT)),
            ("jobs INSERT, no trigger", False, _insert(dsn, JOBS_INSERT)),
            ("jobs-shaped, no CHECKs", False, _insert(dsn, NO_CHECKS_INSERT)),
            ("PgQueue.enqueue", True, _library(dsn)),
            ("PgQueue.enqueue, no trigger", False, _library(dsn)),
        ]
        print(f"{'variant':<30} {'1 producer':>12} {'8 producers':>12}  (jobs/s, median)")
        for name, notify, make in variants:
            trigger(notify)
            rates = []
            for producers in (1, 8):
                values = [
                    protocol.threaded_rate(producers, args.count // producers, make)
                    for _ in range(args.runs)
                ]
                rates.append(statistics.median(values))
            print(f"{name:<30} {rates[0]:>12,.0f} {rates[1]:>12,.0f}", flush=True)
        trigger(True)
        bulk_anatomy(dsn, args.bulk, args.runs)


def bulk_anatomy(dsn: str, count: int, runs: int) -> None:
    parts: dict[str, list[float]] = {}

    def timed(name: str, started: float) -> float:
        now = time.perf_counter()
        parts.setdefault(name, []).append(now - started)
        return now

    with PgQueue(dsn, pool_size=1) as app, psycopg.connect(dsn) as conn:
        app.enqueue_many([_bench_job.s()])  # open the pool, warm the statements
        for _ in range(runs):
            started = time.perf_counter()
            calls = [_bench_job.s() for _ in range(count)]
            at = timed("build job.s() calls", started)
            templates: dict[object, JobSpec] = {}
            specs = [call.spec(templates=templates) for call in calls]
            at = timed("validate (JobCall.spec)", at)
            app.enqueue_many(specs)
            timed("write (enqueue_many of specs)", at)
            row = conn.execute(
                "SELECT now(), array_agg(nextval('pgqueue.jobs_id_seq'))"
                " FROM generate_series(1, %s)",
                (count,),
            ).fetchone()
            assert row is not None
            clock, ids = row
            conn.commit()
            rows = [(i, "default", "bench.job", "{}", 0, clock, "ready", 5) for i in ids]
            at = time.perf_counter()
            with conn.cursor() as cur, cur.copy(BARE_COPY) as copy:
                for values in rows:
                    copy.write_row(values)
            conn.commit()
            timed("bare psycopg COPY of the same rows", at)
    library = sum(statistics.median(v) for k, v in parts.items() if not k.startswith("bare"))
    print(f"\nbulk enqueue of {count:,} jobs (seconds, median of {runs}):")
    for name, seconds in parts.items():
        print(f"  {name:<40} {statistics.median(seconds):>7.3f}")
    print(f"  {'library total':<40} {library:>7.3f}  ({count / library:,.0f} jobs/s)")


if __name__ == "__main__":
    main()
