"""Limits used to the full: a place freed under a concurrency limit (or a concurrency key's
limit) is taken again within milliseconds, by any worker process of the fleet, not after the
held-back claim's backoff; and a claim held back by a rate limit says exactly when the next
token is due.

Measured from the ledger the handlers write (database clock): a job's 'end' row is written just
before its ack, its 'start' row just after its claim. Under a limit of n, the (i + n)-th start
cannot come before the i-th end; the gap between them is how long the freed place stayed free
while jobs waited. The bounds are generous (a loaded machine adds milliseconds, not the
backoff's hundreds); the speed figures are measured by ``python -m benchmarks.limited``.
"""

from __future__ import annotations

import statistics
from collections import Counter
from collections.abc import Callable
from datetime import datetime

import psycopg
import pytest

from pgqueue import RateLimit
from pgqueue.db.queries import query
from tests.helpers import ledger, scalar, spawn_fleet, stop_workers, wait_for
from tests.integration.test_flow_limits import max_overlap

pytestmark = pytest.mark.slow

APP = "tests.integration.flow_app:pgq"
# The held-back claim's fallback backoff grows to 1 s: with a 5 s poll interval nothing but a
# wake-up refills a freed place quickly.
FLEET = ("--concurrency", "8", "--poll-interval", "5")


def rows(dsn: str, event: str, ids: list[int] | None = None) -> list[tuple[datetime, int]]:
    """(at, pid) of the ledger's ``event`` rows (of the jobs ``ids``, if given), by time."""
    with psycopg.connect(dsn) as conn:
        found = conn.execute(
            "SELECT at, pid FROM ledger WHERE event = %(event)s"
            " AND (%(ids)s::bigint[] IS NULL OR job_id = ANY(%(ids)s::bigint[])) ORDER BY at",
            {"event": event, "ids": ids},
        ).fetchall()
    return [(r[0], r[1]) for r in found]


def refill_gaps(dsn: str, limit: int, ids: list[int] | None = None) -> list[float]:
    """Seconds from the i-th end to the (i + limit)-th start."""
    starts = [at for at, _ in rows(dsn, "start", ids)]
    ends = [at for at, _ in rows(dsn, "end", ids)]
    return [(starts[i + limit] - ends[i]).total_seconds() for i in range(len(starts) - limit)]


def run_fleet(dsn: str, tmp_path, jobs: int, enqueue: Callable[[], object]) -> Counter[int]:
    """Two `pgq work` processes x 8 slots until ``jobs`` jobs ended; jobs started per process.
    The jobs are enqueued (``enqueue``) once both processes are up: enqueued before, the first
    process to start could run most of them before the other came (a loaded machine starts
    one of them seconds after the other)."""
    fleet = spawn_fleet(dsn, 2, *FLEET, app=APP, log_dir=tmp_path)
    try:
        enqueue()
        wait_for(lambda: len(ledger(dsn, "end")) == jobs, timeout=120, message="all jobs done")
    finally:
        stop_workers(fleet)
    return Counter(pid for _, pid in rows(dsn, "start"))


def test_place_freed_under_a_concurrency_limit_is_taken_at_once_across_the_fleet(
    app_dsn, pgq, tmp_path
):
    # concurrency_limit=3, 2 processes x 8 slots, 40 jobs of 200 ms: 2.7 s with the limit in
    # full use, 10-12 s while freed places waited for the held-back claims' backoff.
    per_process = run_fleet(
        app_dsn,
        tmp_path,
        40,
        lambda: pgq.enqueue_many([pgq.spec("capped", {"seconds": 0.2}, {}) for _ in range(40)]),
    )
    assert max_overlap(app_dsn) <= 3  # the limit still holds
    gaps = refill_gaps(app_dsn, 3)
    # Behind the backoff, the median gap is hundreds of milliseconds.
    assert statistics.median(gaps) < 0.1, sorted(gaps)
    # Both processes take freed places (one of them used to run none).
    assert len(per_process) == 2 and min(per_process.values()) >= 4, per_process


