"""A steady load under a long-held snapshot: pgqueue and a naive SKIP LOCKED queue, fsync on.

    python -m benchmarks.horizon [--dsn DSN] [--rate 300] [--producers 2] [--hold-seconds 600]
                                 [--before-seconds 60] [--after-seconds 60] [--window 30]
                                 [--systems pgqueue,naive] [--maintenance-wait 180]

Starts an embedded PostgreSQL with stock settings (``fsync`` on, ``pg_stat_statements``
preloaded) unless ``--dsn`` is given. Per system, in a database of its own:

* ``--producers`` processes (2) share ``--rate`` jobs/s, one job per transaction, for the whole
  run (``--before-seconds`` + ``--hold-seconds`` + ``--after-seconds``); a producer that falls
  behind sends fewer jobs (the started/s column shows the rate reached);
* two workers take them: for pgqueue two ``pgq work --concurrency 64`` processes running an
  ``async def`` no-op (`benchmarks.latency_tasks`); for **naive**, two processes each looping
  over one connection: ``SELECT id FROM naive_jobs ORDER BY id LIMIT 1 FOR UPDATE SKIP
  LOCKED``, ``DELETE`` it, ``COMMIT`` (the queue of countless blog posts);
* ``--before-seconds`` in, a third connection opens a ``REPEATABLE READ`` transaction, reads
  the queue table once and stays idle in it for ``--hold-seconds``, then rolls back: the
  analytics query, the forgotten ``BEGIN``, the replica with ``hot_standby_feedback``;
* after the producer stops, the workers drain what is left; for pgqueue, the workers'
  maintenance service (pgqueue/worker/maintainer.py, a pass a minute) is given up to
  ``--maintenance-wait`` seconds to bring the table and its indexes back to at most twice their
  size before the hold, with no manual step; then ``VACUUM`` runs on the queue table, as
  autovacuum would (and ``VACUUM (INDEX_CLEANUP ON)`` after it).

Per ``--window`` seconds (by the time a job was sent): enqueue -> handler start p50/p99
(wall clock, same machine: from the producer's call, its commit included), the jobs started per
second, the largest backlog sampled (due jobs not yet started, every second), and at the
window's end ``n_dead_tup`` of the queue table, its size and its indexes' size, and from
``pg_stat_statements`` the shared buffers one claim touched on average (hit + read) and its mean
server time. Then the sizes before the hold, at their peak, after the drain, after VACUUM.

Prints a Markdown table per system and a summary, then ``BENCH-RESULT`` JSON.
"""

from __future__ import annotations

import argparse
import json
import math
import signal
import subprocess
import sys
import tempfile
import threading
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import psycopg

from benchmarks import latency, load_stats, statements, steady
from benchmarks.common import fresh_database, machine, server

ROOT = Path(__file__).resolve().parent.parent
WORKERS = 2
SAMPLE_EVERY = 1.0  # seconds between backlog samples
DRAIN_TIMEOUT = 600.0  # longest wait for the backlog to drain after the producer stops
#: Per system: the queue table, the due-and-unstarted count, and where its claims are found in
#: pg_stat_statements (a piece of their text).
TABLES = {"pgqueue": "pgqueue.jobs", "naive": "naive_jobs"}
BACKLOG = {
    "pgqueue": "SELECT count(*) FROM pgqueue.jobs WHERE state = 'ready'"
    " OR (state = 'scheduled' AND run_at <= now())",
    "naive": "SELECT count(*) FROM naive_jobs",
}
CLAIM_TEXT = "SKIP LOCKED"
NAIVE_SCHEMA = (
    "CREATE TABLE IF NOT EXISTS naive_jobs (id bigint GENERATED ALWAYS AS IDENTITY PRIMARY KEY,"
    " task text NOT NULL, args jsonb NOT NULL, created_at timestamptz NOT NULL DEFAULT now())"
)


# -- the naive queue's processes ---------------------------------------------------------------


def naive_produce(dsn: str, rate: float, seconds: float, start_at: float, out: str) -> None:
    """One INSERT per transaction at ``rate`` (the pacing of `benchmarks.latency_tasks`)."""
    from benchmarks.latency_tasks import _paced  # the same pacing as pgqueue's producer

    with psycopg.connect(dsn, autocommit=True) as conn:
        insert = "INSERT INTO naive_jobs (task, args) VALUES ('noop', '{}') RETURNING id"

        def enqueue() -> int:
            row = conn.execute(insert, prepare=True).fetchone()
            assert row is not None
            return int(row[0])

        sent = _paced(enqueue, rate, seconds, start_at)
    Path(out).write_text(json.dumps(sent))


