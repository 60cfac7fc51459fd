"""What a jobs table partitioned by generation would cost, and whether it stays flat under a
held snapshot: pgqueue's own hot statements on a copy of ``pgqueue.jobs`` beside copies
partitioned by a ``generation`` column.

    python -m benchmarks.generations [--dsn DSN] [--partitions 1,3,6] [--rounds 300]
                                     [--stragglers 100] [--hold-jobs 2000]

A design study for issue 30's first goal (table and indexes at most twice their size while a
snapshot is held): only a storage that drops whole relations can stay flat while a snapshot
keeps every row version, and PostgreSQL drops a partition's contents with ``TRUNCATE``. Nothing
here is pgqueue's storage yet; the figures say what such a storage would cost the hot path and
whether the mechanism holds.

In a fresh migrated database (schema ``generations``):

* ``plain``: ``pgqueue.jobs``'s columns, defaults, checks and indexes, no triggers;
* ``partedP``: the same columns plus ``generation smallint`` (its default read from a one-row
  table by a ``STABLE`` function, as a rotating storage would), ``PARTITION BY LIST
  (generation)``, the same indexes (the primary key becomes ``(id, generation)``: a partitioned
  table's unique keys must hold its partition key), ``P`` partitions: the current one and
  ``P - 1`` older ones each still holding ``--stragglers`` jobs scheduled a day ahead (what keeps
  a generation from being emptied: a delayed retry, a scheduled job).

Per round, for each table in turn (interleaved, one connection, ``synchronous_commit = off`` so
that only the statements count): ``insert_job``, the idle claim (``generic_plans`` and
``claim_jobs`` in a pipeline), a heartbeat's lease extension, ``ack_jobs``; and for the
partitioned tables ``ack_jobs`` told the job's generation too (``generation = ANY(...)``, which
the planner prunes to one partition). pgqueue's statements are its query files' text with the
table's name in place of ``pgqueue.jobs``. Prints client-side medians in ms, the locks a claim's
transaction holds (PostgreSQL has 16 fast-path slots per backend before version 18).

Then the mechanism: a ``REPEATABLE READ`` transaction reads ``plain`` and ``partedP`` (the
largest ``P``) and stays open. Meanwhile a new partition is attached (``ATTACH PARTITION``: a
``SHARE UPDATE EXCLUSIVE`` lock on the parent, which the holder's ``ACCESS SHARE`` does not
block, where ``CREATE TABLE ... PARTITION OF``, ``DETACH`` and ``DROP`` would wait for it) and
made current; ``--hold-jobs`` jobs go through each table; then ``VACUUM`` on both, and
``TRUNCATE`` of the new partition and of an old one (``lock_timeout`` 1 s). Prints the sizes.
"""

from __future__ import annotations

import argparse
import itertools
import re
import statistics
import time
from datetime import timedelta
from typing import Any

import psycopg
from psycopg import sql

from benchmarks.claim_plans import claim_params
from benchmarks.common import fresh_database, server
from pgqueue.db.job_rows import single_params
from pgqueue.db.queries import query
from pgqueue.rules.job_specs import JobSpec
from pgqueue.worker.array_params import with_array_literals

STEPS = ("insert", "claim", "heartbeat", "ack", "ack by generation")
#: The generation jobs are written to; older ones are 0, 1, ...
CURRENT = 99
HEARTBEAT = """
UPDATE pgqueue.jobs AS j SET lease_expires_at = now() + %(lease)s::interval
  FROM (SELECT j.id FROM pgqueue.jobs AS j
          JOIN unnest(%(ids)s::bigint[], %(tokens)s::integer[]) AS h(id, token)
            ON j.id = h.id AND j.lease_token = h.token
         WHERE j.state = 'running'
           FOR NO KEY UPDATE OF j SKIP LOCKED) AS h
 WHERE j.id = h.id
RETURNING j.id"""
ACK_MATCH = "WHERE j.id = a.id AND"


