"""Scenario 15: a snapshot held while jobs stream through, then released.

A steady stream runs through the fleet; a while in, another connection opens a ``REPEATABLE
READ`` transaction, reads ``pgqueue.jobs`` once and sits idle in it (the analytics query, the
forgotten ``BEGIN``), so nothing the stream deletes or updates can be vacuumed away and the
table and its indexes grow; then it rolls back. What is checked, beyond the harness's figures
(lost 0, no duplicate, no stale write): once the snapshot has ended, the workers' maintenance
service (pgqueue/worker/maintainer.py) brings ``pgqueue.jobs`` and its indexes back to at most
twice their size before the hold, with no manual step (``back to size after (s)``).
"""

from __future__ import annotations

import time
from typing import Any

import psycopg

from tests.chaos.harness import Env, Report, Settings, now, pick, query, run

#: How much larger than before the hold the table and indexes may stay.
GOAL = 2.0


def sizes(dsn: str) -> tuple[int, int]:
    [(table, indexes)] = query(
        dsn, "SELECT pg_relation_size('pgqueue.jobs'), pg_indexes_size('pgqueue.jobs')"
    )
    return int(table), int(indexes)


def _mb(size: int) -> float:
    return round(size / 2**20, 2)


def held_snapshot(env: Env, size: str) -> Report:
    settings = Settings(
        jobs=pick(size, 9_000, 150_000),
        workers=2,
        concurrency=16,
        lease=10.0,
        job_ms=0.0,
        rate=pick(size, 1500.0, 500.0),
        # CI: a pass a second; full size: the default interval (a pass a minute).
        worker_args=pick(size, ("--maintenance-interval", "1s"), ()),
    )
    before_hold = pick(size, 1.5, 60.0)
    hold = pick(size, 5.0, 180.0)
    back_within = pick(size, 20.0, 240.0)
    peak = (0, 0)
    with run("15. snapshot held, released", env.dsn, settings, env.workdir) as chaos:
        chaos.start_workers()
        chaos.start_producer()
        time.sleep(before_hold)
        before = sizes(env.dsn)
        with psycopg.connect(env.dsn, application_name="chaos holder") as holder:
            holder.execute("BEGIN ISOLATION LEVEL REPEATABLE READ")
            holder.execute("SELECT count(*) FROM pgqueue.jobs")
            fault = chaos.fault("held snapshot", [])
            deadline = time.monotonic() + hold
            while time.monotonic() < deadline and not chaos.finished():
                peak = max(peak, sizes(env.dsn), key=sum)
                time.sleep(0.5)
            peak = max(peak, sizes(env.dsn), key=sum)
            holder.rollback()
        fault.healed_at = released = now()
        chaos.drain()
        goal = [GOAL * b for b in before]
        waited: float | None = None
        start = time.monotonic()
        while time.monotonic() - start < back_within:
            if all(got <= limit for got, limit in zip(sizes(env.dsn), goal, strict=True)):
                waited = round(time.monotonic() - start, 1)
                break
            time.sleep(0.5)
        after = sizes(env.dsn)
        report = chaos.report()
    report.notes["held (s)"] = round((released - fault.at).total_seconds(), 1)
    report.notes["table MB before / peak / after"] = [_mb(before[0]), _mb(peak[0]), _mb(after[0])]
    report.notes["indexes MB before / peak / after"] = [
        _mb(before[1]),
        _mb(peak[1]),
        _mb(after[1]),
    ]
    report.notes["back to size after (s)"] = waited
    report.notes["jobs started twice"] = chaos.started_twice()
    log = chaos.fleet.log_text()
    report.notes["maintenance steps"] = _steps(log)
    return report


def _steps(log: str) -> dict[str, Any]:
    # The workers' text lines: "maintenance done step=reindex ..." / "maintenance gave up ...".
    done = {step: log.count(f"maintenance done step={step} ") for step in ("vacuum", "reindex")}
    return {**done, "gave up": log.count("maintenance gave up ")}
