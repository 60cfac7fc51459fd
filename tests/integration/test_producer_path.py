"""The single-job producer path does no work a job does not need, and writes what it wrote before.

A keyed job (``enqueue_input`` → ``insert_jobs``) is ranked by ``pgqueue.fair_ranks`` only when
its queue is fair: that call is a ``SECURITY DEFINER`` SQL function per job, whose answer for
any other queue is NULL. Counted with the server's per-transaction function statistics.
"""

from __future__ import annotations

from typing import Any

import psycopg

from pgqueue import PgQueue

FAIR_RANKS_CALLS = (
    "SELECT coalesce(pg_stat_get_xact_function_calls("
    "'pgqueue.fair_ranks(text[], smallint[], text[])'::regprocedure), 0)"
)


def _register(pgq: PgQueue) -> None:
    @pgq.task(name="t")
    def t() -> None: ...


def _in_one_transaction(dsn: str) -> psycopg.Connection[Any]:
    conn = psycopg.connect(dsn)
    conn.execute("SET LOCAL track_functions = 'all'")
    return conn


def test_keyed_jobs_of_queues_that_are_not_fair_are_not_ranked(dsn: str, pgq: PgQueue) -> None:
    _register(pgq)
    with _in_one_transaction(dsn) as conn:
        pgq.enqueue("t", {}, idempotency_key="one", conn=conn)
        pgq.enqueue("t", {}, idempotency_key="one", conn=conn)
        pgq.enqueue("t", {}, concurrency_key="k", conn=conn)
        pgq.enqueue_many(
            [pgq.spec("t", {}, {"idempotency_key": f"b{n}"}) for n in range(3)], conn=conn
        )
        assert conn.execute(FAIR_RANKS_CALLS).fetchone() == (0,)
        ranks = conn.execute("SELECT count(*), count(fair_rank) FROM pgqueue.jobs").fetchone()
        assert ranks == (5, 0)


def test_keyed_jobs_of_a_fair_queue_are_ranked_as_before(dsn: str, pgq: PgQueue) -> None:
    _register(pgq)
    pgq.flow.configure_queue("fair", fair=True)
    with _in_one_transaction(dsn) as conn:
        a = [
            pgq.enqueue(
                "t", {}, queue="fair", concurrency_key="a", idempotency_key=f"a{n}", conn=conn
            )
            for n in range(3)
        ]  # fmt: skip
        b = pgq.enqueue_many(
            [
                pgq.spec(
                    "t", {}, {"queue": "fair", "concurrency_key": "b", "idempotency_key": f"b{n}"}
                )
                for n in range(2)
            ],
            conn=conn,
        )
        other = pgq.enqueue("t", {}, queue="plain", idempotency_key="c", conn=conn)
        assert conn.execute(FAIR_RANKS_CALLS).fetchone()[0] >= 1
        ranks = dict(conn.execute("SELECT id, fair_rank FROM pgqueue.jobs").fetchall())
    assert [ranks[i] for i in a] == [0, 1, 2]
    assert [ranks[i] for i in b] == [0, 1]
    assert ranks[other] is None