def test_place_freed_under_a_key_limit_is_taken_at_once_across_the_fleet(app_dsn, pgq, tmp_path):
    # 3 keys x 10 jobs of 200 ms, key_limit=1: 2 s with every key's place in full use.
    ids: list[int] = []

    def enqueue() -> None:
        specs = [
            pgq.spec("one_per_key", {"seconds": 0.2}, {"concurrency_key": f"k{k}"})
            for k in range(3)
            for _ in range(10)
        ]
        ids.extend(int(i) for i in pgq.enqueue_many(specs))

    per_process = run_fleet(app_dsn, tmp_path, 30, enqueue)
    gaps: list[float] = []
    for k in range(3):
        keyed = ids[k * 10 : (k + 1) * 10]
        assert max_overlap(app_dsn, keyed) <= 1  # one at a time per key
        gaps += refill_gaps(app_dsn, 1, keyed)
    assert statistics.median(gaps) < 0.1, sorted(gaps)
    assert len(per_process) == 2 and min(per_process.values()) >= 3, per_process


def test_claim_held_back_by_a_rate_limit_says_when_the_next_token_is_due(app_dsn, pgq, conn):
    # 5 per second with a burst of 1: once the token is spent, the next is due in 0.2 s.
    pgq.flow.configure_task("rated_exact", rate_limit=RateLimit(5, burst=1))
    pgq.enqueue_many([pgq.spec("rated_exact", {}, {}) for _ in range(5)])
    claimed = conn.execute(
        "SELECT id, throttled FROM pgqueue.claim(ARRAY['default'], ARRAY['rated_exact'], 8,"
        " interval '1 minute', gen_random_uuid())"
    ).fetchall()
    jobs = [r for r in claimed if r[0] is not None]
    hints = [r[1] for r in claimed if r[0] is None]
    assert len(jobs) == 1
    # Not 0 ("unknown": the worker would back off instead of waiting for the token).
    assert len(hints) == 1 and 0.15 <= hints[0] <= 0.2, hints
    assert scalar(app_dsn, "SELECT count(*) FROM pgqueue.jobs WHERE state = 'ready'") == 4


def test_writing_the_outcome_of_a_job_that_held_a_limits_last_place_notifies_its_queue(
    app_dsn, pgq
):
    # What the completer sends for such jobs (claim_flow's wake_on_exit): an ack or a failure
    # that also notifies the queue, delivered when the write commits.
    ids = [int(i) for i in pgq.enqueue_many([pgq.spec("hold", {}, {"queue": q}) for q in "ab"])]
    with (
        psycopg.connect(app_dsn, autocommit=True) as listener,
        psycopg.connect(app_dsn, autocommit=True) as conn,
    ):
        listener.execute("LISTEN pgqueue_jobs")
        claimed = conn.execute(
            "SELECT id, lease_token FROM pgqueue.claim(ARRAY['a', 'b'], ARRAY['hold'], 2,"
            " interval '1 minute', gen_random_uuid()) WHERE id IS NOT NULL ORDER BY id"
        ).fetchall()
        assert [r[0] for r in claimed] == ids
        (a, a_token), (b, b_token) = claimed
        acked = conn.execute(
            query("ack_jobs_waking"),
            {"ids": f"{{{a}}}", "tokens": f"{{{a_token}}}", "results": None, "wake": ["a"]},
        ).fetchall()
        failed = conn.execute(
            query("fail_jobs"),
            {
                "ids": [b],
                "tokens": [b_token],
                "kinds": ["fail"],
                "delays": [0.0],
                "errors": ['{"error": "E", "message": "m"}'],
                "wake": ["b"],
            },
        ).fetchall()
        assert acked == [(a, False)] and failed == [(b, "dead")]
        heard = [n.payload for n in listener.notifies(timeout=2.0, stop_after=2)]
    assert sorted(heard) == ["a", "b"]
