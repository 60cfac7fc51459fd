"""The cost of a durable step: statements and time per checkpoint, against a plain job.

    python -m benchmarks.durable [--dsn DSN] [--jobs 500] [--runs 3] [--worker-jobs 1000]

Runs ``--jobs`` jobs of each kind with ``pgqueue.testing.drain`` (claim, handler, ack: the
worker's own statements, one job at a time in this process, on the queue's pool), so the jobs
differ only by what their handler does: nothing (plain), or 1, 3 and 10 ``ctx.step`` calls of
a function that returns a small dict. Per checkpoint: (time of a job with K steps - time of a
plain job) / K, and the statements each kind sends, counted by ``pg_stat_statements`` (the
run's first step reads the job's checkpoints: ``load_steps``, one query per run; each step that
runs writes one fenced statement: ``write_step``). Then a durable sleep: a job whose handler
sleeps once (``ctx.sleep(0)``: parked by ``park_sleeps``, claimed again, replayed) against a
plain job, time and statements per job. Prints medians of ``--runs`` (min, max).

Then the same workflows (0, 3 and 10 steps, ``--worker-jobs`` of each) through each system's own
worker, side by side with DBOS (``benchmarks.drivers.dbos_driver``, in its own pinned venv, its
system database on the same server): a real ``pgq work --burst`` at 64 slots, and DBOS's queue at
``worker_concurrency`` 64. Jobs are enqueued first; jobs/s is timed by 10 ms polls of the
database, from the last one seeing no job started to the first seeing all done. Per checkpoint:
the time and the statements over a zero-step workflow of the same system, and DBOS / pgqueue.
``--no-drain`` skips the first part; ``--systems pgqueue`` leaves DBOS out.
"""

from __future__ import annotations

import argparse
import os
import statistics
import subprocess
import sys
import time
from collections.abc import Sequence
from dataclasses import dataclass
from functools import partial
from pathlib import Path
from typing import Any

import psycopg

from benchmarks import durable_tasks, peers_env, statements
from benchmarks.common import fresh_database, machine, median_of, server
from benchmarks.drivers import pgqueue_driver
from benchmarks.systems import url
from pgqueue import PgQueue, current_job
from pgqueue.testing import drain

STEPS = (1, 3, 10)


def _app(dsn: str) -> PgQueue:
    pgq = PgQueue(dsn, pool_size=2)

    def compute(i: int) -> dict[str, Any]:
        return {"step": i, "ok": True}

    @pgq.task(name="bench.plain", queue="durable_bench")
    def plain() -> None:
        return None

    @pgq.task(name="bench.steps", queue="durable_bench")
    def stepped(count: int) -> None:
        ctx = current_job()
        for i in range(count):
            ctx.step(f"s{i}", compute, i)

    @pgq.task(name="bench.nap", queue="durable_bench")
    def nap() -> None:
        current_job().sleep(0)

    return pgq


#: ``_run``'s ``steps`` for a job that sleeps once instead.
NAP = -1


def _run(dsn: str, jobs: int, steps: int) -> float:
    """Seconds per job for ``jobs`` jobs of ``steps`` steps (0: plain; NAP: one sleep)."""
    pgq = _app(dsn)
    try:
        name = {0: "bench.plain", NAP: "bench.nap"}.get(steps, "bench.steps")
        task = pgq.get_task(name)
        args: dict[str, Any] = {} if steps <= 0 else {"count": steps}
        pgq.enqueue_many([task.s(**args)])
        drain(pgq)  # warm the pool and the prepared statements
        pgq.enqueue_many([task.s(**args) for _ in range(jobs)])
        started = time.perf_counter()
        summary = drain(pgq, max_jobs=2 * jobs + 1)
        elapsed = time.perf_counter() - started
        done = [run for run in summary.runs if run.outcome == "succeeded"]
        assert len(done) == jobs and all(r.outcome in ("succeeded", "parked") for r in summary.runs)
        return elapsed / jobs
    finally:
        pgq.close()


def _statements(admin: str, dsn: str, database: str, jobs: int, steps: int) -> dict[str, float]:
    statements.reset(admin)
    _run(dsn, jobs, steps)
    count = statements.read(admin, database)
    per_job = count.total / jobs
    load = sum(
        c for q, c in count.by_statement if "FROM pgqueue.job_steps" in q and "SELECT seq" in q
    )
    write = sum(c for q, c in count.by_statement if "INSERT INTO pgqueue.job_steps" in q)
    return {"per_job": per_job, "load": load / jobs, "write": write / jobs}


# --- Through a real worker, side by side with DBOS ------------------------------------------

