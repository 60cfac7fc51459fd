"""The raw SQL ceiling: what PostgreSQL allows with psycopg and no queue library.

Same protocol as the queue drivers (``benchmarks.drivers.protocol``), on a minimal queue table
(``raw_jobs``: an id, a queue, a jsonb payload, a run_at and one index for the claim):

* ``enqueue``: one ``INSERT`` per transaction (autocommit; psycopg prepares it);
* ``bulk``: 100-row ``INSERT ... SELECT unnest(...)`` statements, one transaction each
  (``--atomic``: all in one);
* ``work``: in one transaction, claim 100 rows ``FOR UPDATE SKIP LOCKED``, "run" them, delete
  them; woken by ``LISTEN`` when the table is empty;
* ``latency``: ``INSERT`` + ``pg_notify`` in one transaction.

``--leased work``: the leased loop a queue that survives a crashed worker needs: one
transaction claims 100 rows (``FOR UPDATE SKIP LOCKED``) and sets their ``leased_until``, the
jobs run outside it, a second transaction deletes them (a crashed worker's rows come back once
their lease runs out).
"""

from __future__ import annotations

import contextlib
import json
import signal
import threading
import time

import psycopg

from benchmarks.drivers import protocol

DDL = """
CREATE TABLE IF NOT EXISTS raw_jobs (
    id bigint GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
    queue text NOT NULL DEFAULT 'default',
    args jsonb NOT NULL DEFAULT '{}',
    run_at timestamptz NOT NULL DEFAULT now(),
    leased_until timestamptz
);
CREATE INDEX IF NOT EXISTS raw_jobs_claim_idx ON raw_jobs (queue, run_at, id)
"""
INSERT_ONE = "INSERT INTO raw_jobs (args) VALUES (%s::jsonb)"
INSERT_MANY = "INSERT INTO raw_jobs (args) SELECT a::jsonb FROM unnest(%s::text[]) AS u(a)"
CLAIM = """
SELECT id, (args->>'sent')::float8 FROM raw_jobs
 WHERE queue = 'default' ORDER BY run_at, id LIMIT %s FOR UPDATE SKIP LOCKED
"""
LEASE = """
UPDATE raw_jobs SET leased_until = now() + interval '30 seconds'
 WHERE id IN (
   SELECT id FROM raw_jobs
    WHERE queue = 'default' AND (leased_until IS NULL OR leased_until < now())
    ORDER BY run_at, id LIMIT %s FOR UPDATE SKIP LOCKED)
RETURNING id, (args->>'sent')::float8
"""
DELETE = "DELETE FROM raw_jobs WHERE id = ANY(%s)"
NOTIFY = "SELECT pg_notify('raw_jobs', '')"
BATCH = 100


def work(dsn: str, batch: int, leased: bool = False) -> None:
    stopping = threading.Event()
    signal.signal(signal.SIGTERM, lambda *_: stopping.set())
    signal.signal(signal.SIGINT, lambda *_: stopping.set())
    with (
        psycopg.connect(dsn, autocommit=True) as listen,
        psycopg.connect(dsn) as conn,
    ):
        listen.execute("LISTEN raw_jobs")
        while not stopping.is_set():
            if leased:
                with conn.transaction():
                    rows = conn.execute(LEASE, (batch,), prepare=True).fetchall()
                for _, sent in rows:
                    protocol.STATS.job(sent)
                if rows:
                    with conn.transaction():
                        conn.execute(DELETE, ([r[0] for r in rows],), prepare=True)
            else:
                with conn.transaction():
                    rows = conn.execute(CLAIM, (batch,), prepare=True).fetchall()
                    for _, sent in rows:
                        protocol.STATS.job(sent)
                    if rows:
                        conn.execute(DELETE, ([r[0] for r in rows],), prepare=True)
            if not rows:
                # Idle: wait for a notification (or re-check now and then).
                for _ in listen.notifies(timeout=0.1, stop_after=1):
                    pass


def main(argv: list[str] | None = None) -> None:
    p = protocol.parser(__doc__ or "")
    p.add_argument("--leased", action="store_true", help="work: lease, run, then delete")
    args = p.parse_args(argv)
    dsn: str = args.dsn
    if args.command == "setup":
        with psycopg.connect(dsn, autocommit=True) as conn:
            conn.execute(DDL)
    elif args.command == "enqueue":

        def make():
            conn = psycopg.connect(dsn, autocommit=True)
            return lambda: conn.execute(INSERT_ONE, ("{}",), prepare=True)

        rate = protocol.threaded_rate(args.producers, args.count // args.producers, make)
        protocol.emit(rate=rate)
    elif args.command == "bulk":
        with psycopg.connect(dsn, autocommit=True) as conn:
            conn.execute(INSERT_ONE, ("{}",))
            started = time.perf_counter()
            # The ceiling is "100-row INSERT per transaction"; a drain's fill (--atomic) sends
            # the same statements in one transaction so the workers see every job at once.
            with conn.transaction() if args.atomic else contextlib.nullcontext():
                for m in protocol.chunks(args.count, BATCH):
                    conn.execute(INSERT_MANY, (["{}"] * m,), prepare=True)
            protocol.emit(rate=args.count / (time.perf_counter() - started))
    elif args.command == "latency":
        with psycopg.connect(dsn) as conn:
            sent = 0
            started = time.perf_counter()
            for _ in protocol.paced(args.rate, args.seconds):
                with conn.transaction():
                    conn.execute(INSERT_ONE, (json.dumps({"sent": time.time()}),), prepare=True)
                    conn.execute(NOTIFY)
                sent += 1
            protocol.emit(sent=sent, seconds=time.perf_counter() - started)
    elif args.command == "work":
        work(dsn, args.concurrency or BATCH, args.leased)


if __name__ == "__main__":
    main()
