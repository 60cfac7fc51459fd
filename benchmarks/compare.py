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
* statements per 1,000 jobs (``pg_stat_statements``) for single enqueue, bulk and the drain;
* jobs that look like real ones: 10 ms ``time.sleep`` and ``asyncio.sleep`` jobs on 64 slots
  (as a share of the 6,400 jobs/s such a process could at best run), jobs writing one row to an
  application table through the worker's connection pool;
* steady load: producer processes at a fixed 2,000 and 5,000 jobs/s (one job per transaction)
  while 2 worker processes run: enqueue->start p50/p99/p99.9 and whether the backlog grows;
* mixed: 100,000 scheduled jobs coming due over a minute while the steady load runs at
  2,000 jobs/s: how late after their due time they start, and the steady jobs' latency.

Besides the PostgreSQL queues, the queues users would pick instead: Celery (prefork and threads
pools) and Dramatiq on Redis, and arq, each from its own virtualenv, on a private
``redis-server`` the harness starts (``benchmarks/redis_server.py``, persistence off).

Systems run interleaved within each run, so machine noise spreads over all of them. Prints a
table of medians (min-max) with the ratios pgqueue/peer and pgqueue/raw, and writes it to
``docs/benchmarks.md`` (not with ``--quick``) and the raw figures to ``benchmarks/.results/``.
"""

from __future__ import annotations

import argparse
import contextlib
import dataclasses
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

from benchmarks import load_stats, redis_server, report, statements
from benchmarks.common import fresh_database, machine, server
from benchmarks.drivers.protocol import RESULT_PREFIX, SLEEP
from benchmarks.systems import ALL, ROOT, RedisSystem, System, build

RESULTS_DIR = ROOT / "benchmarks" / ".results"
DEEP_FILL_CHUNK = 50_000
#: Seconds allowed for workers to start running jobs before scheduled ones come due.
WARM_UP = 8.0


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
    io: int = 32_000  # 10 ms jobs (5 s at the 64-slot ceiling)
    io_slots: int = 64
    row: int = 20_000
    steady_rates: tuple[int, ...] = (2_000, 5_000)
    steady_seconds: float = 20
    producers: int = 4  # producer processes sharing a steady rate
    mixed: int = 100_000  # scheduled jobs ...
    mixed_over: float = 60  # ... coming due over this many seconds ...
    mixed_rate: int = 2_000  # ... while this steady load runs
    settle: float = 30  # after the producers stop: longest wait for the last jobs to start


FULL = Sizes(3_000, 8_000, 100_000, 50_000, 200, 10, 1_000_000, 10, 4, 300)
QUICK = Sizes(
    300,
    400,
    5_000,
    3_000,
    200,
    2,
    20_000,
    2,
    3,
    60,
    io=3_000,
    row=2_000,
    steady_rates=(500,),
    steady_seconds=4,
    mixed=2_000,
    mixed_over=4,
    mixed_rate=500,
    settle=20,
)
#: Workload groups ``--workloads`` accepts besides single keys.
GROUPS = ("io", "row", "steady", "mixed")


@dataclass(frozen=True)
class Workload:
    key: str
    label: str
    unit: str
    higher_is_better: bool = True
    ratio: bool = True  # False: a ratio says nothing (a backlog's growth can be negative)


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
        *real_workloads(sizes),
    ]


def io_ceiling(sizes: Sizes) -> float:
    """Jobs/s of one process whose every slot runs 10 ms jobs back to back."""
    return sizes.io_slots / SLEEP


def real_workloads(sizes: Sizes) -> list[Workload]:
    ceiling = f"% of {io_ceiling(sizes):,.0f} jobs/s"
    rows = [
        Workload(
            "io_sync",
            f"{sizes.io:,} jobs of 10 ms `time.sleep`, {sizes.io_slots} slots, 1 process",
            ceiling,
        ),
        Workload(
            "io_async",
            f"{sizes.io:,} jobs of 10 ms `asyncio.sleep`, {sizes.io_slots} slots, 1 process",
            ceiling,
        ),
        Workload("row", f"{sizes.row:,} jobs writing one row each, 1 process", "jobs/s"),
    ]
    for rate in sizes.steady_rates:
        at = f"steady {rate:,} jobs/s, 2 worker processes"
        rows += [
            Workload(f"steady_{rate}_sent", f"{at}: producers reached", "jobs/s", ratio=False),
            Workload(f"steady_{rate}_p50", f"{at}: enqueue->start p50", "ms", False),
            Workload(f"steady_{rate}_p99", f"{at}: enqueue->start p99", "ms", False),
            Workload(f"steady_{rate}_p999", f"{at}: enqueue->start p99.9", "ms", False),
            Workload(f"steady_{rate}_growth", f"{at}: backlog growth", "jobs/s", False, False),
            Workload(f"steady_{rate}_peak", f"{at}: largest backlog", "jobs", False, False),
        ]
    mixed = (
        f"mixed: {sizes.mixed:,} due over {sizes.mixed_over:g} s + steady "
        f"{sizes.mixed_rate:,} jobs/s"
    )
    rows += [
        Workload("mixed_p50", f"{mixed}: steady jobs' enqueue->start p50", "ms", False),
        Workload("mixed_p99", f"{mixed}: steady jobs' enqueue->start p99", "ms", False),
        Workload("mixed_p999", f"{mixed}: steady jobs' enqueue->start p99.9", "ms", False),
        Workload("mixed_due_p50", f"{mixed}: scheduled jobs' due->start p50", "ms", False),
        Workload("mixed_due_p99", f"{mixed}: scheduled jobs' due->start p99", "ms", False),
        Workload("mixed_due_p999", f"{mixed}: scheduled jobs' due->start p99.9", "ms", False),
    ]
    return rows


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

    def __init__(
        self,
        system: System,
        dsn: str,
        count: int,
        tmp: Path,
        latency: Path | None,
        slots: int | None = None,
    ):
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
                        system.work_command(dsn, slots),
                        cwd=system.root,
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
    system: System,
    dsn: str,
    count: int,
    tmp: Path,
    latency: Path | None = None,
    slots: int | None = None,
) -> Iterator[Workers]:
    running = Workers(system, dsn, count, tmp, latency, slots)
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
        """``key`` is to run: named, or in a named group (``steady`` runs ``steady_2000_p50``)."""
        if self.only is None or key in self.only:
            return True
        return any(key.startswith(f"{group}_") for group in self.only)

    @contextlib.contextmanager
    def counting(self, db: str, system: System, workload: str, jobs: Callable[[], int]):
        """Count the statements ``system`` sends to ``db`` inside the block (first run only)."""
        counted_before = (system.key, workload) in self._counted
        if not self.count_statements or counted_before or isinstance(system, RedisSystem):
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
                system.reset(db)
                with self.counting(db, system, key, lambda c=count: c):  # type: ignore[misc]
                    rate = system.call(
                        db, "enqueue", "--producers", str(producers), "--count", str(count)
                    )["rate"]
                add(key, system.key, rate)
                log(system, key, f"{rate:,.0f} jobs/s")
        if self.wanted("bulk") and system.batch_api:
            system.reset(db)
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

    def drain(
        self,
        system: System,
        db: str,
        processes: int,
        key: str,
        *,
        task: str = "noop",
        count: int | None = None,
        slots: int | None = None,
        middle: bool = False,
    ) -> float:
        """Jobs/s of ``processes`` workers draining ``count`` pre-enqueued ``task`` jobs: from
        the first job started to the last, or (``middle``) between the starts of 10% and 90% of
        them, leaving out the ramp-up (a prefork pool still forking, pools opening)."""
        sizes = self.sizes
        count = count or sizes.drain
        system.reset(db)
        # Pre-enqueued, in one call of the system's batch API, then analyzed as autovacuum would
        # have it on a queue that has been this deep for a while. (Analyzing the empty table and
        # then bursting jobs in makes some claims plan for an empty table: the raw ceiling's
        # claim turns into a sort of every waiting row.)
        system.call(db, "bulk", "--count", str(count), "--atomic", "--task", task)
        execute(db, "VACUUM ANALYZE")
        with workers(system, db, processes, self.tmp, slots=slots) as running:
            # Counted from the workers' start (their start-up statements included, a handful)
            # until the queue is empty (their shutdown not).
            with self.counting(db, system, key, lambda: count):

                def drained() -> bool:
                    running.check_alive()
                    return not system.pending(db)

                finished = wait_until(drained, sizes.drain_timeout)
            stats = running.stop()
        rate, done = drain_rate(stats)
        if middle:
            buckets: list[Any] = [s.get("buckets") or {} for s in stats]
            rate = load_stats.middle_rate(buckets) or rate
        if not finished:
            self.results.notes.append(
                f"{system.label}, {key}: not finished after {sizes.drain_timeout:.0f} s; "
                f"rate over the {done:,} jobs run"
            )
        elif done < count:
            self.results.notes.append(
                f"{system.label}, {key}: handlers counted {done:,} of {count:,} jobs"
            )
        log(system, key, f"{rate:,.0f} jobs/s ({done:,} jobs)")
        return rate

    def real_jobs(self, system: System, db: str) -> None:
        """The 10 ms jobs (sync and async) and the row-writing jobs, each drained by one
        worker process; rates between the starts of 10% and 90% of the jobs."""
        sizes = self.sizes
        for key, task in (("io_sync", "sleep_sync"), ("io_async", "sleep_async")):
            if self.wanted(key) and task in system.kinds:
                rate = self.drain(
                    system,
                    db,
                    1,
                    key,
                    task=task,
                    count=sizes.io,
                    slots=sizes.io_slots,
                    middle=True,
                )
                self.results.add(key, system.key, rate / io_ceiling(sizes) * 100)
        if self.wanted("row") and "row" in system.kinds:
            rate = self.drain(system, db, 1, "row", task="row", count=sizes.row, middle=True)
            rows = int(scalar(db, "SELECT count(*) FROM bench_rows"))
            if rows != sizes.row:
                self.results.notes.append(
                    f"{system.label}, row: {rows:,} rows written for {sizes.row:,} jobs"
                )
            self.results.add("row", system.key, rate)

    def steady(self, system: System, db: str) -> None:
        for rate in self.sizes.steady_rates:
            prefix = f"steady_{rate}"
            if self.wanted(f"{prefix}_p50"):
                self.load(system, db, prefix, rate)
        if self.wanted("mixed_p50") and system.schedules:
            self.load(system, db, "mixed", self.sizes.mixed_rate, scheduled=self.sizes.mixed)

    def _fill_estimate(self, system: System, count: int) -> float:
        """Seconds the system's ``schedule`` should take for ``count`` jobs (generous)."""
        if system.batch_api:
            return 2 + count / 20_000
        measured = self.results.figures.get("enqueue_1", {}).get(system.key)
        rate = statistics.median(measured) * 0.7 if measured else 1_500.0
        return 2 + count / rate

    def warm_up(self, system: System, db: str, running: Workers, path: Path) -> int:
        """Wait until the workers run jobs (a few, sent at a slow pace): a fixed sleep is not
        enough for a worker that imports a lot on a busy machine. Returns the latency file's
        size then: the enqueue->start lines before it are the warm-up's."""
        time.sleep(self.sizes.ready_wait)
        running.check_alive()
        sent = system.call(db, "latency", "--rate", "20", "--seconds", "0.5")["sent"]

        def started() -> bool:
            running.check_alive()
            return len(path.read_text().splitlines()) >= sent

        if not wait_until(started, 60):
            raise RuntimeError(f"{system.label}: the workers ran no job within 60 s")
        return path.stat().st_size

    def load(self, system: System, db: str, prefix: str, rate: int, scheduled: int = 0) -> None:
        """``rate`` jobs/s from ``sizes.producers`` processes (one job per transaction, each
        stamped just before the call) into 2 worker processes; the due-and-unfinished count
        sampled every 0.25 s. With ``scheduled``: that many jobs coming due over
        ``sizes.mixed_over`` seconds while the producers run."""
        sizes = self.sizes
        system.reset(db)
        path = Path(tempfile.mkstemp(dir=self.tmp, prefix=f"{system.key}-{prefix}-")[1])
        seconds = sizes.steady_seconds
        start_at = 0.0
        if scheduled:
            # Due once the workers are up: their start and warm-up take seconds on a busy machine.
            start_at = (
                time.time() + self._fill_estimate(system, scheduled) + sizes.ready_wait + WARM_UP
            )
            done = system.call(
                db,
                "schedule",
                "--count",
                str(scheduled),
                "--start-at",
                f"{start_at:.3f}",
                "--over",
                str(sizes.mixed_over),
            )
            if done.get("late"):
                self.results.notes.append(
                    f"{system.label}, mixed: the scheduled jobs were written "
                    f"{done['late']:.1f} s after the first came due"
                )
            seconds = sizes.mixed_over + 2
        with workers(system, db, 2, self.tmp, latency=path) as running:
            skip = self.warm_up(system, db, running, path)
            if scheduled:
                time.sleep(max(0.0, start_at - 1 - time.time()))
            running.check_alive()
            each = rate / sizes.producers
            producers = [
                subprocess.Popen(
                    system.driver(
                        db, "latency", "--rate", f"{each:g}", "--seconds", f"{seconds:g}"
                    ),
                    cwd=ROOT,
                    env=system.env(db),
                    stdout=subprocess.PIPE,
                    stderr=subprocess.PIPE,
                    text=True,
                )
                for _ in range(sizes.producers)
            ]
            samples: list[tuple[float, float]] = []
            while any(p.poll() is None for p in producers):
                samples.append((time.time(), float(system.backlog(db))))
                running.check_alive()
                time.sleep(0.25)
            sent = elapsed = 0.0
            for proc in producers:
                out, err = proc.communicate()
                if proc.returncode != 0:
                    raise RuntimeError(
                        f"{system.label} producer failed:\n{out[-2000:]}\n{err[-3000:]}"
                    )
                result = produced(out)
                sent += result.get("sent", 0)
                elapsed = max(elapsed, result.get("seconds", seconds))
            expected = int(sent) + scheduled

            def delays() -> load_stats.Delays:
                # Scheduled jobs that came due during the warm-up count; its own jobs do not.
                data = path.read_bytes()
                warm = load_stats.parse_latency(data[:skip].decode().splitlines())
                rest = load_stats.parse_latency(data[skip:].decode().splitlines())
                return load_stats.Delays(rest.sent, warm.due + rest.due)

            wait_until(lambda: len(delays().sent) + len(delays().due) >= expected, sizes.settle)
        measured = delays()
        started = len(measured.sent) + len(measured.due)
        if started < expected:
            self.results.notes.append(
                f"{system.label}, {prefix}: {started:,} of {expected:,} jobs started within "
                f"{sizes.settle:.0f} s of the producers' end (percentiles over those)"
            )
        add = self.results.add
        ms = [d * 1000 for d in measured.sent]
        add(f"{prefix}_p50", system.key, load_stats.percentile(ms, 50))
        add(f"{prefix}_p99", system.key, load_stats.percentile(ms, 99))
        add(f"{prefix}_p999", system.key, load_stats.percentile(ms, 99.9))
        if scheduled:
            late = [d * 1000 for d in measured.due]
            add("mixed_due_p50", system.key, load_stats.percentile(late, 50))
            add("mixed_due_p99", system.key, load_stats.percentile(late, 99))
            add("mixed_due_p999", system.key, load_stats.percentile(late, 99.9))
        else:
            grown = load_stats.backlog(samples)
            add(f"{prefix}_sent", system.key, sent / elapsed if elapsed else 0.0)
            add(f"{prefix}_growth", system.key, grown.growth)
            add(f"{prefix}_peak", system.key, grown.peak)
        log(
            system,
            prefix,
            f"sent {sent / elapsed if elapsed else 0:,.0f} jobs/s; p50/p99/p99.9 "
            f"{load_stats.percentile(ms, 50):.1f}/{load_stats.percentile(ms, 99):.1f}/"
            f"{load_stats.percentile(ms, 99.9):.1f} ms; backlog peak "
            f"{max((v for _, v in samples), default=0):,.0f}",
        )

    def latency(self, system: System, db: str) -> tuple[float, float]:
        sizes = self.sizes
        system.reset(db)
        path = Path(tempfile.mkstemp(dir=self.tmp, prefix=f"{system.key}-latency-")[1])
        with workers(system, db, 1, self.tmp, latency=path) as running:
            skip = self.warm_up(system, db, running, path)
            sent = system.call(
                db,
                "latency",
                "--rate",
                str(sizes.latency_rate),
                "--seconds",
                str(sizes.latency_seconds),
            )["sent"]
            wait_until(lambda: len(path.read_bytes()[skip:].splitlines()) >= sent, 30)
        delays = sorted(float(x) * 1000 for x in path.read_bytes()[skip:].split())
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
        if isinstance(system, RedisSystem):
            return  # a list in memory has no index to walk; and no batch API to fill it
        for processes in (1, 2):
            key = f"deep_{processes}"
            if not self.wanted(key):
                continue
            if first and processes == 1:
                system.reset(db)
            waiting = system.waiting(db)
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


