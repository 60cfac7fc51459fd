"""Concurrency limits, concurrency keys, rate limits and fair shares, with several real worker
processes: every limit holds across the fleet, enforced by the claim in PostgreSQL."""

from __future__ import annotations

import threading
from collections import Counter

import psycopg
import pytest

from pgqueue import RateLimit
from tests.helpers import ledger, scalar, spawn_fleet, stop_workers, wait_for

pytestmark = pytest.mark.slow

APP = "tests.integration.flow_app:pgq"


def max_overlap(dsn: str, job_ids: list[int] | None = None) -> int:
    """Most jobs between their 'start' and 'end' ledger rows at any instant."""
    return int(
        scalar(
            dsn,
            "WITH ev AS (SELECT at, CASE event WHEN 'start' THEN 1 ELSE -1 END AS d FROM ledger"
            " WHERE event IN ('start', 'end')"
            " AND (%(ids)s::bigint[] IS NULL OR job_id = ANY(%(ids)s::bigint[])))"
            " SELECT coalesce(max(r), 0) FROM"
            " (SELECT sum(d) OVER (ORDER BY at, d ROWS UNBOUNDED PRECEDING) AS r FROM ev) AS s",
            {"ids": job_ids},
        )
    )


class RunningSampler:
    """Samples running jobs per group from pgqueue.jobs while the test runs."""

    def __init__(self, dsn: str, sql: str) -> None:
        self.dsn, self.sql = dsn, sql
        self.peak: Counter[str] = Counter()
        self.stop = threading.Event()
        self.thread = threading.Thread(target=self._run, daemon=True)

    def _run(self) -> None:
        with psycopg.connect(self.dsn, autocommit=True) as conn:
            while not self.stop.is_set():
                for group, running in conn.execute(self.sql).fetchall():
                    self.peak[group] = max(self.peak[group], running)
                self.stop.wait(0.01)

    def __enter__(self) -> RunningSampler:
        self.thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self.stop.set()
        self.thread.join(10)


def workers(dsn, tmp_path, count=3, *args):
    return spawn_fleet(dsn, count, "--concurrency", "8", *args, app=APP, log_dir=tmp_path)


def test_task_concurrency_limit_holds_across_worker_processes(app_dsn, pgq, tmp_path):
    capped = pgq.enqueue_many([pgq.spec("capped", {"seconds": 0.15}, {}) for _ in range(30)])
    pgq.enqueue_many([pgq.spec("hold", {"seconds": 0.3}, {}) for _ in range(30)])
    sql = "SELECT task, count(*) FROM pgqueue.jobs WHERE state = 'running' GROUP BY task"
    with RunningSampler(app_dsn, sql) as sampler:
        fleet = workers(app_dsn, tmp_path, 3)
        try:
            wait_for(lambda: len(ledger(app_dsn, "end")) == 60, timeout=90, message="all jobs done")
        finally:
            stop_workers(fleet)
    # Reached (the cap, not a lack of slots, bounded it) and never exceeded.
    assert sampler.peak["capped"] == 3
    assert max_overlap(app_dsn, [int(i) for i in capped]) <= 3
    # Jobs of other tasks were not held back behind the capped ones.
    assert sampler.peak["hold"] > 3
    assert len({r[2] for r in ledger(app_dsn, "start")}) >= 2  # several processes took part
    assert scalar(app_dsn, "SELECT count(*) FROM pgqueue.jobs") == 0


def test_queue_concurrency_limit_and_jobs_over_it_stay_ready(app_dsn, pgq, tmp_path):
    pgq.flow.configure_queue("reports", concurrency_limit=2)
    pgq.enqueue_many([pgq.spec("hold", {"seconds": 0.2}, {"queue": "reports"}) for _ in range(12)])
    sql = (
        "SELECT queue || ':' || state, count(*) FROM pgqueue.jobs"
        " WHERE queue = 'reports' GROUP BY queue, state"
    )
    with RunningSampler(app_dsn, sql) as sampler:
        fleet = workers(app_dsn, tmp_path, 3, "--queue", "reports")
        try:
            wait_for(lambda: len(ledger(app_dsn, "end")) == 12, timeout=90, message="drained")
        finally:
            stop_workers(fleet)
    assert sampler.peak["reports:running"] == 2
    assert max_overlap(app_dsn) <= 2
    assert not pgq.admin.dead_letters()  # held back, never failed


def test_concurrency_key_limits_running_jobs_per_key(app_dsn, pgq, tmp_path):
    # per_key allows 2 running per key; keys a, b, c with 6 jobs each.
    pgq.enqueue_many(
        [
            pgq.spec("per_key", {"seconds": 0.15}, {"concurrency_key": f"customer:{k}"})
            for k in "abc"
            for _ in range(6)
        ]
    )
    sql = (
        "SELECT concurrency_key, count(*) FROM pgqueue.jobs WHERE state = 'running'"
        " GROUP BY concurrency_key"
    )
    with RunningSampler(app_dsn, sql) as sampler:
        fleet = workers(app_dsn, tmp_path, 3)
        try:
            wait_for(lambda: len(ledger(app_dsn, "end")) == 18, timeout=90, message="drained")
        finally:
            stop_workers(fleet)
    assert set(sampler.peak) == {"customer:a", "customer:b", "customer:c"}
    assert max(sampler.peak.values()) <= 2
    assert scalar(app_dsn, "SELECT keyed FROM pgqueue.task_limits WHERE task = 'per_key'")


