"""Steady load and idle latency, this checkout against others in the same rounds, fsync on.

    python -m benchmarks.steady [--dsn DSN] [--rates 2000,5000] [--seconds 10] [--producers 4]
                                [--producer-threads 1] [--group-commit-off]
                                [--latency-jobs 1000] [--latency-rate 100] [--runs 3]
                                [--no-raw] [--tree PATH ...]

Starts an embedded PostgreSQL with stock settings (``fsync`` and ``synchronous_commit`` on)
unless ``--dsn`` is given. Per run and checkout (``--tree``: its worker and producer processes
import that checkout, as in `benchmarks.latency`):

* **steady load**, per rate: two ``pgq work --concurrency 64`` processes running an ``async
  def`` no-op, and ``--producers`` processes sharing the rate, one job per transaction with
  ``PgQueue.enqueue``, all starting at the same moment (a producer that falls behind sends
  fewer jobs, it does not run longer). ``--producer-threads N``: each producer process runs N
  threads sharing its rate and one client, as a threaded web server does (group commit
  writes the calls that arrive together in one transaction); ``--group-commit-off`` adds a
  column, this checkout with ``PgQueue(group_commit=False)``.
  Figures: the rate the producers reached, their enqueue call p50/p99, enqueue -> start
  p50/p99/p99.9 (wall clock, same machine), the backlog (due and unfinished jobs, sampled every
  0.25 s: least-squares growth and peak), the notifications producers sent per 1,000 jobs
  (counted by a LISTEN connection of the harness: every one is a commit PostgreSQL serialised),
  the share of samples in which some worker was registered idle, and the workers' claims per
  second during the load and in the two seconds after its last job started (the empty queue),
  and how busy the machine's cores were while the producers ran;
* **ceilings** (``--no-raw`` leaves them out), per rate, once per run, the same producers with
  no worker running: **raw INSERT**, a one-row INSERT per transaction into a minimal table
  (what the machine's commits allow at that moment), and **enqueue, no worker**, this
  checkout's ``PgQueue.enqueue`` (what the producers reach when they have the cores to
  themselves);
* **idle latency**: `benchmarks.latency`'s measurement (one worker, one producer at
  ``--latency-rate``, ``async def`` handler), and ``--quiet-jobs`` single jobs ``--quiet-gap``
  seconds apart (each one after a quiet spell, so it arrives by NOTIFY).

The worker processes run `benchmarks.latency_tasks` with its stage timestamps on (the claims are
counted from them), in every checkout alike.

Prints every run, then the medians (min-max) over the runs as a Markdown table.
"""

from __future__ import annotations

import argparse
import json
import math
import os
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path
from typing import Any

import psycopg

from benchmarks import latency, load_stats
from benchmarks.common import fresh_database, machine, server

ROOT = Path(__file__).resolve().parent.parent
TASK = latency.TASKS["async"]
WORKERS = 2
#: The ceilings' columns (see ceiling).
CEILINGS = {"raw": "raw INSERT", "enqueue": "enqueue, no worker"}
SAMPLE_EVERY = 0.25
Sent = tuple[float, float]  # sent, the enqueue returned (wall clock)
AFTER = 2.0  # seconds of empty queue whose claims are counted
SETTLE = 30.0  # longest wait for the last jobs to start
PRODUCERS_START = 5.0  # seconds for the producer processes to start: they begin together
GROUP_COMMIT_OFF = "this, group commit off"


def tree_dir(env: dict[str, str]) -> str:
    return env["PYTHONPATH"].split(os.pathsep)[-1]


def scalar(dsn: str, query: str) -> Any:
    with psycopg.connect(dsn, autocommit=True) as conn:
        row = conn.execute(query).fetchone()
    return row[0] if row else None


def wait_registered(dsn: str, procs: list[subprocess.Popen[bytes]]) -> None:
    """Until every worker listens and is registered idle."""
    deadline = time.monotonic() + latency.READY_TIMEOUT
    while time.monotonic() < deadline:
        if any(p.poll() is not None for p in procs):
            sys.exit("a worker exited early")
        listening = scalar(
            dsn,
            "SELECT count(*) FROM pg_stat_activity WHERE application_name LIKE"
            " 'pgqueue listener%%' AND datname = current_database()",
        )
        if listening >= len(procs) and scalar(
            dsn, "SELECT count(*) FROM pgqueue.idle_workers"
        ) >= len(procs):
            time.sleep(0.5)  # the handshakes and their last claims
            return
        time.sleep(0.1)
    sys.exit("the workers did not start listening")