def on(table: str, text: str) -> str:
    """pgqueue's statement with ``table`` for ``pgqueue.jobs`` (not its sequence)."""
    return re.sub(r"pgqueue\.jobs\b", table, text)


def build(conn: psycopg.Connection[Any], partitions: list[int], stragglers: int) -> None:
    conn.execute("CREATE SCHEMA generations")
    conn.execute("CREATE TABLE generations.current (g smallint NOT NULL)")
    conn.execute("INSERT INTO generations.current VALUES (%s)", (CURRENT,))
    conn.execute(
        "CREATE FUNCTION generations.current_generation() RETURNS smallint"
        " LANGUAGE sql STABLE AS 'SELECT g FROM generations.current'"
    )
    conn.execute(
        "CREATE TABLE generations.plain (LIKE pgqueue.jobs INCLUDING ALL EXCLUDING IDENTITY)"
    )
    conn.execute(
        "ALTER TABLE generations.plain ALTER COLUMN id SET DEFAULT nextval('pgqueue.jobs_id_seq')"
    )
    indexes = conn.execute(
        "SELECT indexname, indexdef FROM pg_indexes"
        " WHERE schemaname = 'pgqueue' AND tablename = 'jobs'"
    ).fetchall()
    for count in partitions:
        table = f"generations.parted{count}"
        conn.execute(
            sql.SQL(
                "CREATE TABLE {} (LIKE pgqueue.jobs INCLUDING DEFAULTS INCLUDING CONSTRAINTS"
                " INCLUDING STORAGE, generation smallint NOT NULL"
                " DEFAULT generations.current_generation()) PARTITION BY LIST (generation)"
            ).format(sql.SQL(table))
        )
        conn.execute(
            sql.SQL(
                "ALTER TABLE {} ALTER COLUMN id SET DEFAULT nextval('pgqueue.jobs_id_seq')"
            ).format(sql.SQL(table))
        )
        for name, original in indexes:
            if name == "jobs_pkey":
                conn.execute(
                    sql.SQL("ALTER TABLE {} ADD PRIMARY KEY (id, generation)").format(
                        sql.SQL(table)
                    )
                )
                continue
            definition = original.replace("ON pgqueue.jobs ", f"ON {table} ").replace(
                f"INDEX {name} ", f"INDEX {name}_{count} "
            )
            if "UNIQUE" in definition:
                definition = definition.replace(
                    "(idempotency_key)", "(idempotency_key, generation)"
                )
            conn.execute(definition)  # pg_indexes' own text, renamed
        for generation in [*range(count - 1), CURRENT]:
            conn.execute(
                sql.SQL("CREATE TABLE {} PARTITION OF {} FOR VALUES IN ({})").format(
                    sql.SQL(f"{table}_g{generation}"), sql.SQL(table), sql.Literal(generation)
                )
            )
            if generation != CURRENT:
                conn.execute(
                    sql.SQL(
                        "INSERT INTO {} (queue, task, state, run_at, generation)"
                        " SELECT 'default', 't', 'scheduled', now() + interval '1 day', {}"
                        "   FROM generate_series(1, {})"
                    ).format(sql.SQL(table), sql.Literal(generation), sql.Literal(stragglers))
                )
    conn.execute("ANALYZE")


class Statements:
    def __init__(self, table: str) -> None:
        self.table = table
        self.insert = on(table, query("insert_job"))
        self.claim = on(table, query("claim_jobs"))
        self.heartbeat = on(table, HEARTBEAT)
        self.ack = on(table, query("ack_jobs"))
        if ACK_MATCH not in self.ack:
            raise SystemExit("ack_jobs changed: update benchmarks/generations.py")
        self.ack_pruned = self.ack.replace(
            ACK_MATCH, "WHERE j.generation = ANY(%(generations)s::smallint[]) AND " + ACK_MATCH[6:]
        )
        self.partitioned = table != "generations.plain"


