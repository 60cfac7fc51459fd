"""Where a pgqueue drain spends its time: py-spy on `pgq work`, CPU split, EXPLAIN of claim/ack.

    python -m benchmarks.profile_drain [--dsn DSN] [--jobs 200000] [--concurrency 64]
                                       [--explain-depths 50000,1000000] [--no-spy] [--sync]

1. Enqueues ``--jobs`` no-op jobs, then runs ``pgq work --burst`` under ``py-spy record``
   (from the benchmark's own venv) until the queue is drained. Reports the drain rate, the CPU
   seconds the worker process and the PostgreSQL server each used (``wait4`` rusage for the
   worker; the postmaster's children, live and reaped, for the server), the worker's busy share
   of wall time, the hottest functions (self and inclusive samples of the event-loop thread)
   and the statements per 1,000 jobs (``pg_stat_statements``). With ``--sync`` the jobs are
   a plain ``def`` no-op (the thread pool) and the handler threads' samples are reported too.
2. For each depth in ``--explain-depths``: fills the queue to that many waiting jobs and prints
   ``EXPLAIN (ANALYZE, BUFFERS)`` of ``claim_jobs`` (limit = concurrency) and of ``ack_jobs`` for
   the claimed jobs, inside a transaction that is rolled back.

The raw py-spy samples and the report go to ``benchmarks/.results/``.
"""

from __future__ import annotations

import argparse
import collections
import os
import subprocess
import sys
import time
import uuid
from datetime import timedelta
from pathlib import Path
from typing import Any

import psycopg

from benchmarks import peers_env, statements
from benchmarks.common import fresh_database, machine, server
from benchmarks.drivers import pgqueue_driver
from benchmarks.systems import ROOT, url
from pgqueue import PgQueue
from pgqueue.db.queries import query

RESULTS = ROOT / "benchmarks" / ".results"
TICKS = os.sysconf("SC_CLK_TCK")
#: Frames that mean "waiting", not computing (py-spy samples them only with --idle).
FILL_CHUNK = 100_000


# -- CPU accounting -----------------------------------------------------------------------------


def _stat(pid: int) -> list[str]:
    text = Path(f"/proc/{pid}/stat").read_text()
    return text[text.rindex(")") + 2 :].split()  # fields from 3 (state) on


def server_cpu(postmaster: int) -> float:
    """CPU seconds of the server: the postmaster, its reaped children and its live children."""
    fields = _stat(postmaster)
    total = sum(int(fields[i]) for i in (11, 12, 13, 14))  # utime stime cutime cstime
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            child = _stat(int(entry.name))
        except (OSError, ValueError):
            continue
        if int(child[1]) == postmaster:  # ppid
            total += int(child[11]) + int(child[12])
    return total / TICKS


def postmaster_pid(dsn: str) -> int:
    # Read the backend's parent while the backend is still alive (it exits with the connection).
    with psycopg.connect(dsn) as conn:
        row = conn.execute("SELECT pg_backend_pid()").fetchone()
        assert row is not None
        return int(_stat(int(row[0]))[1])


# -- py-spy samples -----------------------------------------------------------------------------


def _samples_by_thread(raw: Path) -> dict[str, list[tuple[list[str], int]]]:
    threads: dict[str, list[tuple[list[str], int]]] = collections.defaultdict(list)
    for line in raw.read_text().splitlines():
        stack, _, count = line.rpartition(" ")
        if not stack:
            continue
        frames = stack.split(";")
        if len(frames) < 2:
            continue
        # With --threads the first frame names the thread ("thread (id)[: name]").
        threads[frames[0].split(":")[0]].append((frames[1:], int(count)))
    return threads


def summarise(
    raw: Path, top: int = 25, *, others: bool = False
) -> tuple[int, list[tuple[str, int]], list[tuple[str, int]]]:
    """(samples, hottest by self samples, hottest by inclusive samples) of the busiest thread
    (the event loop's), or with ``others`` of all the other threads together (the handler
    threads of a sync drain)."""
    threads = _samples_by_thread(raw)
    if not threads:
        return 0, [], []
    busiest = max(threads, key=lambda name: sum(c for _, c in threads[name]))
    if others:
        rows = [row for name, rows in threads.items() if name != busiest for row in rows]
    else:
        rows = threads[busiest]
    own: collections.Counter[str] = collections.Counter()
    inclusive: collections.Counter[str] = collections.Counter()
    for stack_frames, samples_here in rows:
        names = [_short(f) for f in stack_frames]
        own[names[-1]] += samples_here
        for name in set(names):
            inclusive[name] += samples_here
    samples = sum(c for _, c in rows)
    return samples, own.most_common(top), inclusive.most_common(top)


