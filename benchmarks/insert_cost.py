"""The server's time for one single-job INSERT (``insert_job``), by schema and piece of the table.

    python -m benchmarks.insert_cost [--dsn DSN] [--count 1000] [--rounds 12] [--before 0026]
                                     [--pieces]

Two databases on one server: one migrated to ``--before``, one to the newest revision. In each,
a connection of the owner and one of the producer role (``pgq roles``; the id check runs only
for the latter) sends pgqueue's own one-job statement, prepared, ``synchronous_commit = off``,
and the raw single INSERT of ``benchmarks.compare``; the owner also an UPDATE of one job's
column that no index reads (what a heartbeat or a progress report costs beside its row: every
CHECK of the table is planned for it too). Every figure is the backend's CPU time per
statement (``/proc/<pid>/schedstat``: nanoseconds, the server process alone, so the client and
the network are left out), ``--count`` statements after 100 unmeasured, the variants shuffled
in each of ``--rounds`` rounds; printed: median and lower quartile (the machine's other work
only ever adds time). With ``--pieces``, the newest schema also without each piece in turn:
its AFTER INSERT trigger, its CHECK constraints, its partial indexes (dropped and made again
between figures, in this benchmark's own database).
"""

from __future__ import annotations

import argparse
import random
import statistics
from collections.abc import Callable, Mapping, Sequence
from functools import partial

import psycopg
from psycopg.conninfo import make_conninfo

from benchmarks.common import fresh_database, machine, server
from pgqueue.db import migrate, roles
from pgqueue.db.job_rows import single_params
from pgqueue.db.queries import query
from pgqueue.rules.job_specs import JobSpec

RAW_DDL = (
    "CREATE TABLE raw_jobs (id bigint GENERATED ALWAYS AS IDENTITY PRIMARY KEY,"
    " queue text NOT NULL DEFAULT 'default', args jsonb NOT NULL DEFAULT '{}',"
    " run_at timestamptz NOT NULL DEFAULT now());"
    " CREATE INDEX ON raw_jobs (queue, run_at, id);"
    " GRANT INSERT ON raw_jobs TO pgqueue_producer"
)
RAW_INSERT = "INSERT INTO raw_jobs (args) VALUES (%s::jsonb)"
# One job's row rewritten in place (HOT: no index reads progress_at), by the owner only.
UPDATE_JOB = "UPDATE pgqueue.jobs SET progress_at = now() WHERE id = %s"
ROLES = ("owner", "producer")

# A piece taken away: the statements that remove it, and those that put it back.
Piece = tuple[list[str], list[str]]


def _pieces(conn: psycopg.Connection[tuple[object, ...]]) -> dict[str, Piece]:
    jobs = "ALTER TABLE pgqueue.jobs "
    checks = conn.execute(
        "SELECT conname, pg_get_constraintdef(oid) FROM pg_constraint"
        " WHERE conrelid = 'pgqueue.jobs'::regclass AND contype = 'c'"
    ).fetchall()
    indexes = conn.execute(
        "SELECT indexrelname::text, pg_get_indexdef(indexrelid) FROM pg_stat_user_indexes"
        " WHERE relid = 'pgqueue.jobs'::regclass AND indexrelname <> 'jobs_pkey'"
    ).fetchall()
    triggers = conn.execute(
        "SELECT tgname::text, '' FROM pg_trigger"
        " WHERE tgrelid = 'pgqueue.jobs'::regclass AND NOT tgisinternal AND tgtype & 4 <> 0"
    ).fetchall()
    return {
        "no AFTER INSERT trigger": (
            [f"{jobs} DISABLE TRIGGER {name}" for name, _ in triggers],
            [f"{jobs} ENABLE TRIGGER {name}" for name, _ in triggers],
        ),
        "no CHECK constraints": (
            [f"{jobs} DROP CONSTRAINT {name}" for name, _ in checks],
            [f"{jobs} ADD CONSTRAINT {name} {definition}" for name, definition in checks],
        ),
        "no partial indexes": (
            [f"DROP INDEX pgqueue.{name}" for name, _ in indexes],
            [str(definition) for _, definition in indexes],
        ),
    }


