"""Tenant fairness and partitioned limits with two real `pgq work` processes: a limit of
running jobs and a token bucket per key (``limit_by``), fleet-wide; bucket rows of keys that
never come back are pruned; a fair queue serves a lone tenant's job within about one job per
other tenant, not behind a flood; fairness with priorities and with a task limit.

One database and one fleet for the module (each test has queues and tasks of its own), so the
workers start once. Order and bounds are read from the effects ledger ('start'/'end' rows with
the job's key as note, database clock), never from wall-clock timings of the test itself.
"""

from __future__ import annotations

import os
from collections import Counter
from collections.abc import Iterator
from typing import Any

import psycopg
import pytest

from pgqueue import PgQueue
from tests.conftest import PgServer
from tests.helpers import scalar, spawn_fleet, stop_workers, wait_for
from tests.integration import fair_app
from tests.integration.test_flow_limits import RunningSampler

pytestmark = pytest.mark.slow

APP = "tests.integration.fair_app:pgq"
SLOTS = 4  # per worker process; two processes


@pytest.fixture(scope="module")
def fleet_dsn(pg_server: PgServer, tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    name = f"pgqueue_test_fairness_{os.getpid()}"
    dsn = pg_server.create_database(name, template=pg_server.template)
    with pytest.MonkeyPatch.context() as env:
        # fair_app's client (the tasks' own enqueue) and its handlers' ledger use this database.
        env.setenv("PGQUEUE_DSN", dsn)
        fleet = spawn_fleet(
            dsn, 2, "--concurrency", str(SLOTS), "--queue", ",".join(fair_app.QUEUES),
            "--prune-interval", "0.5", app=APP, log_dir=tmp_path_factory.mktemp("fairness"),
        )  # fmt: skip
        try:
            yield dsn
        finally:
            stop_workers(fleet)
            fair_app.pgq.close()
    pg_server.drop_database(name)


@pytest.fixture
def client(fleet_dsn: str) -> Iterator[PgQueue]:
    queue = PgQueue(fleet_dsn)
    yield queue
    queue.close()


def starts(dsn: str, ids: list[int]) -> list[tuple[int, str, int]]:
    """(job id, key, pid) of the jobs' 'start' rows, in the order they were written."""
    with psycopg.connect(dsn) as conn:
        rows = conn.execute(
            "SELECT job_id, note, pid FROM ledger WHERE event = 'start' AND job_id = ANY(%s)"
            " ORDER BY seq",
            (ids,),
        ).fetchall()
    return [(int(r[0]), str(r[1]), int(r[2])) for r in rows]


def claim_order(dsn: str, ids: list[int]) -> list[str]:
    """The tenant of each finished job kept in the history, in the order they were claimed."""
    with psycopg.connect(dsn) as conn:
        rows = conn.execute(
            "SELECT args ->> 'tenant' FROM pgqueue.job_history WHERE id = ANY(%s)"
            " ORDER BY started_at, id",
            (ids,),
        ).fetchall()
    return [str(r[0]) for r in rows]


def ended(dsn: str, ids: list[int]) -> int:
    return int(
        scalar(dsn, "SELECT count(*) FROM ledger WHERE event = 'end' AND job_id = ANY(%s)", (ids,))
    )


def test_a_lone_tenant_is_served_within_a_round_of_a_flood(fleet_dsn, client):
    # The CI-sized flood: 2,000 jobs of tenant A in a fair queue, then one job of tenant B.
    client.flow.configure_queue("tenants", fair=True)
    flood = client.enqueue_many([fair_app.tenant.s("A", 0.01) for _ in range(2000)])
    ranks = scalar(
        fleet_dsn,
        "SELECT array_agg(fair_rank ORDER BY id) FROM pgqueue.jobs WHERE id = ANY(%s)",
        ([int(i) for i in flood],),
    )
    assert ranks == sorted(ranks) and len(set(ranks)) == len(ranks)  # one per round, in order
    wait_for(lambda: ended(fleet_dsn, [int(i) for i in flood]) >= 100, timeout=60)
    with psycopg.connect(fleet_dsn) as tx, tx.transaction():
        waiting = int(
            tx.execute(
                "SELECT count(*) FROM pgqueue.jobs WHERE state = 'ready' AND id = ANY(%s)",
                ([int(i) for i in flood],),
            ).fetchone()[0]
        )
        lone = fair_app.tenant.enqueue("B", conn=tx)
    assert waiting > 1000, "the flood drained before B came: nothing was measured"
    ids = [int(i) for i in flood] + [int(lone)]
    wait_for(lambda: ended(fleet_dsn, ids) == len(ids), timeout=120, message="all done")
    order = [job for job, _, _ in starts(fleet_dsn, ids)]
    claimed_before = len(flood) - waiting  # flood jobs already claimed when B was enqueued
    after = order.index(int(lone)) - claimed_before
    # B waits for the claims in flight and the next claim, not for the 1,000+ A jobs queued:
    # in first-come-first-served order it would start after every one of them.
    assert after <= 3 * 2 * SLOTS, (after, waiting)
    assert {key for _, key, _ in starts(fleet_dsn, ids)} == {"A", "B"}
    assert scalar(fleet_dsn, "SELECT clock FROM pgqueue.fair_clocks WHERE queue = 'tenants'") > 0


def test_fair_rounds_within_a_priority_and_priorities_first(fleet_dsn, client):
    # Paused while enqueueing, so the claims see every job at once.
    client.flow.configure_queue("tenants", fair=True)
    client.flow.pause_queue("tenants")
    # Kept in the history (result_ttl), whose started_at is when each job was claimed.
    low = client.enqueue_many(
        [fair_app.tenant.s("A", priority=5, result_ttl=3600) for _ in range(30)]
    )
    b = client.enqueue_many([fair_app.tenant.s("B", 0.05, result_ttl=3600) for _ in range(6)])
    c = client.enqueue_many([fair_app.tenant.s("C", 0.05, result_ttl=3600) for _ in range(6)])
    ids = [int(i) for i in [*low, *b, *c]]
    client.flow.resume_queue("tenants")
    wait_for(lambda: len(claim_order(fleet_dsn, ids)) == len(ids), timeout=60, message="all done")
    # In the order the jobs were claimed (the claim's transaction time, a claim's jobs in id
    # order), not the order their handlers wrote their ledger rows: those come from threads on
    # connections of their own, and two busy processes interleave them by scheduling.
    keys = claim_order(fleet_dsn, ids)
    # Priority 0 (B and C) before priority 5 (A), whatever the order of enqueue. The first
    # claims (SLOTS in each of two workers) see every job: eight of the twelve B and C jobs, no
    # A. The last four go to the next claims, made as the first B's and C's end: when both
    # workers claim at once, one takes them and the other, finding them locked (SKIP LOCKED),
    # takes up to a claim of A's instead. So every B and C starts within one claim of A's.
    assert keys[:8].count("A") == 0, keys
    last_priority_0 = max(i for i, key in enumerate(keys) if key != "A")
    assert last_priority_0 < 12 + SLOTS, keys
    # Round-robin between B and C: B's six jobs, enqueued first, do not all come first (the
    # first two claims take four each, two B and two C; first come, first served would start B
    # six times).
    first = Counter(keys[:6])
    assert first["B"] >= 2 and first["C"] >= 2, keys


def test_limit_of_running_jobs_per_key_holds_across_processes(fleet_dsn, client):
    jobs = [
        fair_app.account.s({"id": account, "name": "x"}) for account in (7, 8, 9) for _ in range(6)
    ]
    sql = (
        "SELECT concurrency_key, count(*) FROM pgqueue.jobs WHERE state = 'running'"
        " AND task = 'fair.account' GROUP BY concurrency_key"
    )
    with RunningSampler(fleet_dsn, sql) as sampler:
        ids = [int(i) for i in client.enqueue_many(jobs)]
        wait_for(lambda: ended(fleet_dsn, ids) == len(ids), timeout=90, message="all done")
    # The key came from a dict argument (limit_by="account.id"); never more than 2 per key,
    # and the limit was reached (the slots, 8, would allow more).
    assert set(sampler.peak) == {"7", "8", "9"}
    assert max(sampler.peak.values()) == 2
    rows = starts(fleet_dsn, ids)
    assert len({pid for *_, pid in rows}) == 2  # both processes took part
    assert (
        scalar(fleet_dsn, "SELECT key_limit FROM pgqueue.task_limits WHERE task = 'fair.account'")
        == 2
    )


def test_token_bucket_per_key_and_keys_that_never_return_leave_no_row(fleet_dsn, client):
    # 5 starts/s per tenant with bursts of 2: each tenant's 6 jobs take >= (6 - 2) / 5 = 0.8 s
    # after its burst; three tenants do not share a bucket, so they run side by side.
    ids = [int(i) for i in client.enqueue_many(
        [fair_app.rated.s(t) for t in ("t1", "t2", "t3") for _ in range(6)]
    )]  # fmt: skip
    wait_for(lambda: ended(fleet_dsn, ids) == len(ids), timeout=60, message="all done")
    with psycopg.connect(fleet_dsn) as conn:
        started = conn.execute(
            "SELECT j.note, extract(epoch FROM j.at) FROM ledger AS j"
            " WHERE j.event = 'start' AND j.job_id = ANY(%s) ORDER BY j.at",
            (ids,),
        ).fetchall()
    per_key: dict[str, list[float]] = {}
    for key, at in started:
        per_key.setdefault(key, []).append(float(at))
    for key, times in per_key.items():
        # A token bucket admits at most burst + rate x t starts within any t seconds (one of
        # slack: a handler's 'start' row comes a little after its claim).
        for i, first in enumerate(times):
            for j in range(i, len(times)):
                assert j - i + 1 <= 2 + 5 * (times[j] - first) + 1, (key, times)
        assert times[-1] - times[0] >= (6 - 2) / 5 * 0.8, (key, times)
    # The three tenants overlapped: one shared bucket would have taken (18 - 2) / 5 = 3.2 s.
    span = max(t for ts in per_key.values() for t in ts) - min(
        t for ts in per_key.values() for t in ts
    )
    assert span < 3.2, span
    assert len({pid for _, key, pid in starts(fleet_dsn, ids)}) == 2
    # Keys seen once, never again: their buckets fill up and the pruner deletes the rows.
    once = [int(i) for i in client.enqueue_many([fair_app.rated.s(f"once-{n}") for n in range(20)])]
    wait_for(lambda: ended(fleet_dsn, once) == len(once), timeout=60, message="all done")
    wait_for(
        lambda: (
            scalar(fleet_dsn, "SELECT count(*) FROM pgqueue.key_buckets WHERE task = 'fair.rated'")
            == 0
        ),
        timeout=30,
        message="full buckets pruned",
    )


def test_fair_queue_with_a_task_limit_and_keys_enqueued_in_a_transaction(fleet_dsn, client):
    client.flow.configure_queue("shared", fair=True)
    sql = (
        "SELECT task, count(*) FROM pgqueue.jobs WHERE state = 'running'"
        " AND task = 'fair.shared' GROUP BY task"
    )
    with RunningSampler(fleet_dsn, sql) as sampler:
        with psycopg.connect(fleet_dsn) as tx:
            flood = client.enqueue_many([fair_app.shared.s("A") for _ in range(12)], conn=tx)
            lone = [fair_app.shared.enqueue("B", conn=tx), fair_app.shared.enqueue("B", conn=tx)]
            # Nothing is visible (or claimed) before the caller commits.
            assert (
                scalar(fleet_dsn, "SELECT count(*) FROM pgqueue.jobs WHERE task = 'fair.shared'")
                == 0
            )
            tx.commit()
        ids = [int(i) for i in [*flood, *lone]]
        wait_for(lambda: ended(fleet_dsn, ids) == len(ids), timeout=60, message="all done")
    assert sampler.peak["fair.shared"] == 2  # the task's limit holds in a fair queue
    keys = [key for _, key, _ in starts(fleet_dsn, ids)]
    # B's two jobs, enqueued after A's twelve in the same transaction, take turns with A's
    # (ranks A0 B0 A1 B1 A2 ...), not behind A's twelve (FIFO would start them 13th and 14th).
    # Two workers woken by one exit walk at once: one locks the head (B's next job among it),
    # the other the rows after it, and whichever takes the limit's lock first fills the room
    # from its own walk (design.md, "Flow-controlled path"). One such race moves B back by up
    # to one claim's candidates (a worker's SLOTS): the bound allows one.
    assert keys[: 2 + 2 * SLOTS].count("B") == 2, keys


def test_rolled_back_enqueue_leaves_no_rank_and_no_key(fleet_dsn, client: Any):
    client.flow.configure_queue("tenants", fair=True)
    before = scalar(fleet_dsn, "SELECT count(*) FROM pgqueue.jobs")
    with psycopg.connect(fleet_dsn) as tx:
        fair_app.tenant.enqueue("Z", conn=tx)
        client.enqueue_many([fair_app.tenant.s("Z") for _ in range(3)], conn=tx)
        tx.rollback()
    assert scalar(fleet_dsn, "SELECT count(*) FROM pgqueue.jobs") == before


# -- the claim itself, without workers ----------------------------------------------------------


def claim(dsn: str, tasks: list[str], limit: int) -> list[tuple[Any, ...]]:
    """One pgqueue.claim of queue 'q' (what claim_flow runs): (id, key, throttled) rows."""
    with psycopg.connect(dsn, autocommit=True) as conn:
        return conn.execute(
            "SELECT c.id, j.concurrency_key, c.throttled"
            "  FROM pgqueue.claim(ARRAY['q'], %s, %s, '1 minute', gen_random_uuid()) AS c"
            "  LEFT JOIN pgqueue.jobs AS j ON j.id = c.id",
            (tasks, limit),
        ).fetchall()


def test_making_a_queue_fair_ranks_its_backlog_and_unranked_jobs_are_not_lost(dsn, pgq):
    a = [pgq.enqueue("t", {}, queue="q", concurrency_key="a") for _ in range(3)]
    b = [pgq.enqueue("t", {}, queue="q", concurrency_key="b") for _ in range(2)]
    urgent = pgq.enqueue("t", {}, queue="q", priority=-1)  # no key, a priority of its own
    assert scalar(dsn, "SELECT count(*) FROM pgqueue.jobs WHERE fair_rank IS NOT NULL") == 0
    assert pgq.flow.configure_queue("q", fair=True)["fair"] is True
    with psycopg.connect(dsn, autocommit=True) as conn:
        ranks: dict[int, int | None] = dict(
            conn.execute("SELECT id, fair_rank FROM pgqueue.jobs").fetchall()
        )
        # A job written by hand has no rank: it is still claimed, once it is at the head of
        # first-come-first-served order (this one is the oldest).
        hand = conn.execute(
            "INSERT INTO pgqueue.jobs (queue, task, concurrency_key, run_at)"
            " VALUES ('q', 't', 'c', now() - interval '1 hour') RETURNING id"
        ).fetchone()[0]
        conn.execute("UPDATE pgqueue.task_limits SET key_limit = NULL WHERE task = 't'")
    assert [ranks[i] for i in a] == [0, 1, 2] and [ranks[i] for i in b] == [0, 1]
    claimed = {row[0] for row in claim(dsn, ["t"], 5)}
    # Priority -1 first, then priority 0: the unranked job, then one job of each key per round.
    assert claimed == {urgent, hand, a[0], b[0], a[1]}
    clocks = "SELECT array_agg(clock ORDER BY priority) FROM pgqueue.fair_clocks WHERE queue = 'q'"
    assert scalar(dsn, clocks) == [0, 1]  # per priority: the largest rank claimed
    # A key that had nothing waiting starts at the clock, not behind a's backlog.
    late = pgq.enqueue("t", {}, queue="q", concurrency_key="d")
    assert scalar(dsn, "SELECT fair_rank FROM pgqueue.jobs WHERE id = %s", (late,)) == 1


def test_fair_queue_without_keyed_jobs_is_claimed_without_limits(dsn, pgq):
    pgq.flow.configure_queue("q", fair=True)
    ids = pgq.enqueue_many([pgq.spec("plain", {"n": n}, {"queue": "q"}) for n in range(4)])
    rows = claim(dsn, ["plain"], 3)
    # Claimed in order (the jobs without a key are one key) and no "-1": the worker must keep
    # claiming a fair queue with pgqueue.claim.
    assert sorted(r[0] for r in rows) == ids[:3] and all(r[2] is None for r in rows)
    assert scalar(dsn, "SELECT pgqueue.flow_controlled(ARRAY['q'], ARRAY['plain'])") is True
    pgq.flow.configure_queue("q", fair=False)
    assert scalar(dsn, "SELECT pgqueue.flow_controlled(ARRAY['q'], ARRAY['plain'])") is False
    assert [r[2] for r in claim(dsn, ["plain"], 3)] == [None, -1.0]  # the last job, and "-1"