def one_job(conn: psycopg.Connection[Any], s: Statements, pruned: bool) -> list[float]:
    """insert, claim, heartbeat, ack: ms each."""
    params = with_array_literals(claim_params("default", 1))
    spec = JobSpec(task="t", args_json="{}", queue="default", priority=0, max_attempts=5)
    stamps = [time.perf_counter()]
    conn.execute(s.insert, single_params(spec), prepare=True)
    stamps.append(time.perf_counter())
    with conn.pipeline():
        conn.execute(query("generic_plans"))
        cur = conn.cursor()
        cur.execute(s.claim, params)
        rows = cur.fetchall()
    stamps.append(time.perf_counter())
    if len(rows) != 1:
        raise RuntimeError(f"{s.table}: claimed {len(rows)} jobs")
    job, token = rows[0][0], rows[0][6]
    conn.execute(s.heartbeat, {"lease": timedelta(seconds=30), "ids": [job], "tokens": [token]})
    stamps.append(time.perf_counter())
    ack = {"ids": [job], "tokens": [token], "results": None}
    if pruned:
        conn.execute(s.ack_pruned, {**ack, "generations": [CURRENT]}, prepare=False)
    else:
        conn.execute(s.ack, ack, prepare=False)
    stamps.append(time.perf_counter())
    return [(b - a) * 1000 for a, b in itertools.pairwise(stamps)]


def measure(dsn: str, tables: list[str], rounds: int) -> dict[str, dict[str, list[float]]]:
    times: dict[str, dict[str, list[float]]] = {t: {step: [] for step in STEPS} for t in tables}
    statements = [Statements(t) for t in tables]
    with psycopg.connect(dsn, autocommit=True) as conn:
        conn.execute("SET synchronous_commit = off")
        for n in range(rounds + 20):  # the first 20: warm-up, not counted
            for s in statements if n % 2 == 0 else reversed(statements):
                insert, claim, beat, ack = one_job(conn, s, pruned=False)
                pruned = one_job(conn, s, pruned=True)[3] if s.partitioned else None
                if n < 20:
                    continue
                for step, value in zip(STEPS, (insert, claim, beat, ack, pruned), strict=True):
                    if value is not None:
                        times[s.table][step].append(value)
        print("| ms, median (client side) | " + " | ".join(STEPS) + " |")
        print("|---" * (len(STEPS) + 1) + "|")
        for table in tables:
            cells = [f"{statistics.median(v):.3f}" if v else "-" for v in times[table].values()]
            print(f"| {table.split('.')[1]} | " + " | ".join(cells) + " |")
        print()
        print("| locks a claim's transaction holds | all | fast-path |")
        print("|---|---|---|")
        for s in statements:
            conn.execute(
                s.insert,
                single_params(
                    JobSpec(task="t", args_json="{}", queue="default", priority=0, max_attempts=5)
                ),
            )
            with conn.transaction():
                conn.execute(query("generic_plans"))
                conn.execute(s.claim, with_array_literals(claim_params("default", 1))).fetchall()
                row = conn.execute(
                    "SELECT count(*), count(*) FILTER (WHERE fastpath) FROM pg_locks"
                    " WHERE pid = pg_backend_pid()"
                ).fetchone()
            assert row is not None
            print(f"| {s.table.split('.')[1]} | {row[0]} | {row[1]} |")
    return times


def sizes(conn: psycopg.Connection[Any], relation: str) -> tuple[int, int]:
    """The relation's table and indexes, bytes."""
    row = conn.execute(
        "SELECT pg_table_size(%s::regclass), pg_indexes_size(%s::regclass)",
        (relation, relation),
    ).fetchone()
    assert row is not None
    return int(row[0]), int(row[1])


def kb(size: tuple[int, int]) -> str:
    return f"{size[0] / 1024:,.0f} kB / {size[1] / 1024:,.0f} kB"