ROOT = Path(__file__).resolve().parent.parent
WORKER_STEPS = (0, 3, 10)
#: (jobs done, jobs not yet started), by the harness (left out of the statement counts). A
#: succeeded pgqueue job leaves pgqueue.jobs (no history row by default); DBOS keeps its rows.
_PROGRESS = {
    "pgqueue": statements.harness(
        "SELECT %(jobs)s - count(*), count(*) FILTER (WHERE started_at IS NULL)"
        " FROM pgqueue.jobs WHERE queue = 'durable_bench'"
    ),
    "DBOS": statements.harness(
        "SELECT count(*) FILTER (WHERE status = 'SUCCESS'),"
        " count(*) FILTER (WHERE status = 'ENQUEUED') FROM dbos.workflow_status"
    ),
}
_CLEAR = {
    "pgqueue": statements.harness("TRUNCATE pgqueue.job_history, pgqueue.job_steps"),
    "DBOS": statements.harness("TRUNCATE dbos.workflow_status CASCADE"),
}


@dataclass
class Worked:
    seconds: float  # from the last poll seeing no job started to the first seeing all done
    statements: int | None  # sent to the system's database while the worker ran


class _Side:
    """One system: its database, how to enqueue ``jobs`` workflows and run its worker."""

    def __init__(self, label: str, admin: str, database: str) -> None:
        self.label, self.admin, self.database = label, admin, database
        self.dsn = fresh_database(admin, database, migrated=label == "pgqueue")
        self.python = peers_env.python("dbos") if label == "DBOS" else Path(sys.executable)
        if label == "DBOS":
            self._driver("setup")

    def _driver(self, *args: str) -> None:
        command = [str(self.python), "-m", "benchmarks.drivers.dbos_driver"]
        subprocess.run([*command, "--url", url(self.dsn), *args], cwd=ROOT, check=True)

    def enqueue(self, jobs: int, steps: int) -> None:
        with psycopg.connect(self.dsn, autocommit=True) as conn:
            conn.execute(_CLEAR[self.label])
        if self.label == "DBOS":
            self._driver("enqueue", "--jobs", str(jobs), "--steps", str(steps))
            return
        app = PgQueue(self.dsn, pool_size=1)
        try:
            signature = durable_tasks.stepped.s(count=steps)
            app.enqueue_many([signature] * jobs)
        finally:
            app.close()

    def _progress(self, conn: psycopg.Connection[Any], jobs: int) -> tuple[int, int]:
        row = conn.execute(_PROGRESS[self.label], {"jobs": jobs}).fetchone()
        return (int(row[0]), int(row[1])) if row else (0, jobs)

    def work(self, jobs: int, counting: bool, timeout: float = 600.0) -> Worked:
        env = {**os.environ, "PGQUEUE_DSN": url(self.dsn), "PYTHONUNBUFFERED": "1"}
        if self.label == "DBOS":
            command = [str(self.python), "-m", "benchmarks.drivers.dbos_driver"]
            command += ["--url", url(self.dsn), "work"]
        else:
            app = f"benchmarks.durable_tasks:pgq --queue {durable_tasks.QUEUE}".split()
            command = [str(self.python), "-m", "pgqueue.cli", "work", *app, "--burst"]
            command += ["--concurrency", str(pgqueue_driver.DEFAULT_CONCURRENCY)]
            command += ["--log-level", "WARNING"]
        if counting:
            statements.reset(self.admin)
        conn = psycopg.connect(self.dsn, autocommit=True)
        worker = subprocess.Popen(command, cwd=ROOT, env=env, stdout=subprocess.DEVNULL)
        try:
            # The window: from the last poll that sees no job started to the first that sees
            # them all done (polls every 10 ms), so neither worker's start-up is counted.
            deadline, idle = time.monotonic() + timeout, time.perf_counter()
            while True:
                done, untouched = self._progress(conn, jobs)
                now = time.perf_counter()
                if untouched >= jobs:
                    idle = now
                if done >= jobs:
                    break
                if time.monotonic() > deadline or worker.poll() not in (None, 0):
                    raise RuntimeError(f"{self.label}: {done} of {jobs} jobs done")
                time.sleep(0.01)
        finally:
            conn.close()
            if worker.poll() is None:
                worker.terminate()
            worker.wait(timeout=60)
        count = statements.read(self.admin, self.database).total if counting else None
        return Worked(now - idle, count)


def compare_workers(
    admin: str, jobs: int, runs: int, systems: Sequence[str] = ("pgqueue", "DBOS")
) -> dict[str, dict[int, list[Worked]]]:
    """``jobs`` workflows of 0, 3 and 10 steps on each system, ``runs`` rounds interleaved."""
    sides = [_Side(label, admin, f"durable_bench_{label.lower()}") for label in systems]
    counting = statements.available(admin)
    results: dict[str, dict[int, list[Worked]]] = {s.label: {} for s in sides}
    for _ in range(runs):
        for steps in WORKER_STEPS:
            for side in sides:
                side.enqueue(jobs, steps)
                worked = side.work(jobs, counting)
                results[side.label].setdefault(steps, []).append(worked)
    return results