def naive_work(dsn: str, out: str) -> None:
    """Take one job per transaction until SIGTERM; ``start <t> <id>`` lines, as pgqueue's."""
    stopping = threading.Event()
    signal.signal(signal.SIGTERM, lambda *_: stopping.set())
    claim = "SELECT id FROM naive_jobs ORDER BY id LIMIT 1 FOR UPDATE SKIP LOCKED"
    with psycopg.connect(dsn) as conn, open(out, "a", buffering=1) as lines:
        while not stopping.is_set():
            with conn.transaction():
                row = conn.execute(claim, prepare=True).fetchone()
                if row is not None:
                    lines.write(f"start {time.time():.6f} {row[0]}\n")
                    conn.execute("DELETE FROM naive_jobs WHERE id = %s", row, prepare=True)
            if row is None:
                time.sleep(0.005)  # nothing ready: poll again soon (no LISTEN in this queue)


# -- sampling ----------------------------------------------------------------------------------


@dataclass
class Sample:
    at: float
    dead: int
    table_bytes: int
    index_bytes: int
    claims: int
    claim_buffers: int
    claim_ms: float


#: The claims' calls, buffers and server time so far (pg_stat_statements); zeros without it.
CLAIMS = (
    "SELECT sum(calls)::bigint AS calls,"
    " sum(shared_blks_hit + shared_blks_read)::bigint AS buffers,"
    " sum(total_exec_time)::float8 AS ms"
    " FROM pg_stat_statements"
    " WHERE dbid = (SELECT oid FROM pg_database WHERE datname = current_database())"
    " AND strpos(query, %(claim)s) > 0 AND strpos(query, %(harness)s) = 0"
)
NO_CLAIMS = "SELECT 0 AS calls, 0 AS buffers, 0 AS ms WHERE %(claim)s <> %(harness)s"


def sample(conn: psycopg.Connection[Any], table: str, stats: bool) -> Sample:
    claims = CLAIMS if stats else NO_CLAIMS
    row = conn.execute(
        statements.harness(
            "SELECT coalesce(s.n_dead_tup, 0), pg_relation_size(c.oid), pg_indexes_size(c.oid),"  # noqa: S608 - fixed text
            " coalesce(p.calls, 0), coalesce(p.buffers, 0), coalesce(p.ms, 0)"
            " FROM pg_class AS c"
            " LEFT JOIN pg_stat_user_tables AS s ON s.relid = c.oid"
            " LEFT JOIN (" + claims + ") AS p ON true"
            " WHERE c.oid = %(table)s::regclass"
        ),
        {"table": table, "claim": CLAIM_TEXT, "harness": statements.HARNESS},
    ).fetchone()
    assert row is not None
    dead, heap, index, calls, buffers = (int(v) for v in row[:5])
    return Sample(time.time(), dead, heap, index, calls, buffers, float(row[5]))


@dataclass
class Run:
    """What one system's run recorded."""

    sent: dict[int, tuple[float, float]] = field(default_factory=dict)
    starts: dict[int, float] = field(default_factory=dict)
    backlog: list[tuple[float, float]] = field(default_factory=list)
    samples: list[Sample] = field(default_factory=list)
    marks: dict[str, float] = field(default_factory=dict)
    sizes: dict[str, tuple[int, int]] = field(default_factory=dict)


def sizes(conn: psycopg.Connection[Any], table: str) -> tuple[int, int]:
    row = conn.execute(
        "SELECT pg_relation_size(%(t)s::regclass), pg_indexes_size(%(t)s::regclass)",
        {"t": table},
    ).fetchone()
    assert row is not None
    return int(row[0]), int(row[1])


class Holder:
    """A REPEATABLE READ transaction that read the queue table once and then sits idle."""

    def __init__(self, dsn: str, table: str) -> None:
        self.conn = psycopg.connect(dsn, application_name="horizon holder")
        self.conn.execute("BEGIN ISOLATION LEVEL REPEATABLE READ")
        self.conn.execute(f"SELECT count(*) FROM {table}")  # noqa: S608 - a fixed name
        self.pid = self.conn.info.backend_pid

    def release(self) -> None:
        self.conn.rollback()
        self.conn.close()