def _backend_cpu_ns(pid: int) -> int:
    with open(f"/proc/{pid}/schedstat") as stat:
        return int(stat.read().split()[0])


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0] if __doc__ else None)
    parser.add_argument("--dsn", help="server to measure (default: a new embedded one)")
    parser.add_argument("--count", type=int, default=1000, help="statements per figure")
    parser.add_argument("--rounds", type=int, default=12)
    parser.add_argument("--before", default="0026", help="the revision to compare with")
    parser.add_argument("--pieces", action="store_true", help="also the newest without each piece")
    args = parser.parse_args(argv)

    job = single_params(
        JobSpec(task="bench.job", args_json="{}", queue="default", priority=0, max_attempts=5)
    )
    statements: dict[str, tuple[str, Sequence[object] | Mapping[str, object]]] = {
        "insert_job": (query("insert_job"), job),
        "raw INSERT": (RAW_INSERT, ("{}",)),
        "UPDATE of a job": (UPDATE_JOB, ()),
    }
    with server(args.dsn) as admin:
        print(f"machine: {machine(admin)}")
        dsns: dict[str, str] = {}
        for label, revision in ((args.before, args.before), ("newest", "head")):
            dsn = fresh_database(admin, f"insert_cost_{label}", migrated=False)
            migrate.upgrade(dsn, revision)
            roles.apply(dsn, roles.RoleNames())
            with psycopg.connect(dsn, autocommit=True) as conn:
                conn.execute(RAW_DDL)
            dsns[label] = dsn
        with psycopg.connect(dsns["newest"], autocommit=True) as conn:
            pieces = _pieces(conn) if args.pieces else {}

        connections: dict[tuple[str, str], psycopg.Connection[tuple[object, ...]]] = {}
        for label, dsn in dsns.items():
            for role, conninfo in zip(
                ROLES, (dsn, make_conninfo(dsn, user="pgqueue_producer")), strict=True
            ):
                conn = psycopg.connect(conninfo, autocommit=True)
                conn.execute("SET synchronous_commit = off")
                connections[label, role] = conn

        def measure(label: str, role: str, statement: str) -> float:
            conn = connections[label, role]
            text, params = statements[statement]
            row = conn.execute("SELECT pg_backend_pid()").fetchone()
            assert row is not None
            pid = int(str(row[0]))
            if statement == "UPDATE of a job":
                row = conn.execute(query("insert_job"), job).fetchone()
                assert row is not None
                params = (row[0],)
            for _ in range(100):
                conn.execute(text, params, prepare=True)
            start = _backend_cpu_ns(pid)
            for _ in range(args.count):
                conn.execute(text, params, prepare=True)
            return (_backend_cpu_ns(pid) - start) / args.count / 1000

        def without(piece: Piece, role: str) -> Callable[[], float]:
            def run() -> float:
                with psycopg.connect(dsns["newest"], autocommit=True) as admin_conn:
                    for statement in piece[0]:
                        admin_conn.execute(statement)
                    try:
                        return measure("newest", role, "insert_job")
                    finally:
                        for statement in piece[1]:
                            admin_conn.execute(statement)

            return run

        variants: dict[str, Callable[[], float]] = {}
        for role in ROLES:
            for label in dsns:
                for statement in statements:
                    if role != "owner" and statement == "UPDATE of a job":
                        continue  # the producer role may not update jobs
                    variants[f"{role:8s} {label:6s} {statement}"] = partial(
                        measure, label, role, statement
                    )
            for name, piece in pieces.items():
                variants[f"{role:8s} newest insert_job, {name}"] = without(piece, role)

        figures: dict[str, list[float]] = {name: [] for name in variants}
        for round_number in range(args.rounds):
            order = list(variants)
            random.shuffle(order)
            for name in order:
                figures[name].append(variants[name]())
            for dsn in dsns.values():
                with psycopg.connect(dsn, autocommit=True) as conn:
                    conn.execute("TRUNCATE pgqueue.jobs, raw_jobs")
            print(f"round {round_number + 1} done", flush=True)

    print(f"\nbackend CPU per statement (us), {args.count} per figure, {args.rounds} rounds")
    for name in sorted(figures):
        values = sorted(figures[name])
        print(
            f"  {name:52s} median {statistics.median(values):6.1f}"
            f"  lower quartile {values[len(values) // 4]:6.1f}"
        )


if __name__ == "__main__":
    main()
