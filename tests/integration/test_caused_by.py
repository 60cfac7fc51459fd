"""``caused_by``: the id of the job that led to this one, stored with the job by every enqueue
path (the option added through the job input's one declaration, ``pgqueue/db/job_rows.py``)."""

from __future__ import annotations

import psycopg
import pytest

from pgqueue import chain
from pgqueue.errors import InvalidJobError


def caused_by(dsn: str, job_id: int) -> int | None:
    with psycopg.connect(dsn) as conn:
        found = conn.execute("SELECT caused_by FROM pgqueue.jobs WHERE id = %s", (job_id,))
        row = found.fetchone()
    assert row is not None, job_id
    return row[0]


def test_every_enqueue_path_stores_it(dsn, pgq):
    cause = pgq.enqueue("t", {})
    single = pgq.enqueue("t", {}, caused_by=cause)
    keyed = pgq.enqueue("t", {}, caused_by=cause, idempotency_key="k")
    few = pgq.enqueue_many([pgq.spec("t", {"i": i}, {"caused_by": cause}) for i in range(3)])
    many = pgq.enqueue_many([pgq.spec("t", {"i": i}, {"caused_by": cause}) for i in range(70)])
    keyed_bulk = pgq.enqueue_many(
        [pgq.spec("t", {}, {"idempotency_key": f"b{i}", "caused_by": cause}) for i in range(2)]
    )
    moded = pgq.enqueue_many(
        [pgq.spec("t", {}, {"idempotency_key": "m", "throttle": 60, "caused_by": cause})]
    )
    pgq.flow.configure_queue("fair", fair=True)
    fair_one = pgq.enqueue("t", {}, queue="fair", caused_by=cause)
    fair_bulk = pgq.enqueue_many(
        [pgq.spec("t", {}, {"queue": "fair", "caused_by": cause}) for _ in range(70)]
    )
    run = pgq.enqueue_workflow(chain(pgq.task(name="wf.step")(lambda: None).s()))
    child = pgq.enqueue("t", {}, caused_by=cause, depends_on=[int(run.job_ids[0])])
    ids = [single, keyed, *few, many[0], many[-1], *keyed_bulk, *moded, fair_one, fair_bulk[-1]]
    assert [caused_by(dsn, job_id) for job_id in [*ids, child]] == [cause] * (len(ids) + 1)
    assert caused_by(dsn, cause) is None
    assert caused_by(dsn, run.job_ids[0]) is None


@pytest.mark.parametrize("value", [0, -1, "12", 2**63, True])
def test_a_bad_id_is_refused_before_writing(dsn, pgq, value):
    with pytest.raises(InvalidJobError, match="caused_by must be"):
        pgq.enqueue("t", {}, caused_by=value)
    with psycopg.connect(dsn) as conn:
        assert conn.execute("SELECT count(*) FROM pgqueue.jobs").fetchone()[0] == 0