# -- one system --------------------------------------------------------------------------------


def start_workers(
    system: str, dsn: str, tmp: Path
) -> tuple[list[subprocess.Popen[bytes]], list[Path]]:
    paths = [Path(tempfile.mkstemp(dir=tmp, prefix=f"{system}-starts-")[1]) for _ in range(WORKERS)]
    if system == "pgqueue":
        env = latency.system_under_test(ROOT, tmp)
        procs = [latency.start_worker(dsn, path, env) for path in paths]
        steady.wait_registered(dsn, procs)
    else:
        command = [sys.executable, "-m", "benchmarks.horizon", "naive-work", dsn]
        procs = [subprocess.Popen([*command, str(p)], cwd=ROOT) for p in paths]
    return procs, paths


def start_producers(
    system: str, dsn: str, rate: float, seconds: float, producers: int, tmp: Path
) -> tuple[list[subprocess.Popen[bytes]], list[Path]]:
    """``producers`` processes sharing ``rate`` (`benchmarks.steady`'s), sending together."""
    if system == "pgqueue":
        env = latency.system_under_test(ROOT, tmp)
        command = ["steady", dsn, steady.TASK]
        return steady.start_producers(command, rate, seconds, producers, env, tmp)
    outs = [Path(tempfile.mkstemp(dir=tmp, prefix="naive-sent-")[1]) for _ in range(producers)]
    start_at = time.time() + steady.PRODUCERS_START
    command = [sys.executable, "-m", "benchmarks.horizon", "naive-produce", dsn]
    running = [
        subprocess.Popen(
            [*command, f"{rate / producers:g}", f"{seconds:g}", f"{start_at:.3f}", str(out)],
            cwd=ROOT,
        )
        for out in outs
    ]
    time.sleep(max(0.0, start_at - time.time()))
    return running, outs


def run_system(system: str, dsn: str, args: argparse.Namespace, tmp: Path) -> Run:
    table = TABLES[system]
    run = Run()
    with psycopg.connect(dsn, autocommit=True) as conn:
        if system == "naive":
            conn.execute(NAIVE_SCHEMA)
        conn.execute(f"TRUNCATE {table}")
        conn.execute("VACUUM ANALYZE")
        if args.statements:
            conn.execute("SELECT pg_stat_statements_reset()")
    procs, paths = start_workers(system, dsn, tmp)
    total = args.before_seconds + args.hold_seconds + args.after_seconds
    holder: Holder | None = None
    try:
        producers, outs = start_producers(system, dsn, args.rate, total, args.producers, tmp)
        run.marks["start"] = time.time()
        hold_at = run.marks["start"] + args.before_seconds
        release_at = hold_at + args.hold_seconds
        next_window = run.marks["start"] + args.window
        with psycopg.connect(dsn, autocommit=True) as conn:
            run.samples.append(sample(conn, table, args.statements))
            while any(p.poll() is None for p in producers):
                now = time.time()
                if holder is None and "hold" not in run.marks and now >= hold_at:
                    run.sizes["before the hold"] = sizes(conn, table)
                    holder = Holder(dsn, table)
                    run.marks["hold"] = time.time()
                    print(f"  {system}: snapshot held by pid {holder.pid}", flush=True)
                if holder is not None and now >= release_at:
                    holder.release()
                    holder = None
                    run.marks["release"] = time.time()
                    print(f"  {system}: snapshot released", flush=True)
                row = conn.execute(statements.harness(BACKLOG[system])).fetchone()
                run.backlog.append((time.time(), float(row[0] if row else 0)))
                if now >= next_window:
                    run.samples.append(sample(conn, table, args.statements))
                    next_window += args.window
                    last = run.samples[-1]
                    print(
                        f"  {system} {now - run.marks['start']:5.0f} s: backlog"
                        f" {run.backlog[-1][1]:,.0f}, dead {last.dead:,},"
                        f" table {last.table_bytes / 2**20:.1f} MB,"
                        f" indexes {last.index_bytes / 2**20:.1f} MB",
                        flush=True,
                    )
                time.sleep(SAMPLE_EVERY)
            if holder is not None:  # the producer ended early: release before the drain
                holder.release()
                holder = None
                run.marks["release"] = time.time()
            run.sent = steady.produced(producers, outs)
            run.marks["stop"] = time.time()
            deadline = time.monotonic() + DRAIN_TIMEOUT
            while time.monotonic() < deadline:
                run.starts, _ = steady.starts_and_claims(paths)
                if all(job in run.starts for job in run.sent):
                    break
                time.sleep(1.0)
            run.marks["drained"] = time.time()
            run.samples.append(sample(conn, table, args.statements))
            run.sizes["peak"] = (
                max(s.table_bytes for s in run.samples),
                max(s.index_bytes for s in run.samples),
            )
            run.sizes["after the drain"] = sizes(conn, table)
            if system == "pgqueue":
                waited = wait_for_maintenance(conn, table, run, args.maintenance_wait)
                run.sizes[f"after the workers' maintenance ({waited:.0f} s)"] = sizes(conn, table)
            conn.execute(f"VACUUM {table}")
            run.sizes["after VACUUM"] = sizes(conn, table)
            conn.execute(f"VACUUM (INDEX_CLEANUP ON) {table}")
            run.sizes["after VACUUM (INDEX_CLEANUP ON)"] = sizes(conn, table)
    finally:
        if holder is not None:
            holder.release()
        for proc in procs:
            latency.stop(proc)
    run.starts, _ = steady.starts_and_claims(paths)
    return run