def save(directory: Path, stamp: str, results: Results, described: str, sizes: Sizes) -> None:
    """The raw figures as JSON (rewritten after every run, so an interrupted one keeps some)."""
    directory.mkdir(parents=True, exist_ok=True)
    (directory / f"compare-{stamp}.json").write_text(
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


def produced(stdout: str) -> dict[str, Any]:
    """The BENCH-RESULT of a driver's output ({} if none)."""
    for line in reversed(stdout.splitlines()):
        if line.startswith(RESULT_PREFIX):
            return dict(json.loads(line[len(RESULT_PREFIX) :]))
    return {}


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
    parser.add_argument(
        "--workloads",
        help=f"comma-separated workload keys or groups ({', '.join(GROUPS)})",
    )
    parser.add_argument("--producers", type=int, help="producer processes of the steady load")
    parser.add_argument("--steady-rates", help="comma-separated jobs/s (default 2000,5000)")
    parser.add_argument("--steady-seconds", type=float, help="length of each steady load")
    parser.add_argument("--mixed-jobs", type=int, help="scheduled jobs of the mixed load")
    parser.add_argument("--drain-jobs", type=int, help="jobs per no-op drain (default 50,000)")
    parser.add_argument("--enqueue-jobs", type=int, help="jobs of the 1-producer enqueue")
    parser.add_argument("--bulk-jobs", type=int, help="jobs of the bulk enqueue (default 100,000)")
    parser.add_argument("--io-jobs", type=int, help="jobs per 10 ms-job drain")
    parser.add_argument("--row-jobs", type=int, help="jobs per row-writing drain")
    parser.add_argument(
        "--block",
        default="compare",
        help="name of the marked block of the docs page to write (another name: another table)",
    )
    parser.add_argument("--concurrency", type=int, default=64, help="pgqueue worker slots")
    parser.add_argument("--docs", type=Path, help="markdown file to write the table into")
    parser.add_argument("--no-docs", action="store_true")
    parser.add_argument("--results-dir", type=Path, default=RESULTS_DIR)
    args = parser.parse_args(argv)
    sizes = sizes_override or (QUICK if args.quick else FULL)
    overrides: dict[str, Any] = {}
    if args.producers:
        overrides["producers"] = args.producers
    if args.steady_rates:
        overrides["steady_rates"] = tuple(int(r) for r in args.steady_rates.split(","))
    if args.steady_seconds:
        overrides["steady_seconds"] = args.steady_seconds
    for name, value in (
        ("mixed", args.mixed_jobs),
        ("drain", args.drain_jobs),
        ("enqueue_1", args.enqueue_jobs),
        ("bulk", args.bulk_jobs),
        ("io", args.io_jobs),
        ("row", args.row_jobs),
    ):
        if value:
            overrides[name] = value
    sizes = dataclasses.replace(sizes, **overrides)
    runs = args.runs or (1 if args.quick else 3)
    keys = [k.strip() for k in args.systems.split(",") if k.strip()]
    unknown = sorted(set(keys) - set(ALL))
    if unknown:
        parser.error(f"unknown systems: {', '.join(unknown)}")
    only = {k.strip() for k in args.workloads.split(",")} if args.workloads else None
    docs = None if args.no_docs else (args.docs or (None if args.quick else report.DOCS))

    systems = build(keys, args.concurrency)
    results = Results()
    stamp = time.strftime("%Y%m%d-%H%M%S")
    settings = None if args.dsn else statements.PRELOAD
    with contextlib.ExitStack() as stack:
        admin = stack.enter_context(server(args.dsn, settings))
        tmp = stack.enter_context(tempfile.TemporaryDirectory())
        brokered = [s for s in systems if isinstance(s, RedisSystem)]
        if brokered:
            redis_url = stack.enter_context(redis_server.server())
            for broker in brokered:
                broker.redis = redis_url
        count_statements = statements.available(admin)
        if not count_statements:
            results.notes.append("pg_stat_statements is not loaded: no statement counts")
        databases = {}
        for system in systems:
            db = fresh_database(admin, f"bench_{system.key}", migrated=False)
            system.setup(db)
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
                harness.real_jobs(system, databases[system.key])
                harness.steady(system, databases[system.key])
            save(args.results_dir, stamp, results, described, sizes)  # a partial copy
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
    save(args.results_dir, stamp, results, described, sizes)
    if docs is not None:
        report.write(docs, table, args.block)
        print(f"\nwritten to {docs}")
    return results


if __name__ == "__main__":
    # SIGTERM unwinds like Ctrl-C: workers, Redis and PostgreSQL are stopped on the way out.
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(1))
    main()