class NotifyCounter:
    """Counts the pgqueue_jobs notifications this run's producers sent."""

    def __init__(self, dsn: str) -> None:
        self.count = 0
        self._stop = threading.Event()
        self._ready = threading.Event()
        self._thread = threading.Thread(target=self._listen, args=(dsn,), daemon=True)
        self._thread.start()
        self._ready.wait(10)

    def _listen(self, dsn: str) -> None:
        with psycopg.connect(dsn, autocommit=True) as conn:
            conn.execute("LISTEN pgqueue_jobs")
            self._ready.set()
            while not self._stop.is_set():
                for _ in conn.notifies(timeout=0.2):
                    self.count += 1

    def stop(self) -> int:
        self._stop.set()
        self._thread.join(5)
        return self.count


def starts_and_claims(paths: list[Path]) -> tuple[dict[int, float], list[list[tuple[float, int]]]]:
    """Handler starts (job id -> time), and per worker its claims (sent, rows)."""
    starts: dict[int, float] = {}
    claims: list[list[tuple[float, int]]] = []
    for path in paths:
        mine: list[tuple[float, int]] = []
        text = path.read_text() if path.exists() else ""
        for line in text.splitlines():
            kind, *fields = line.split()
            if kind == "start" and len(fields) == 2:
                starts[int(fields[1])] = float(fields[0])
            elif kind == "claim" and len(fields) >= 2:
                mine.append((float(fields[0]), len(fields) - 2))
        claims.append(mine)
    return starts, claims


def start_producers(
    command: list[str],
    rate: float,
    seconds: float,
    producers: int,
    env: dict[str, str],
    tmp: Path,
) -> tuple[list[subprocess.Popen[bytes]], list[Path]]:
    """``producers`` processes of ``latency_tasks`` sharing ``rate``, returned when they start
    sending (together, once all have had time to import)."""
    outs = [Path(tempfile.mkstemp(dir=tmp, prefix="sent-")[1]) for _ in range(producers)]
    start_at = time.time() + PRODUCERS_START
    running = [
        subprocess.Popen(
            [
                *[sys.executable, "-m", "pgq_latency_tasks", *command],
                *[f"{rate / producers:g}", f"{seconds:g}", f"{start_at:.3f}", str(out)],
            ],
            env=env,
            cwd=tree_dir(env),
        )
        for out in outs
    ]
    time.sleep(max(0.0, start_at - time.time()))
    return running, outs


def produced(running: list[subprocess.Popen[bytes]], outs: list[Path]) -> dict[int, Sent]:
    """What the producers sent: job id -> (sent, the call returned)."""
    if any(p.wait() for p in running):
        sys.exit("a producer failed")
    return {job: (t0, t1) for out in outs for job, t0, t1 in json.loads(out.read_text())}


def cpu_ticks() -> tuple[int, int]:
    """(busy, total) jiffies of all cores since boot (``/proc/stat``; zeros elsewhere)."""
    try:
        fields = [int(f) for f in Path("/proc/stat").read_text().split("\n", 1)[0].split()[1:]]
    except OSError:
        return 0, 0
    idle = fields[3] + (fields[4] if len(fields) > 4 else 0)  # idle + iowait
    return sum(fields) - idle, sum(fields)


def cpu_busy(since: tuple[int, int]) -> float:
    """Share of all cores busy since ``since`` (cpu_ticks()), in percent: the whole machine,
    other work on it included."""
    busy, total = (now - then for now, then in zip(cpu_ticks(), since, strict=True))
    return busy / total * 100 if total else math.nan


def producer_figures(sent: dict[int, Sent], seconds: float) -> dict[str, float]:
    calls = [(t1 - t0) * 1e3 for t0, t1 in sent.values()]
    return {
        "reached": len(sent) / seconds,
        "call_p50": load_stats.percentile(calls, 50),
        "call_p99": load_stats.percentile(calls, 99),
    }


def ceiling(
    dsn: str, kind: str, rate: float, seconds: float, producers: int, tmp: Path
) -> dict[str, float]:
    """The same producers with no worker running: ``raw``, a one-row INSERT per transaction
    into a minimal table (what the machine's commits allow at that moment), or ``enqueue``,
    this checkout's ``PgQueue.enqueue`` (what the producers alone reach)."""
    with psycopg.connect(dsn, autocommit=True) as conn:
        conn.execute(
            "CREATE TABLE IF NOT EXISTS raw_steady (id bigint GENERATED ALWAYS AS IDENTITY"
            " PRIMARY KEY, args jsonb NOT NULL)"
        )
        conn.execute("TRUNCATE raw_steady, pgqueue.jobs")
    env = latency.system_under_test(ROOT, tmp)
    command = ["raw", dsn] if kind == "raw" else ["steady", dsn, TASK]
    running, outs = start_producers(command, rate, seconds, producers, env, tmp)
    before = cpu_ticks()
    sent = produced(running, outs)
    return {**producer_figures(sent, seconds), "cpu": cpu_busy(before)}