def wait_for_maintenance(
    conn: psycopg.Connection[Any], table: str, run: Run, seconds: float
) -> float:
    """Until the workers' maintenance service (a pass every minute by default) brought the
    table and its indexes back to at most twice their size before the hold, at most
    ``seconds``: no manual step. How long it took."""
    goal = [2 * size for size in run.sizes["before the hold"]]
    start = time.monotonic()
    while time.monotonic() - start < seconds:
        now = sizes(conn, table)
        if all(got <= limit for got, limit in zip(now, goal, strict=True)):
            break
        time.sleep(SAMPLE_EVERY)
    return time.monotonic() - start


# -- figures -----------------------------------------------------------------------------------


def windows(run: Run, window: float) -> list[dict[str, Any]]:
    """Per window of send time: pickup p50/p99 (ms), started/s, backlog peak, and the sample
    taken at its end (dead tuples, sizes, buffers and ms per claim over the window)."""
    start = run.marks["start"]
    rows: list[dict[str, Any]] = []
    end = run.marks["stop"]
    count = max(1, int((end - start) // window + (1 if (end - start) % window > 1 else 0)))
    for index in range(count):
        low, high = start + index * window, start + (index + 1) * window
        delays = [
            (run.starts[job] - t0) * 1e3
            for job, (t0, _) in run.sent.items()
            if low <= t0 < high and job in run.starts
        ]
        waiting = sum(1 for job, (t0, _) in run.sent.items() if low <= t0 < high) - len(delays)
        started = sum(1 for t in run.starts.values() if low <= t < high)
        backlog = [v for t, v in run.backlog if low <= t < high]
        before = max((s for s in run.samples if s.at <= low + 1), key=lambda s: s.at)
        after = min((s for s in run.samples if s.at >= high - 1), key=lambda s: s.at, default=None)
        after = after or run.samples[-1]
        calls = after.claims - before.claims
        hold = run.marks.get("hold", float("inf")) < high and low < run.marks.get(
            "release", float("inf")
        )
        rows.append(
            {
                "from": index * window,
                "held": hold,
                "p50": load_stats.percentile(delays, 50),
                "p99": load_stats.percentile(delays, 99),
                "not_started": waiting,
                "started": started / window,
                "backlog": max(backlog, default=0),
                "dead": after.dead,
                "table_mb": after.table_bytes / 2**20,
                "index_mb": after.index_bytes / 2**20,
                "buffers": (after.claim_buffers - before.claim_buffers) / calls if calls else None,
                "claim_ms": (after.claim_ms - before.claim_ms) / calls if calls else None,
            }
        )
    return rows


def fmt_ms(value: float) -> str:
    if math.isnan(value):  # nothing started in the window
        return "-"
    return f"{value:,.1f}" if value < 1000 else f"{value / 1000:,.1f} s"


def table(system: str, rows: list[dict[str, Any]], window: float) -> str:
    lines = [
        f"| {system}: window (s) | held | pickup p50 (ms) | p99 (ms) | started/s | backlog |"
        " dead tuples | table MB | indexes MB | buffers/claim | ms/claim |",
        "|---" * 11 + "|",
    ]
    for r in rows:
        buffers = f"{r['buffers']:,.0f}" if r["buffers"] is not None else "-"
        claim_ms = f"{r['claim_ms']:.2f}" if r["claim_ms"] is not None else "-"
        late = f" ({r['not_started']:,} never)" if r["not_started"] else ""
        lines.append(
            f"| {r['from']:.0f}-{r['from'] + window:.0f} | {'yes' if r['held'] else ''}"
            f" | {fmt_ms(r['p50'])} | {fmt_ms(r['p99'])}{late} | {r['started']:,.0f}"
            f" | {r['backlog']:,.0f} | {r['dead']:,} | {r['table_mb']:.1f} | {r['index_mb']:.1f}"
            f" | {buffers} | {claim_ms} |"
        )
    return "\n".join(lines)


def size_table(system: str, run: Run) -> str:
    lines = [f"| {system}: sizes | table MB | indexes MB |", "|---|---|---|"]
    for label, (heap, index) in run.sizes.items():
        lines.append(f"| {label} | {heap / 2**20:.1f} | {index / 2**20:.1f} |")
    lost = sum(1 for job in run.sent if job not in run.starts)
    lines.append(f"| jobs sent / never started | {len(run.sent):,} | {lost:,} |")
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> dict[str, Any]:
    if argv is None:
        argv = sys.argv[1:]
    if argv and argv[0] == "naive-produce":
        dsn, rate, seconds, start_at, out = argv[1:]
        naive_produce(dsn, float(rate), float(seconds), float(start_at), out)
        return {}
    if argv and argv[0] == "naive-work":
        naive_work(argv[1], argv[2])
        return {}
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawTextHelpFormatter)
    p.add_argument("--dsn", help="an existing server (pg_stat_statements preloaded: buffers)")
    p.add_argument("--rate", type=float, default=300.0, help="jobs/s")
    p.add_argument("--hold-seconds", type=float, default=600.0)
    p.add_argument("--before-seconds", type=float, default=60.0)
    p.add_argument("--after-seconds", type=float, default=60.0)
    p.add_argument("--window", type=float, default=30.0, help="seconds per row")
    p.add_argument("--producers", type=int, default=2, help="processes sharing the rate")
    p.add_argument("--systems", default="pgqueue,naive")
    p.add_argument(
        "--maintenance-wait",
        type=float,
        default=180.0,
        help="after the drain, how long to wait for pgqueue's maintenance service to bring\n"
        "the table and indexes back to <= 2x their size before the hold (no manual step)",
    )
    p.add_argument(
        "--allow-fsync-off", action="store_true", help="smoke tests: figures mean nothing"
    )
    args = p.parse_args(argv)
    systems = [s for s in args.systems.split(",") if s]
    unknown = sorted(set(systems) - set(TABLES))
    if unknown:
        p.error(f"unknown systems: {', '.join(unknown)} (known: {', '.join(TABLES)})")
    results: dict[str, Any] = {}
    with server(args.dsn, statements.PRELOAD) as admin, tempfile.TemporaryDirectory() as tmp:
        if not args.allow_fsync_off:
            latency.check_durable(admin)
        args.statements = statements.available(admin)
        if not args.statements:
            print("pg_stat_statements is not preloaded: no buffers per claim", flush=True)
        print(machine(admin), flush=True)
        print(
            f"{args.rate:g} jobs/s from {args.producers} producers, {WORKERS} workers,"
            f" a REPEATABLE READ snapshot held {args.hold_seconds:g} s"
            f" after {args.before_seconds:g} s, then"
            f" {args.after_seconds:g} s more; windows of {args.window:g} s",
            flush=True,
        )
        outputs = []
        for system in systems:
            dsn = fresh_database(admin, f"horizon_{system}", migrated=system == "pgqueue")
            if args.statements:
                with psycopg.connect(dsn, autocommit=True) as conn:
                    conn.execute("CREATE EXTENSION IF NOT EXISTS pg_stat_statements")
            run = run_system(system, dsn, args, Path(tmp))
            rows = windows(run, args.window)
            results[system] = {"windows": rows, "sizes": run.sizes}
            outputs.append(table(system, rows, args.window) + "\n\n" + size_table(system, run))
        print("\n\n".join(outputs), flush=True)
        print("BENCH-RESULT " + json.dumps(results), flush=True)
    return results


if __name__ == "__main__":
    main()
