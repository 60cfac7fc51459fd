"""The cost of a durable step: statements and time per checkpoint, against a plain job.

    python -m benchmarks.durable [--dsn DSN] [--jobs 500] [--runs 3]

Runs ``--jobs`` jobs of each kind with ``pgqueue.testing.drain`` (claim, handler, ack: the
worker's own statements, one job at a time in this process, on the queue's pool), so the jobs
differ only by what their handler does: nothing (plain), or 1, 3 and 10 ``ctx.step`` calls of
a function that returns a small dict. Per checkpoint: (time of a job with K steps - time of a
plain job) / K, and the statements each kind sends, counted by ``pg_stat_statements`` (the
run's first step reads the job's checkpoints: ``load_steps``, one query per run; each step that
runs writes one fenced statement: ``write_step``). Prints medians of ``--runs`` (min, max).
"""

from __future__ import annotations

import argparse
import time
from functools import partial
from typing import Any

from benchmarks import statements
from benchmarks.common import fresh_database, machine, median_of, server
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

    return pgq


def _run(dsn: str, jobs: int, steps: int) -> float:
    """Seconds per job for ``jobs`` jobs of ``steps`` steps (0: plain)."""
    pgq = _app(dsn)
    try:
        task = pgq.get_task("bench.plain" if steps == 0 else "bench.steps")
        args: dict[str, Any] = {} if steps == 0 else {"count": steps}
        pgq.enqueue_many([task.s(**args)])
        drain(pgq)  # warm the pool and the prepared statements
        pgq.enqueue_many([task.s(**args) for _ in range(jobs)])
        started = time.perf_counter()
        summary = drain(pgq, max_jobs=jobs + 1)
        elapsed = time.perf_counter() - started
        assert all(run.outcome == "succeeded" for run in summary.runs)
        return elapsed / max(1, len(summary.runs))
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


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--dsn", help="a server to measure (default: a new embedded one)")
    parser.add_argument("--jobs", type=int, default=500)
    parser.add_argument("--runs", type=int, default=3)
    options = parser.parse_args()
    with server(options.dsn, statements.PRELOAD) as admin:
        database = "pgqueue_bench_durable"
        dsn = fresh_database(admin, database)
        print(f"# durable steps: {options.jobs} jobs per kind, drained one at a time")
        print(f"# {machine(dsn)}")
        plain = median_of(options.runs, lambda: _run(dsn, options.jobs, 0))
        low, high = plain[1] * 1e3, plain[2] * 1e3
        print(f"plain job: {plain[0] * 1e3:.3f} ms/job (min {low:.3f}, max {high:.3f})")
        counting = statements.available(admin)
        base = _statements(admin, dsn, database, options.jobs, 0) if counting else None
        for steps in STEPS:
            timed = median_of(options.runs, partial(_run, dsn, options.jobs, steps))
            per_step = (timed[0] - plain[0]) / steps
            line = (
                f"{steps:>2} steps: {timed[0] * 1e3:.3f} ms/job, "
                f"{per_step * 1e3:.3f} ms per checkpoint over a plain job"
            )
            if base is not None:
                counted = _statements(admin, dsn, database, options.jobs, steps)
                extra = (counted["per_job"] - base["per_job"]) / steps
                line += (
                    f"; statements/job {counted['per_job']:.2f} (plain {base['per_job']:.2f}): "
                    f"write_step {counted['write']:.2f}, load_steps {counted['load']:.2f}, "
                    f"{extra:.2f} more per step"
                )
            print(line)


if __name__ == "__main__":
    main()