def steady(
    dsn: str, env: dict[str, str], rate: float, seconds: float, producers: int, tmp: Path
) -> dict[str, float]:
    with psycopg.connect(dsn, autocommit=True) as conn:
        conn.execute("TRUNCATE pgqueue.jobs, pgqueue.job_history, pgqueue.dead_letters")
    stages = [Path(tempfile.mkstemp(dir=tmp, prefix="steady-")[1]) for _ in range(WORKERS)]
    procs = [latency.start_worker(dsn, path, env) for path in stages]
    try:
        wait_registered(dsn, procs)
        running, outs = start_producers(["steady", dsn, TASK], rate, seconds, producers, env, tmp)
        before = cpu_ticks()
        counter = NotifyCounter(dsn)
        samples: list[tuple[float, float]] = []
        registered = 0
        with psycopg.connect(dsn, autocommit=True) as conn:
            while any(p.poll() is None for p in running):
                row = conn.execute(
                    "SELECT (SELECT count(*) FROM pgqueue.jobs WHERE run_at <= now()),"
                    " (SELECT count(*) FROM pgqueue.idle_workers)"
                ).fetchone()
                assert row is not None
                samples.append((time.time(), float(row[0])))
                registered += bool(row[1])
                time.sleep(SAMPLE_EVERY)
        busy = cpu_busy(before)
        notifications = counter.stop()
        sent = produced(running, outs)
        deadline = time.monotonic() + SETTLE
        while time.monotonic() < deadline:
            starts, _ = starts_and_claims(stages)
            if all(job in starts for job in sent):
                break
            time.sleep(0.2)
        time.sleep(AFTER)
    finally:
        for proc in procs:
            latency.stop(proc)
    starts, claims = starts_and_claims(stages)
    delays = [(starts[job] - t0) * 1e3 for job, (t0, _) in sent.items() if job in starts]
    if len(delays) < len(sent):
        print(f"  warning: {len(sent) - len(delays)} of {len(sent)} jobs did not start")
    first = min(t0 for t0, _ in sent.values())
    last = max(starts.values())
    during = sum(1 for mine in claims for at, _ in mine if first <= at <= last)
    after = sum(1 for mine in claims for at, _ in mine if last < at <= last + AFTER)
    grown = load_stats.backlog(samples)
    return {
        **producer_figures(sent, seconds),
        "p50": load_stats.percentile(delays, 50),
        "p99": load_stats.percentile(delays, 99),
        "p999": load_stats.percentile(delays, 99.9),
        "growth": grown.growth,
        "peak": grown.peak,
        "notifies": notifications / len(sent) * 1000,
        "registered": registered / max(1, len(samples)) * 100,
        "claims": during / (last - first) / WORKERS,
        "claims_after": after / AFTER / WORKERS,
        "cpu": busy,
    }


def quiet(dsn: str, env: dict[str, str], jobs: int, gap: float, tmp: Path) -> dict[str, float]:
    """``jobs`` single jobs ``gap`` seconds apart into an idle worker: enqueue -> start (ms)."""
    result = latency.run_once(dsn, "async", jobs, 1 / gap, env, tmp)
    return {"p50": result["p50"], "max": result["p999"]}


FIGURES = {
    "reached": ("producers reached (jobs/s)", "{:,.0f}"),
    "call_p50": ("enqueue call p50 (ms)", "{:.1f}"),
    "call_p99": ("enqueue call p99 (ms)", "{:.1f}"),
    "p50": ("enqueue->start p50 (ms)", "{:.1f}"),
    "p99": ("enqueue->start p99 (ms)", "{:.1f}"),
    "p999": ("enqueue->start p99.9 (ms)", "{:.1f}"),
    "growth": ("backlog growth (jobs/s)", "{:.1f}"),
    "peak": ("largest backlog (jobs)", "{:,.0f}"),
    "notifies": ("notifications per 1,000 jobs", "{:,.0f}"),
    "registered": ("samples with a worker registered idle (%)", "{:.0f}"),
    "claims": ("claims/s per worker during the load", "{:,.0f}"),
    "claims_after": ("claims/s per worker, 2 s after the last job", "{:,.0f}"),
    "cpu": ("CPU busy while the producers ran (% of all cores)", "{:.0f}"),
    "max": ("enqueue->start max (ms)", "{:.1f}"),
}


def cell(values: list[float], form: str) -> str:
    if len(values) == 1:
        return form.format(values[0])
    low, mid, high = min(values), statistics.median(values), max(values)
    return f"{form.format(mid)} ({form.format(low)}-{form.format(high)})"