def test_rate_limit_is_a_fleet_wide_token_bucket(app_dsn, pgq, tmp_path):
    # rated: 10/s, burst 5. 40 jobs: ~5 at once, then ~10 per second => about 3.5 s.
    pgq.retention.set(record_succeeded=True)  # the claims' times, from job_history
    pgq.enqueue_many([pgq.spec("rated", {}, {}) for _ in range(40)])
    fleet = workers(app_dsn, tmp_path, 3)
    try:
        wait_for(
            lambda: scalar(app_dsn, "SELECT count(*) FROM pgqueue.job_history") == 40,
            timeout=60,
            message="all done",
        )
    finally:
        stop_workers(fleet)
    with psycopg.connect(app_dsn) as conn:
        # When each job was claimed (the bucket admits claims; a handler's own 'start' row can
        # come late, e.g. while its process opens its first connection, and claims now follow
        # the tokens exactly).
        offsets = [
            r[0]
            for r in conn.execute(
                "SELECT extract(epoch FROM started_at - min(started_at) OVER ())"
                " FROM pgqueue.job_history ORDER BY started_at"
            ).fetchall()
        ]
    # A token bucket admits at most burst + rate * t starts within any t seconds.
    for i, first in enumerate(offsets):
        for j in range(i, len(offsets)):
            window = float(offsets[j] - first)
            assert j - i + 1 <= 5 + 10 * window + 1, (i, j, window)
    assert float(offsets[-1]) >= (40 - 5) / 10 * 0.8
    assert len({r[2] for r in ledger(app_dsn, "start")}) >= 2  # several processes took part
    assert not pgq.admin.dead_letters()


def test_weighted_fair_share_low_priority_progresses_under_a_flood(app_dsn, pgq, tmp_path):
    pgq.flow.configure_queue("urgent", weight=80)
    pgq.flow.configure_queue("bulk", weight=20)
    pgq.enqueue_many([pgq.spec("hold", {"seconds": 0.05}, {"queue": "urgent"}) for _ in range(400)])
    pgq.enqueue_many([pgq.spec("hold", {"seconds": 0.05}, {"queue": "bulk"}) for _ in range(100)])
    fleet = workers(app_dsn, tmp_path, 2, "--queue", "urgent,bulk")
    try:
        wait_for(lambda: len(ledger(app_dsn, "start")) >= 200, timeout=90, message="progress")
    finally:
        stop_workers(fleet)
    first = [r[5] for r in ledger(app_dsn, "start")][:200]
    share = first.count("bulk") / len(first)
    # Its share is 20 %; under strict priority order it would have been 0 %.
    assert 0.1 <= share <= 0.35, share


def test_without_weights_priority_order_is_global(app_dsn, pgq, tmp_path):
    pgq.enqueue_many([pgq.spec("hold", {}, {"queue": "a", "priority": 5}) for _ in range(20)])
    pgq.enqueue_many([pgq.spec("hold", {}, {"queue": "b", "priority": 0}) for _ in range(20)])
    fleet = spawn_fleet(app_dsn, 1, "--concurrency", "4", "--queue", "a,b", app=APP)
    try:
        wait_for(lambda: len(ledger(app_dsn, "start")) == 40, timeout=60, message="drained")
    finally:
        stop_workers(fleet)
    order = [r[5] for r in ledger(app_dsn, "start")]
    assert order[:16].count("b") >= 14  # b (priority 0) first, give or take one claim batch


def test_workers_follow_flow_control_being_switched_on_and_off(app_dsn, pgq, tmp_path):
    fleet = workers(app_dsn, tmp_path, 2)
    try:
        for step, limit in enumerate((1, None)):
            pgq.flow.configure_queue("default", concurrency_limit=limit)
            pgq.enqueue_many([pgq.spec("hold", {"seconds": 0.05}, {}) for _ in range(10)])
            expected = 10 * (step + 1)
            wait_for(
                lambda: len(ledger(app_dsn, "end")) == expected,  # noqa: B023 - called at once
                timeout=60,
                message=f"step {step} drained",
            )
    finally:
        stop_workers(fleet)
    with psycopg.connect(app_dsn) as conn:
        first = [r[0] for r in conn.execute("SELECT at FROM ledger ORDER BY seq LIMIT 20")]
    assert len(first) == 20
    assert max_overlap(app_dsn) >= 1


def test_queue_rate_limit(app_dsn, pgq, tmp_path):
    pgq.flow.configure_queue("api", rate_limit=RateLimit(5, burst=2))
    pgq.retention.set(record_succeeded=True)  # the claims' times, from job_history
    pgq.enqueue_many([pgq.spec("hold", {}, {"queue": "api"}) for _ in range(12)])
    fleet = workers(app_dsn, tmp_path, 2, "--queue", "api")
    try:
        wait_for(
            lambda: scalar(app_dsn, "SELECT count(*) FROM pgqueue.job_history") == 12,
            timeout=60,
            message="all done",
        )
    finally:
        stop_workers(fleet)
    with psycopg.connect(app_dsn) as conn:
        span = conn.execute(
            "SELECT extract(epoch FROM max(started_at) - min(started_at)) FROM pgqueue.job_history"
        ).fetchone()[0]
    # 2 at once, then 5 per second: the 12th start cannot come before (12 - 2) / 5 = 2 s.
    assert float(span) >= 2.0 * 0.9
    assert scalar(app_dsn, "SELECT tokens IS NOT NULL FROM pgqueue.queues WHERE name = 'api'")