def _short(frame: str) -> str:
    """'func (path/to/module.py:12)' -> 'func (module.py)': lines would split one function."""
    name, _, where = frame.partition(" (")
    path = where.rstrip(")").rsplit(":", 1)[0]
    for marker in ("site-packages/", "lib/python3"):
        if marker in path:
            path = path.split(marker, 1)[1]
    return f"{name} ({path})"


# -- the drain ----------------------------------------------------------------------------------


def fill(dsn: str, count: int, task: str = pgqueue_driver.TASK) -> None:
    with PgQueue(dsn, pool_size=1) as app:
        done = 0
        while done < count:
            n = min(FILL_CHUNK, count - done)
            app.enqueue_many([app.spec(task, {}, {}) for _ in range(n)])
            done += n
    with psycopg.connect(dsn, autocommit=True) as conn:
        conn.execute("VACUUM ANALYZE pgqueue.jobs")


def spy_tool() -> Path:
    """py-spy from this interpreter's venv if it is there, else from the peers' venv."""
    here = Path(sys.executable).parent / "py-spy"
    return here if here.exists() else peers_env.tool("py-spy")


def profile(
    admin: str,
    dsn: str,
    jobs: int,
    concurrency: int,
    spy: bool,
    out: Path,
    pgoptions: str,
    sync: bool = False,
) -> str:
    fill(dsn, jobs, pgqueue_driver.SYNC_TASK if sync else pgqueue_driver.TASK)
    postmaster = postmaster_pid(dsn)
    counting = statements.available(admin)
    if counting:
        statements.reset(admin)
    command = [*pgqueue_driver.work_command(sys.executable, concurrency), "--burst"]
    env = {**os.environ, "PGQUEUE_DSN": url(dsn)}
    if pgoptions:
        env["PGOPTIONS"] = pgoptions  # e.g. "-c synchronous_commit=off" (an experiment hook)
    cpu_before = server_cpu(postmaster)
    started = time.perf_counter()
    worker = subprocess.Popen(command, cwd=ROOT, env=env)
    spy_proc = None
    raw = out.with_suffix(".pyspy.txt")
    if spy:
        spy_proc = subprocess.Popen(
            [
                str(spy_tool()),
                "record",
                "--pid",
                str(worker.pid),
                "--rate",
                "250",
                "--threads",
                "--format",
                "raw",
                "--output",
                str(raw),
                # Pausing the process for every sample of 60-odd handler threads would slow
                # a sync drain several times over.
                *(["--nonblocking"] if sync else []),
            ],
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
        )
    _, status, usage = os.wait4(worker.pid, 0)
    wall = time.perf_counter() - started
    worker.returncode = os.waitstatus_to_exitcode(status)
    server_seconds = server_cpu(postmaster) - cpu_before
    if spy_proc is not None:
        spy_proc.wait(60)
    lines = [
        f"Machine: {machine(dsn)}; load average {os.getloadavg()[0]:.2f}",
        f"Command: `{' '.join(command[1:])}` on {jobs:,} waiting "
        + ("plain `def`" if sync else "`async def`")
        + " no-op jobs"
        + (f", PGOPTIONS={pgoptions!r}" if pgoptions else "")
        + (" under py-spy (250 Hz, which slows the worker a little)" if spy else "")
        + (" (--nonblocking)" if spy and sync else ""),
        "",
        f"- worker process lifetime (start-up and shutdown included): {wall:.1f} s, "
        f"{jobs / wall:,.0f} jobs/s over it",
        f"- worker CPU: {usage.ru_utime:.1f} s user + {usage.ru_stime:.1f} s system = "
        f"{(usage.ru_utime + usage.ru_stime) / wall:.0%} of one core over its lifetime; "
        f"{(usage.ru_utime + usage.ru_stime) * 1e6 / jobs:.0f} µs of worker CPU per job",
        f"- PostgreSQL CPU (all backends): {server_seconds:.1f} s = "
        f"{server_seconds * 1e6 / jobs:.0f} µs per job",
    ]
    if counting:
        counted = statements.read(admin, str(psycopg.conninfo.conninfo_to_dict(dsn)["dbname"]))
        lines.append(f"- statements per 1,000 jobs: {counted.per_thousand(jobs):.1f}")
        lines += ["", "| calls | server ms | statement |", "|---|---|---|"]
        lines += [
            f"| {c:,} | {counted.exec_ms.get(q, 0):,.0f} | `{q[:100]}` |"
            for q, c in counted.by_statement[:10]
        ]
    if spy and raw.exists():
        samples, own, inclusive = summarise(raw)
        lines += [
            "",
            f"Event-loop thread: {samples:,} CPU samples at 250 Hz = {samples / 250:.1f} s busy "
            f"({samples / 250 / wall:.0%} of the worker's lifetime).",
            "",
            "| self samples | share | function |",
            "|---|---|---|",
        ]
        lines += [f"| {c:,} | {c / samples:.0%} | `{n}` |" for n, c in own]
        lines += ["", "| inclusive samples | share | function |", "|---|---|---|"]
        lines += [f"| {c:,} | {c / samples:.0%} | `{n}` |" for n, c in inclusive]
        if sync:
            samples, own, inclusive = summarise(raw, others=True)
            lines += [
                "",
                f"Every other thread together (the handler threads): {samples:,} CPU samples "
                f"= {samples / 250:.1f} s busy.",
                "",
                "| self samples | share | function |",
                "|---|---|---|",
            ]
            lines += [f"| {c:,} | {c / max(samples, 1):.0%} | `{n}` |" for n, c in own]
            lines += ["", "| inclusive samples | share | function |", "|---|---|---|"]
            lines += [f"| {c:,} | {c / max(samples, 1):.0%} | `{n}` |" for n, c in inclusive]
    return "\n".join(lines)


