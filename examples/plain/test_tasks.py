"""The example's tests: the order and its job written in one transaction, the job run inline by
``pgqueue.testing.drain`` (no worker). ``pgq`` is ``tasks.pgq`` on the test's own database."""

import psycopg
from tasks import add

from pgqueue import PgQueue
from pgqueue.testing import assert_enqueued, drain


def test_the_order_and_its_job_commit_together(pgq: PgQueue) -> None:
    with psycopg.connect(pgq.dsn) as conn:
        conn.execute("CREATE TABLE orders (id serial PRIMARY KEY, total int)")
        conn.execute("INSERT INTO orders (total) VALUES (5)")
        job = add.enqueue(2, 3, conn=conn)
    assert_enqueued(pgq, add, args={"a": 2, "b": 3})
    summary = drain(pgq)
    assert [run.outcome for run in summary.runs] == ["succeeded"]
    assert pgq.result(job, timeout=1) == 5


def test_a_rolled_back_order_enqueues_nothing(pgq: PgQueue) -> None:
    with psycopg.connect(pgq.dsn) as conn:
        add.enqueue(2, 3, conn=conn)
        conn.rollback()
    assert drain(pgq).runs == []