def held(dsn: str, partitions: int, jobs: int) -> dict[str, Any]:
    """The mechanism under a held snapshot: sizes (bytes), and for each TRUNCATE its sizes
    after, or None where it waited for the holder."""
    parent = f"generations.parted{partitions}"
    fresh = f"{parent}_g{CURRENT + 1}"
    result: dict[str, Any] = {}
    with psycopg.connect(dsn, autocommit=True) as conn, psycopg.connect(dsn) as holder:
        conn.execute("SET synchronous_commit = off")
        conn.execute("SET lock_timeout = '1s'")
        holder.execute("SET TRANSACTION ISOLATION LEVEL REPEATABLE READ")
        holder.execute("SELECT count(*) FROM generations.plain").fetchone()
        holder.execute(sql.SQL("SELECT count(*) FROM {}").format(sql.SQL(parent))).fetchone()
        result["plain before"] = sizes(conn, "generations.plain")
        result["current partition before"] = sizes(conn, f"{parent}_g{CURRENT}")
        started = time.perf_counter()
        conn.execute(
            sql.SQL("CREATE TABLE {} (LIKE {} INCLUDING DEFAULTS INCLUDING CONSTRAINTS)").format(
                sql.SQL(fresh), sql.SQL(parent)
            )
        )
        conn.execute(
            sql.SQL("ALTER TABLE {} ATTACH PARTITION {} FOR VALUES IN ({})").format(
                sql.SQL(parent), sql.SQL(fresh), sql.Literal(CURRENT + 1)
            )
        )
        conn.execute("UPDATE generations.current SET g = %s", (CURRENT + 1,))
        result["attach ms"] = (time.perf_counter() - started) * 1000
        for table in ("generations.plain", parent):
            s = Statements(table)
            for _ in range(jobs):
                one_job(conn, s, pruned=False)
        conn.execute("VACUUM generations.plain")
        conn.execute(sql.SQL("VACUUM {}").format(sql.SQL(fresh)))
        result["plain after"] = sizes(conn, "generations.plain")
        result["new partition after"] = sizes(conn, fresh)
        for relation, label in ((fresh, "new partition"), (f"{parent}_g0", "old partition")):
            started = time.perf_counter()
            try:
                conn.execute(sql.SQL("TRUNCATE {}").format(sql.SQL(relation)))
                result[f"truncate {label}"] = sizes(conn, relation)
                result[f"truncate {label} ms"] = (time.perf_counter() - started) * 1000
            except psycopg.errors.LockNotAvailable:
                result[f"truncate {label}"] = None
        holder.rollback()
    print()
    print(f"| a snapshot held over {jobs:,} jobs | table / indexes |")
    print("|---|---|")
    print(f"| plain before | {kb(result['plain before'])} |")
    print(f"| {parent}'s current partition before | {kb(result['current partition before'])} |")
    print(f"| attach a new partition while held | done in {result['attach ms']:.0f} ms |")
    print(f"| plain after {jobs:,} jobs and VACUUM | {kb(result['plain after'])} |")
    after = kb(result["new partition after"])
    print(f"| the new partition after {jobs:,} jobs and VACUUM | {after} |")
    for label in ("new partition", "old partition"):
        truncated = result[f"truncate {label}"]
        outcome = (
            "waits for the holder (lock_timeout 1 s)"
            if truncated is None
            else f"done in {result[f'truncate {label} ms']:.0f} ms: {kb(truncated)}"
        )
        print(f"| TRUNCATE the {label} | {outcome} |")
    return result


def main(argv: list[str] | None = None) -> dict[str, Any]:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--dsn")
    parser.add_argument("--partitions", default="1,3,6")
    parser.add_argument("--rounds", type=int, default=300)
    parser.add_argument("--stragglers", type=int, default=100)
    parser.add_argument("--hold-jobs", type=int, default=2000)
    args = parser.parse_args(argv)
    counts = [int(x) for x in args.partitions.split(",")]
    with server(args.dsn) as admin:
        dsn = fresh_database(admin, "bench_generations")
        with psycopg.connect(dsn, autocommit=True) as conn:
            build(conn, counts, args.stragglers)
        tables = ["generations.plain"] + [f"generations.parted{c}" for c in counts]
        times = measure(dsn, tables, args.rounds)
        return {"times": times, "held": held(dsn, max(counts), args.hold_jobs)}


if __name__ == "__main__":
    main()
