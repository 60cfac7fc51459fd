"""Side by side: pgqueue, its peers and the raw SQL ceiling, on one PostgreSQL, in one run.

    python -m benchmarks.compare [--dsn DSN] [--runs 3] [--quick] [--systems raw,pgqueue,...]

Starts an embedded PostgreSQL (stock settings, ``pg_stat_statements`` preloaded) unless ``--dsn``
is given, installs the peers into the benchmark's own environments (``benchmarks/peers_env.py``)
and measures, for every system through the same driver protocol
(``benchmarks/drivers/protocol.py``):

* enqueue, one job per transaction, 1 and 8 producers;
* bulk enqueue of 100,000 jobs through the system's batch API;
* drain 50,000 pre-enqueued no-op jobs with 1 and 2 worker processes (measured inside the
  handlers from the first job started to the last, so start-up and shutdown never count);
* enqueue -> start latency p50/p99 at 200 jobs/s with one idle worker (LISTEN/NOTIFY path);
* the drain again with 1,000,000 jobs waiting (a fixed window; the queue stays deep);
* statements per 1,000 jobs (``pg_stat_statements``) for single enqueue, bulk and the drain.

Systems run interleaved within each run, so machine noise spreads over all of them. Prints a
table of medians (min-max) with the ratios pgqueue/peer and pgqueue/raw, and writes it to
``docs/benchmarks.md`` (not with ``--quick``) and the raw figures to ``benchmarks/.results/``.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import signal
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import psycopg
from psycopg.conninfo import conninfo_to_dict

from benchmarks import report, statements
from benchmarks.common import fresh_database, machine, server
from benchmarks.systems import ALL, ROOT, System, build

RESULTS_DIR = ROOT / "benchmarks" / ".results"
DEEP_FILL_CHUNK = 50_000


@dataclass(frozen=True)
class Sizes:
    enqueue_1: int
    enqueue_8: int
    bulk: int
    drain: int
    latency_rate: float
    latency_seconds: float
    deep: int
    deep_window: float
    ready_wait: float  # workers' start-up before jobs arrive
    drain_timeout: float


FULL = Sizes(3_000, 8_000, 100_000, 50_000, 200, 10, 1_000_000, 10, 4, 300)
QUICK = Sizes(300, 400, 5_000, 3_000, 200, 2, 20_000, 2, 3, 60)


@dataclass(frozen=True)
class Workload:
    key: str
    label: str
    unit: str
    higher_is_better: bool = True


def workloads(sizes: Sizes) -> list[Workload]:
    return [
        Workload("enqueue_1", "enqueue, 1 job per transaction, 1 producer", "jobs/s"),
        Workload("enqueue_8", "enqueue, 1 job per transaction, 8 producers", "jobs/s"),
        Workload("bulk", f"bulk enqueue, {sizes.bulk:,} jobs (batch API)", "jobs/s"),
        Workload("drain_1", f"drain {sizes.drain:,} no-op jobs, 1 worker process", "jobs/s"),
        Workload("drain_2", f"drain {sizes.drain:,} no-op jobs, 2 worker processes", "jobs/s"),
        Workload(
            "latency_p50",
            f"enqueue->start p50 at {sizes.latency_rate:g} jobs/s, idle worker",
            "ms",
            higher_is_better=False,
        ),
        Workload(
            "latency_p99",
            f"enqueue->start p99 at {sizes.latency_rate:g} jobs/s, idle worker",
            "ms",
            higher_is_better=False,
        ),
        Workload("deep_1", f"drain with {sizes.deep:,} waiting, 1 worker process", "jobs/s"),
        Workload("deep_2", f"drain with {sizes.deep:,} waiting, 2 worker processes", "jobs/s"),
    ]


@dataclass
class Results:
    figures: dict[str, dict[str, list[float]]] = field(default_factory=dict)
    statements: dict[str, dict[str, float]] = field(default_factory=dict)
    breakdown: dict[str, list[tuple[str, int]]] = field(default_factory=dict)
    notes: list[str] = field(default_factory=list)

    def add(self, workload: str, system: str, value: float) -> None:
        self.figures.setdefault(workload, {}).setdefault(system, []).append(value)


# -- database helpers ---------------------------------------------------------------------------


def scalar(dsn: str, query: str) -> Any:
    with psycopg.connect(dsn, autocommit=True) as conn:
        row = conn.execute(statements.harness(query)).fetchone()
    return row[0] if row else None


def execute(dsn: str, query: str) -> None:
    with psycopg.connect(dsn, autocommit=True) as conn:
        conn.execute(statements.harness(query))


def wait_until(check: Callable[[], bool], timeout: float, every: float = 0.1) -> bool:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if check():
            return True
        time.sleep(every)
    return False


# -- workers ------------------------------------------------------------------------------------


class Workers:
    """Worker processes of one system; each writes its job stats to ``stats_dir`` at exit."""

    def __init__(self, system: System, dsn: str, count: int, tmp: Path, latency: Path | None):
        self.system = system
        self.dir = Path(tempfile.mkdtemp(dir=tmp, prefix=f"{system.key}-workers-"))
        env = {**system.env(dsn), "BENCH_STATS_DIR": str(self.dir)}
        if latency is not None:
            env["BENCH_LATENCY_FILE"] = str(latency)
        self.logs = [self.dir / f"worker-{i}.log" for i in range(count)]
        self.procs = []
        for log in self.logs:
            with log.open("wb") as out:
                self.procs.append(
                    subprocess.Popen(
                        system.work_command(dsn),
                        cwd=ROOT,
                        env=env,
                        stdout=out,
                        stderr=subprocess.STDOUT,
                    )
                )

    def check_alive(self) -> None:
        for proc, log in zip(self.procs, self.logs, strict=True):
            if proc.poll() is not None:
                raise RuntimeError(
                    f"{self.system.label} worker exited early ({proc.returncode}):\n"
                    + log.read_text(errors="replace")[-3000:]
                )

    def stop(self) -> list[dict[str, float]]:
        for proc in self.procs:
            if proc.poll() is None:
                proc.send_signal(signal.SIGTERM)
        for proc in self.procs:
            try:
                proc.wait(60)
            except subprocess.TimeoutExpired:
                proc.kill()
                proc.wait()
        return [json.loads(p.read_text()) for p in sorted(self.dir.glob("*.json"))]


@contextlib.contextmanager
def workers(
    system: System, dsn: str, count: int, tmp: Path, latency: Path | None = None
) -> Iterator[Workers]:
    running = Workers(system, dsn, count, tmp, latency)
    try:
        yield running
    finally:
        running.stop()


def drain_rate(stats: list[dict[str, float]]) -> tuple[float, int]:
    """Jobs/s over all processes, from the first job started to the last job run."""
    if not stats:
        return 0.0, 0
    count = int(sum(s["count"] for s in stats))
    elapsed = max(s["last"] for s in stats) - min(s["first"] for s in stats)
    return (count / elapsed if elapsed > 0 else 0.0), count


# -- the comparison -----------------------------------------------------------------------------


@dataclass
class Harness:
    admin: str
    sizes: Sizes
    tmp: Path
    results: Results
    count_statements: bool
    only: set[str] | None = None  # workload keys to run (None: all)

    def wanted(self, key: str) -> bool:
        return self.only is None or key in self.only

    @contextlib.contextmanager
    def counting(self, db: str, system: System, workload: str, jobs: Callable[[], int]):
        """Count the statements ``system`` sends to ``db`` inside the block (first run only)."""
        if not self.count_statements or (system.key, workload) in self._counted:
            yield
            return
        self._counted.add((system.key, workload))
        statements.reset(self.admin)
        yield
        name = conninfo_to_dict(db)["dbname"]
        counted = statements.read(self.admin, str(name))
        self.results.statements.setdefault(system.key, {})[workload] = counted.per_thousand(jobs())
        if workload == "drain_1":
            self.results.breakdown[system.key] = counted.by_statement[:12]

    def __post_init__(self) -> None:
        self._counted: set[tuple[str, str]] = set()

    def shallow(self, system: System, db: str) -> None:
        sizes, add = self.sizes, self.results.add
        for key, producers, count in (
            ("enqueue_1", 1, sizes.enqueue_1),
            ("enqueue_8", 8, sizes.enqueue_8),
        ):
            if self.wanted(key):
                execute(db, system.reset_sql)
                with self.counting(db, system, key, lambda c=count: c):  # type: ignore[misc]
                    rate = system.call(
                        db, "enqueue", "--producers", str(producers), "--count", str(count)
                    )["rate"]
                add(key, system.key, rate)
                log(system, key, f"{rate:,.0f} jobs/s")
        if self.wanted("bulk"):
            execute(db, system.reset_sql)
            with self.counting(db, system, "bulk", lambda: sizes.bulk):
                rate = system.call(db, "bulk", "--count", str(sizes.bulk))["rate"]
            add("bulk", system.key, rate)
            log(system, "bulk", f"{rate:,.0f} jobs/s")
        for processes in (1, 2):
            key = f"drain_{processes}"
            if self.wanted(key):
                rate = self.drain(system, db, processes, key)
                add(key, system.key, rate)
        if self.wanted("latency_p50") or self.wanted("latency_p99"):
            p50, p99 = self.latency(system, db)
            add("latency_p50", system.key, p50)
            add("latency_p99", system.key, p99)

    def drain(self, system: System, db: str, processes: int, key: str) -> float:
        sizes = self.sizes
        execute(db, system.reset_sql)
        # Pre-enqueued, in one call of the system's batch API, then analyzed as autovacuum would
        # have it on a queue that has been this deep for a while. (Analyzing the empty table and
        # then bursting jobs in makes some claims plan for an empty table: the raw ceiling's
        # claim turns into a sort of every waiting row.)
        system.call(db, "bulk", "--count", str(sizes.drain), "--atomic")
        execute(db, "VACUUM ANALYZE")
        with workers(system, db, processes, self.tmp) as running:
            # Counted from the workers' start (their start-up statements included, a handful)
            # until the queue is empty (their shutdown not).
            with self.counting(db, system, key, lambda: sizes.drain):

                def drained() -> bool:
                    running.check_alive()
                    return not scalar(db, system.pending_sql)

                finished = wait_until(drained, sizes.drain_timeout)
            stats = running.stop()
        rate, done = drain_rate(stats)
        if not finished:
            self.results.notes.append(
                f"{system.label}, {key}: not finished after {sizes.drain_timeout:.0f} s; "
                f"rate over the {done:,} jobs run"
            )
        elif done < sizes.drain:
            self.results.notes.append(
                f"{system.label}, {key}: handlers counted {done:,} of {sizes.drain:,} jobs"
            )
        log(system, key, f"{rate:,.0f} jobs/s ({done:,} jobs)")
        return rate

    def latency(self, system: System, db: str) -> tuple[float, float]:
        sizes = self.sizes
        execute(db, system.reset_sql)
        path = Path(tempfile.mkstemp(dir=self.tmp, prefix=f"{system.key}-latency-")[1])
        with workers(system, db, 1, self.tmp, latency=path) as running:
            time.sleep(sizes.ready_wait)
            running.check_alive()
            sent = system.call(
                db,
                "latency",
                "--rate",
                str(sizes.latency_rate),
                "--seconds",
                str(sizes.latency_seconds),
            )["sent"]
            wait_until(lambda: len(path.read_text().splitlines()) >= sent, 30)
        delays = sorted(float(x) * 1000 for x in path.read_text().split())
        if len(delays) < sent:
            self.results.notes.append(
                f"{system.label}, latency: {len(delays)} of {sent} jobs started within 30 s"
            )
        if not delays:
            return float("nan"), float("nan")
        p50 = statistics.median(delays)
        p99 = delays[min(len(delays) - 1, int(len(delays) * 0.99))]
        log(system, "latency", f"p50 {p50:.1f} ms, p99 {p99:.1f} ms ({len(delays)} jobs)")
        return p50, p99

    def deep(self, system: System, db: str, first: bool) -> None:
        sizes = self.sizes
        for processes in (1, 2):
            key = f"deep_{processes}"
            if not self.wanted(key):
                continue
            if first and processes == 1:
                execute(db, system.reset_sql)
            waiting = int(scalar(db, system.waiting_sql) or 0)
            if waiting < sizes.deep:
                started = time.perf_counter()
                system.call(
                    db,
                    "bulk",
                    "--count",
                    str(sizes.deep - waiting),
                    "--chunk",
                    str(DEEP_FILL_CHUNK),
                )
                log(
                    system,
                    key,
                    f"filled {sizes.deep - waiting:,} in {time.perf_counter() - started:.0f} s",
                )
            execute(db, "VACUUM ANALYZE")
            with workers(system, db, processes, self.tmp) as running:
                time.sleep(sizes.ready_wait + sizes.deep_window)
                running.check_alive()
                stats = running.stop()
            rate, count = drain_rate(stats)
            self.results.add(key, system.key, rate)
            log(system, key, f"{rate:,.0f} jobs/s ({count:,} jobs)")


def log(system: System, key: str, message: str) -> None:
    print(f"  {system.label:<16} {key:<12} {message}", flush=True)


def main(argv: list[str] | None = None, sizes_override: Sizes | None = None) -> Results:
    """Run the comparison; ``sizes_override`` lets the smoke test use even smaller sizes."""
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--dsn", help="server to measure (default: a new embedded one)")
    parser.add_argument("--runs", type=int, help="runs per figure (default 3; 1 with --quick)")
    parser.add_argument("--quick", action="store_true", help="small sizes, for smoke runs")
    parser.add_argument(
        "--systems", default=",".join(ALL), help=f"comma-separated subset of {','.join(ALL)}"
    )
    parser.add_argument("--workloads", help="comma-separated subset of workload keys")
    parser.add_argument("--concurrency", type=int, default=64, help="pgqueue worker slots")
    parser.add_argument("--docs", type=Path, help="markdown file to write the table into")
    parser.add_argument("--no-docs", action="store_true")
    parser.add_argument("--results-dir", type=Path, default=RESULTS_DIR)
    args = parser.parse_args(argv)
    sizes = sizes_override or (QUICK if args.quick else FULL)
    runs = args.runs or (1 if args.quick else 3)
    keys = [k.strip() for k in args.systems.split(",") if k.strip()]
    unknown = sorted(set(keys) - set(ALL))
    if unknown:
        parser.error(f"unknown systems: {', '.join(unknown)}")
    only = {k.strip() for k in args.workloads.split(",")} if args.workloads else None
    docs = None if args.no_docs else (args.docs or (None if args.quick else report.DOCS))

    systems = build(keys, args.concurrency)
    results = Results()
    settings = None if args.dsn else statements.PRELOAD
    with server(args.dsn, settings) as admin, tempfile.TemporaryDirectory() as tmp:
        count_statements = statements.available(admin)
        if not count_statements:
            results.notes.append("pg_stat_statements is not loaded: no statement counts")
        databases = {}
        for system in systems:
            db = fresh_database(admin, f"bench_{system.key}", migrated=False)
            system.call(db, "setup")
            databases[system.key] = db
        described = machine(admin)
        load_before = os.getloadavg()
        print(f"machine: {described}; load average {load_before[0]:.2f}", flush=True)
        harness = Harness(admin, sizes, Path(tmp), results, count_statements, only)
        started = time.perf_counter()
        for run in range(runs):
            print(f"run {run + 1}/{runs}", flush=True)
            for system in systems:
                harness.shallow(system, databases[system.key])
        for run in range(runs):
            print(f"deep queue, run {run + 1}/{runs}", flush=True)
            for system in systems:
                harness.deep(system, databases[system.key], first=run == 0)
        elapsed = time.perf_counter() - started
        load_after = os.getloadavg()
    context = report.Context(
        machine=described,
        command="python -m benchmarks.compare "
        + " ".join(argv if argv is not None else sys.argv[1:]),
        runs=runs,
        load=(load_before[0], load_after[0]),
        minutes=elapsed / 60,
        systems=systems,
        workloads=[w for w in workloads(sizes) if w.key in results.figures],
    )
    table = report.render(context, results)
    print()
    print(table)
    args.results_dir.mkdir(parents=True, exist_ok=True)
    stamp = time.strftime("%Y%m%d-%H%M%S")
    (args.results_dir / f"compare-{stamp}.json").write_text(
        json.dumps(
            {
                "figures": results.figures,
                "statements": results.statements,
                "breakdown": results.breakdown,
                "notes": results.notes,
                "machine": described,
                "sizes": sizes.__dict__,
            },
            indent=1,
        )
    )
    if docs is not None:
        report.write(docs, table)
        print(f"\nwritten to {docs}")
    return results


if __name__ == "__main__":
    main()