# -- EXPLAIN ------------------------------------------------------------------------------------


def explain(dsn: str, depth: int, limit: int) -> str:
    with psycopg.connect(dsn, autocommit=True) as conn:
        conn.execute("TRUNCATE pgqueue.jobs")
    fill(dsn, depth)
    worker_id = str(uuid.uuid4())
    claim: dict[str, Any] = {
        "queues": ["default"],
        "tasks": [pgqueue_driver.TASK],
        "lease": timedelta(seconds=30),
        "worker_id": worker_id,
        "limit": limit,
        # From the top of the queue, as every worker's first claim.
        "after_priority": [None],
        "after_run_at": [None],
        "after_id": [None],
    }
    out = [f"### {depth:,} jobs waiting", ""]
    with psycopg.connect(dsn) as conn:
        # Warm the cache and the statistics as a running worker would have them.
        conn.execute(query("claim_jobs"), claim).fetchall()
        conn.rollback()
        plan = conn.execute("EXPLAIN (ANALYZE, BUFFERS) " + query("claim_jobs"), claim).fetchall()
        out += [f"`claim_jobs` (limit {limit}):", "", "```", *(r[0] for r in plan), "```", ""]
        conn.rollback()
        rows = conn.execute(query("claim_jobs"), claim).fetchall()
        ack = {
            "ids": [r[0] for r in rows],
            "tokens": [r[6] for r in rows],
            "results": [None] * len(rows),
        }
        plan = conn.execute("EXPLAIN (ANALYZE, BUFFERS) " + query("ack_jobs"), ack).fetchall()
        out += [f"`ack_jobs` ({len(rows)} jobs):", "", "```", *(r[0] for r in plan), "```", ""]
        conn.rollback()
    return "\n".join(out)


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--dsn")
    parser.add_argument("--jobs", type=int, default=200_000)
    parser.add_argument("--concurrency", type=int, default=pgqueue_driver.DEFAULT_CONCURRENCY)
    parser.add_argument("--explain-depths", default="50000,1000000")
    parser.add_argument("--no-spy", action="store_true", help="no py-spy (CPU split only)")
    parser.add_argument("--pgoptions", default="", help="PGOPTIONS for the worker's sessions")
    parser.add_argument(
        "--sync", action="store_true", help="plain `def` no-op jobs (the thread pool)"
    )
    args = parser.parse_args(argv)
    RESULTS.mkdir(exist_ok=True)
    out = RESULTS / f"profile-{time.strftime('%Y%m%d-%H%M%S')}"
    settings = None if args.dsn else statements.PRELOAD
    with server(args.dsn, settings) as admin:
        dsn = fresh_database(admin, "bench_profile")
        sections = [
            profile(
                admin,
                dsn,
                args.jobs,
                args.concurrency,
                not args.no_spy,
                out,
                args.pgoptions,
                args.sync,
            )
        ]
        for depth in (int(d) for d in args.explain_depths.split(",") if d.strip()):
            sections.append(explain(dsn, depth, args.concurrency))
    report = "\n\n".join(sections)
    out.with_suffix(".md").write_text(report + "\n")
    print(report)
    print(f"\nwritten to {out.with_suffix('.md')}")


if __name__ == "__main__":
    main()