def table(results: dict[str, dict[str, list[float]]], names: list[str]) -> str:
    lines = [f"| median (min-max) | {' | '.join(names)} |", "|---" * (len(names) + 1) + "|"]
    sections = sorted({key.rsplit(" ", 1)[0] for key in results})
    for section in sections:
        for figure, (label, form) in FIGURES.items():
            row = [results.get(f"{section} {name}", {}).get(figure) for name in names]
            if any(row):
                cells = [cell(values, form) if values else "" for values in row]
                lines.append(f"| {section}: {label} | {' | '.join(cells)} |")
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> dict[str, dict[str, list[float]]]:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawTextHelpFormatter)
    p.add_argument("--dsn", help="an existing server (default: a new embedded one)")
    p.add_argument("--rates", default="2000,5000", help="comma-separated jobs/s")
    p.add_argument("--seconds", type=float, default=10.0, help="length of each steady load")
    p.add_argument("--producers", type=int, default=4)
    p.add_argument("--producer-threads", type=int, default=1, help="threads per producer process")
    p.add_argument(
        "--group-commit-off",
        action="store_true",
        help="add this checkout with group commit off as a column",
    )
    p.add_argument("--latency-jobs", type=int, default=1000)
    p.add_argument("--latency-rate", type=float, default=100.0)
    p.add_argument("--quiet-jobs", type=int, default=10)
    p.add_argument("--quiet-gap", type=float, default=2.0, help="seconds between quiet jobs")
    p.add_argument("--runs", type=int, default=3)
    p.add_argument("--no-raw", dest="raw", action="store_false", help="leave out the ceilings")
    p.add_argument("--tree", type=Path, action="append", default=[], help="another checkout")
    p.add_argument(
        "--allow-fsync-off", action="store_true", help="smoke tests: figures mean nothing"
    )
    args = p.parse_args(argv)
    rates = [float(r) for r in args.rates.split(",") if r]
    trees = {"this": ROOT, **{str(t): t.resolve() for t in args.tree}}
    results: dict[str, dict[str, list[float]]] = {}

    def add(section: str, name: str, figures: dict[str, float]) -> None:
        for key, value in figures.items():
            results.setdefault(f"{section} {name}", {}).setdefault(key, []).append(value)

    with server(args.dsn) as admin, tempfile.TemporaryDirectory() as tmp:
        if not args.allow_fsync_off:
            latency.check_durable(admin)
        dsn = fresh_database(admin, "pgqueue_steady")
        print(machine(dsn), flush=True)
        envs = latency.environments(trees, Path(tmp))
        if args.group_commit_off:
            envs[GROUP_COMMIT_OFF] = {**envs["this"], "BENCH_GROUP_COMMIT": "off"}
        threads = {"BENCH_PRODUCER_THREADS": str(args.producer_threads)}
        os.environ.update(threads)  # the ceilings' producers
        envs = {name: {**env, **threads} for name, env in envs.items()}
        for run in range(args.runs):
            for rate in rates if args.raw else []:
                for kind, column in CEILINGS.items():
                    figures = ceiling(dsn, kind, rate, args.seconds, args.producers, Path(tmp))
                    add(f"steady {rate:,.0f}", column, figures)
                    shown = ", ".join(f"{k} {v:,.1f}" for k, v in figures.items())
                    print(f"run {run + 1} {column} steady {rate:,.0f}: {shown}", flush=True)
            # Checkouts alternate their order from run to run: none always runs on a warmer cache.
            order = list(envs.items())
            for name, env in order if run % 2 == 0 else order[::-1]:
                for rate in rates:
                    figures = steady(dsn, env, rate, args.seconds, args.producers, Path(tmp))
                    add(f"steady {rate:,.0f}", name, figures)
                    shown = ", ".join(f"{k} {v:,.1f}" for k, v in figures.items())
                    print(f"run {run + 1} {name} steady {rate:,.0f}: {shown}", flush=True)
                if args.latency_jobs:
                    result = latency.run_once(
                        dsn, "async", args.latency_jobs, args.latency_rate, env, Path(tmp)
                    )
                    figures = {k: result[k] for k in ("p50", "p99", "p999")}
                    add(f"idle {args.latency_rate:g} jobs/s", name, figures)
                    print(f"run {run + 1} {name} idle: {figures}", flush=True)
                if args.quiet_jobs:
                    figures = quiet(dsn, env, args.quiet_jobs, args.quiet_gap, Path(tmp))
                    add(f"quiet, a job every {args.quiet_gap:g} s", name, figures)
                    print(f"run {run + 1} {name} quiet: {figures}", flush=True)
        print()
        print(table(results, [*envs, *(CEILINGS.values() if args.raw else [])]), flush=True)
        print("BENCH-RESULT " + json.dumps(results), flush=True)
    return results


if __name__ == "__main__":
    main()