def print_workers(results: dict[str, dict[int, list[Worked]]], jobs: int) -> None:
    """Jobs/s, and per checkpoint the time and statements over a zero-step workflow."""
    print(f"# through a worker: {jobs} workflows per kind, medians of the rounds")
    header = f"{'system':<8} {'steps':>5} {'jobs/s':>9} {'ms/step':>8} {'stmts/job':>9}"
    print(header + f" {'stmts/step':>10}")
    per_step: dict[str, dict[int, tuple[float, float | None]]] = {}
    for label, by_steps in results.items():
        base = by_steps[0]
        base_s = statistics.median(w.seconds for w in base) / jobs
        base_n = _median_statements(base, jobs)
        for steps, worked in by_steps.items():
            seconds = statistics.median(w.seconds for w in worked) / jobs
            count = _median_statements(worked, jobs)
            ms = (seconds - base_s) * 1e3 / steps if steps else 0.0
            extra = (count - base_n) / steps if steps and count is not None and base_n else None
            per_step.setdefault(label, {})[steps] = (ms, extra)
            shown = "-" if count is None else f"{count:.1f}"
            more = "-" if extra is None else f"{extra:.2f}"
            print(f"{label:<8} {steps:>5} {1 / seconds:>9,.0f} {ms:>8.3f} {shown:>9} {more:>10}")
    if {"pgqueue", "DBOS"} <= per_step.keys():
        for steps in WORKER_STEPS[1:]:
            (ours, our_n), (theirs, their_n) = per_step["pgqueue"][steps], per_step["DBOS"][steps]
            line = f"DBOS / pgqueue per checkpoint, {steps} steps: time {theirs / ours:.1f}x"
            if our_n and their_n:
                line += f", statements {their_n / our_n:.1f}x"
            print(line)


def _median_statements(worked: list[Worked], jobs: int) -> float | None:
    counts = [w.statements for w in worked if w.statements is not None]
    return statistics.median(counts) / jobs if counts else None


def main(argv: list[str] | None = None) -> dict[str, dict[int, list[Worked]]]:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--dsn", help="a server to measure (default: a new embedded one)")
    parser.add_argument("--jobs", type=int, default=500)
    parser.add_argument("--runs", type=int, default=3)
    parser.add_argument("--worker-jobs", type=int, default=1000, help="workflows per kind")
    parser.add_argument("--systems", default="pgqueue,DBOS", help="through a worker ('' none)")
    parser.add_argument("--no-drain", action="store_true", help="only the worker comparison")
    options = parser.parse_args(argv)
    systems = [s for s in options.systems.split(",") if s]
    if unknown := set(systems) - {"pgqueue", "DBOS"}:
        parser.error(f"unknown system(s): {', '.join(sorted(unknown))} (pgqueue, DBOS)")
    with server(options.dsn, statements.PRELOAD) as admin:
        if not options.no_drain:
            _drained(admin, options.jobs, options.runs)
        if not systems:
            return {}
        results = compare_workers(admin, options.worker_jobs, options.runs, systems)
        print_workers(results, options.worker_jobs)
        return results


def _drained(admin: str, jobs: int, runs: int) -> None:
    """The drained comparison: ``ctx.step`` against a plain job, one job at a time."""
    database = "pgqueue_bench_durable"
    dsn = fresh_database(admin, database)
    print(f"# durable steps: {jobs} jobs per kind, drained one at a time")
    print(f"# {machine(dsn)}")
    plain = median_of(runs, lambda: _run(dsn, jobs, 0))
    low, high = plain[1] * 1e3, plain[2] * 1e3
    print(f"plain job: {plain[0] * 1e3:.3f} ms/job (min {low:.3f}, max {high:.3f})")
    counting = statements.available(admin)
    base = _statements(admin, dsn, database, jobs, 0) if counting else None
    for steps in STEPS:
        timed = median_of(runs, partial(_run, dsn, jobs, steps))
        per_step = (timed[0] - plain[0]) / steps
        line = (
            f"{steps:>2} steps: {timed[0] * 1e3:.3f} ms/job, "
            f"{per_step * 1e3:.3f} ms per checkpoint over a plain job"
        )
        if base is not None:
            counted = _statements(admin, dsn, database, jobs, steps)
            extra = (counted["per_job"] - base["per_job"]) / steps
            line += (
                f"; statements/job {counted['per_job']:.2f} (plain {base['per_job']:.2f}): "
                f"write_step {counted['write']:.2f}, load_steps {counted['load']:.2f}, "
                f"{extra:.2f} more per step"
            )
        print(line)
    napped = median_of(runs, partial(_run, dsn, jobs, NAP))
    line = (
        f"a sleep: {napped[0] * 1e3:.3f} ms/job (park, claim again, resume), "
        f"{(napped[0] - plain[0]) * 1e3:.3f} ms over a plain job"
    )
    if base is not None:
        counted = _statements(admin, dsn, database, jobs, NAP)
        line += f"; statements/job {counted['per_job']:.2f} (plain {base['per_job']:.2f})"
    print(line)


if __name__ == "__main__":
    main()
