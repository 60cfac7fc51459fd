"""The claim cursor under a held snapshot: claims at the live edge of a queue do not walk again
over the jobs claimed since the snapshot was taken, and still find the jobs that sort before
their key (pgqueue/worker/claim_cursor.py, claim_jobs).

The worker's claim loop is played here statement by statement (enqueue, claim_jobs with the
cursor's parameters, ack_jobs) with the cursor on a clock the test moves, so each case is
exact; the buffers a claim touches come from EXPLAIN (ANALYZE, BUFFERS) of the very claim the
worker would send next, in a transaction rolled back."""

from __future__ import annotations

import copy
import re
import uuid
from collections.abc import Iterator
from datetime import timedelta
from typing import Any

import psycopg
import pytest
from psycopg.rows import TupleRow

from pgqueue.db.queries import query
from pgqueue.handler.job_context import CLAIMED_COLUMNS
from pgqueue.worker.claim_cursor import ClaimCursor

LIMIT = 20  # the claim asks for more than a round brings: every claim comes back short
ROUNDS = 150
PER_ROUND = 10
STEP = 0.0625  # fake seconds between claims (a binary fraction: sums stay exact)
_ID, _TOKEN = CLAIMED_COLUMNS.index("id"), CLAIMED_COLUMNS.index("lease_token")


class Clock:
    def __init__(self) -> None:
        self.now = 1000.0

    def __call__(self) -> float:
        return self.now


@pytest.fixture
def holder(dsn: str) -> Iterator[psycopg.Connection[TupleRow]]:
    """A REPEATABLE READ transaction that keeps its snapshot (and so every row version that
    is dead to everyone else) for the whole test."""
    with psycopg.connect(dsn) as conn:
        conn.isolation_level = psycopg.IsolationLevel.REPEATABLE_READ
        conn.execute("SELECT count(*) FROM pgqueue.jobs")
        yield conn
        conn.rollback()


class Worker:
    """The worker's claim loop, one statement at a time."""

    def __init__(self, conn: psycopg.Connection[TupleRow], clock: Clock) -> None:
        self.conn = conn
        self.clock = clock
        self.cursor = ClaimCursor(["q"], clock=clock)
        self.worker_id = str(uuid.uuid4())

    def params(self) -> dict[str, Any]:
        return {
            "queues": ["q"],
            "tasks": ["work"],
            "limit": LIMIT,
            "lease": timedelta(seconds=60),
            "worker_id": self.worker_id,
            **self.cursor.params(),
        }

    def claim(self) -> list[tuple[Any, ...]]:
        rows = self.conn.execute(query("claim_jobs"), self.params()).fetchall()
        self.cursor.claimed(rows, full=len(rows) >= LIMIT)
        if rows:
            self.conn.execute(
                query("ack_jobs"),
                {
                    "ids": [r[_ID] for r in rows],
                    "tokens": [r[_TOKEN] for r in rows],
                    "results": [None] * len(rows),
                },
            )
        self.clock.now += STEP
        return rows

    def next_claim_buffers(self) -> int:
        """The buffers the next claim touches (it is run, then rolled back)."""
        # Asking for the parameters moves the cursor's state: it is put back after.
        saved = copy.deepcopy({k: v for k, v in vars(self.cursor).items() if k != "_clock"})
        with self.conn.transaction(force_rollback=True):
            plan = self.conn.execute(
                "EXPLAIN (ANALYZE, BUFFERS) " + query("claim_jobs"), self.params()
            ).fetchall()
        vars(self.cursor).update(saved)
        return plan_buffers([line for (line,) in plan])


def plan_buffers(lines: list[str]) -> int:
    """The top node's shared buffers (it counts every node under it), planning left out."""
    for line in lines:
        if line.startswith("Planning"):
            break
        found = re.search(r"Buffers: shared((?: \w+=\d+)+)", line)
        if found:
            return sum(int(n) for n in re.findall(r"=(\d+)", found.group(1)))
    raise AssertionError("no Buffers line in the plan:\n" + "\n".join(lines))


def enqueue(conn: psycopg.Connection[TupleRow], count: int, **options: Any) -> list[int]:
    priority = options.get("priority", 0)
    run_at = options.get("run_at")
    return [
        r[0]
        for r in conn.execute(
            "SELECT pgqueue.enqueue('work', '{}', 'q', %s, %s) FROM generate_series(1, %s)",
            (priority, run_at, count),
        ).fetchall()
    ]


def drain_under(conn: psycopg.Connection[TupleRow], worker: Worker, rounds: int = ROUNDS) -> None:
    """Rounds of PER_ROUND jobs enqueued, claimed (short claims) and acked."""
    for _ in range(rounds):
        enqueue(conn, PER_ROUND)
        taken = 0
        while taken < PER_ROUND:
            taken += len(worker.claim())
    assert conn.execute("SELECT count(*) FROM pgqueue.jobs").fetchone() == (0,)


def test_claims_at_the_live_edge_do_not_walk_again_over_what_a_held_snapshot_keeps(
    dsn: str, conn: psycopg.Connection[TupleRow], holder: psycopg.Connection[TupleRow]
) -> None:
    # Figures of one plan: no ANALYZE by autovacuum halfway through.
    conn.execute("ALTER TABLE pgqueue.jobs SET (autovacuum_enabled = false)")
    worker = Worker(conn, Clock())
    from_top = Worker(conn, Clock())  # a cursor that has claimed nothing: from the top
    figures = []
    for _ in range(3):
        drain_under(conn, worker, ROUNDS // 3)
        figures.append((from_top.next_claim_buffers(), worker.next_claim_buffers()))
    (top_1, claim_1), _, (top_3, claim_3) = figures
    # The region is there: a walk from the top crosses every job claimed under the snapshot,
    # more and more of them.
    assert top_3 > 2 * top_1 > 0, figures
    # The worker's claims after short ones start near their key: they touch about what the
    # last CLAIM_SETTLE seconds of claims took, the same at the end as at the start.
    assert claim_3 <= claim_1 + 10 and claim_3 < top_3 / 3, figures
    fresh = enqueue(conn, 5)
    assert sorted(r[_ID] for r in worker.claim()) == fresh


def test_jobs_that_sort_before_the_key_are_still_found(
    dsn: str, conn: psycopg.Connection[TupleRow], holder: psycopg.Connection[TupleRow]
) -> None:
    clock = Clock()
    worker = Worker(conn, clock)
    drain_under(conn, worker)
    # A higher priority (a smaller number): found by the very next claim.
    (urgent,) = enqueue(conn, 1, priority=-5)
    assert [r[_ID] for r in worker.claim()] == [urgent]
    # The key's priority and an earlier run_at: found by the next walk from the top, within
    # CLAIM_MAX_RESCAN seconds, while the claims in between stay near the key.
    (late,) = enqueue(conn, 1, run_at="2000-01-01")
    waited = 0.0
    while not (rows := worker.claim()):
        waited += STEP
        assert waited <= worker.cursor.max_rescan
    assert [r[_ID] for r in rows] == [late]
    # That rewalk found a job before the key: the next ones come at the shortest interval.
    assert worker.cursor.interval == worker.cursor.rescan
