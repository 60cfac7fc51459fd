"""Typed arguments and results end to end: enqueued from Python (one job, bulk, workflows, cron)
or from SQL as plain JSON, run by real `pgq work` processes (thread and process pools), handed
to handlers as the types their signatures name, and read back typed by ``pgq.result()``."""

from __future__ import annotations

import asyncio
import json
from datetime import UTC, date, datetime, time, timedelta
from decimal import Decimal
from pathlib import Path
from uuid import UUID

import psycopg
import pytest

from pgqueue import DAG, InvalidJobError, chain, chord
from tests.helpers import ledger, scalar, spawn_worker, stop_workers, wait_for
from tests.integration import typed_app
from tests.integration.typed_app import (
    Colour,
    Customer,
    Echo,
    Point,
    async_echo,
    echo,
    price,
    stamp,
    tick,
    total,
)

APP = "tests.integration.typed_app:pgq"
WHEN = datetime(2026, 12, 6, 9, 30, 15, 123456, tzinfo=UTC)
REF = UUID("12345678-1234-5678-1234-567812345678")
POINT = Point(Decimal("1.25"), WHEN)
CUSTOMER = Customer(id=REF, joined=WHEN, credit=Decimal("10.50"))

ECHO_ARGS = {
    "when": WHEN,
    "ref": REF,
    "amount": Decimal("0.10"),
    "wait": timedelta(hours=1, seconds=30),
    "colour": Colour.GREEN,
    "pair": (7, "seven"),
    "ids": {3, 1, 2},
    "point": POINT,
    "address": {"street": "Main", "since": date(2020, 5, 1)},
    "customer": CUSTOMER,
    "day": date(2026, 12, 6),
    "at": time(9, 30),
    "history": [WHEN, WHEN + timedelta(days=1)],
    "prices": {"a": Decimal("1.5")},
}
ECHO_KINDS = {
    "address": "dict{since:date,street:str}",
    "amount": "Decimal",
    "at": "time",
    "colour": "Colour",
    "customer": "Customer",
    "day": "date",
    "history": "list[datetime]",
    "ids": "set[int]",
    "pair": "tuple[int,str]",
    "point": "Point",
    "prices": "dict{a:Decimal}",
    "ref": "UUID",
    "wait": "timedelta",
    "when": "datetime",
}


@pytest.fixture
def app(app_dsn, monkeypatch):
    """The tasks' own PgQueue on this test's database: its pgq.result() knows their types."""
    monkeypatch.setattr(typed_app.pgq._pools, "_dsn", app_dsn)
    yield typed_app.pgq
    typed_app.pgq.close()


@pytest.fixture
def worker(app_dsn, tmp_path):
    """One real `pgq work` process on the typed app (thread pool)."""
    workers = [spawn_worker(app_dsn, app=APP, log=tmp_path / "worker.log")]
    yield tmp_path / "worker.log"
    stop_workers(workers)


def notes(dsn: str) -> dict[int, dict[str, str]]:
    return {row[0]: json.loads(row[5]) for row in ledger(dsn, "end")}


def stored_args(dsn: str, job_id: int) -> object:
    return scalar(
        dsn,
        "SELECT args FROM pgqueue.jobs WHERE id = %(id)s"
        " UNION ALL SELECT args FROM pgqueue.job_history WHERE id = %(id)s",
        {"id": job_id},
    )


def test_typed_arguments_are_stored_as_plain_json(app_dsn, app):
    job = echo.enqueue(**ECHO_ARGS)
    assert stored_args(app_dsn, job) == {
        "when": "2026-12-06T09:30:15.123456+00:00",
        "ref": "12345678-1234-5678-1234-567812345678",
        "amount": "0.10",
        "wait": "PT1H0M30S",
        "colour": "green",
        "pair": [7, "seven"],
        "ids": [1, 2, 3],
        "point": {"x": "1.25", "at": "2026-12-06T09:30:15.123456+00:00"},
        "address": {"street": "Main", "since": "2020-05-01"},
        "customer": {
            "id": "12345678-1234-5678-1234-567812345678",
            "joined": "2026-12-06T09:30:15.123456Z",
            "credit": "10.50",
        },
        "day": "2026-12-06",
        "at": "09:30:00",
        "history": ["2026-12-06T09:30:15.123456+00:00", "2026-12-07T09:30:15.123456+00:00"],
        "prices": {"a": "1.5"},
    }


def test_arguments_and_results_come_back_as_the_signature_names(app_dsn, app, worker):
    job = echo.enqueue(**ECHO_ARGS)
    result = app.result(job, timeout=60)
    assert notes(app_dsn)[job] == ECHO_KINDS
    assert isinstance(result, Echo)
    assert result == Echo(ECHO_KINDS, WHEN, Decimal("0.10"), (7, "seven"), POINT)
    assert type(result.pair) is tuple and type(result.point) is Point
    # An async handler, a tuple result.
    other = async_echo.enqueue(WHEN, ref=REF)
    assert app.result(other, timeout=60) == (WHEN, REF)
    assert notes(app_dsn)[other] == {"when": "datetime", "ref": "UUID"}

    async def wait_async() -> object:
        try:
            return await app.result_async(other, timeout=60)
        finally:
            await app.aclose()

    assert asyncio.run(wait_async()) == (WHEN, REF)


def test_bulk_enqueue_and_workflows_hand_on_typed_values(app_dsn, app, worker):
    ids = app.enqueue_many(
        [stamp.s(WHEN + timedelta(days=i), timedelta(hours=i)) for i in range(3)]
    )
    run = app.enqueue_workflow(chain(stamp.s(WHEN, timedelta(hours=1)), stamp.s(by=timedelta(1))))
    assert run.result(timeout=60) == WHEN + timedelta(days=1, hours=1)  # a datetime, typed
    # The first step's datetime result went into `when` of the second as an ISO string ...
    second = stored_args(app_dsn, run.job_ids[1])
    assert second == {"when": "2026-12-06T10:30:15.123456+00:00", "by": "P1DT0H0M0S"}
    # ... and the handler got a datetime.
    assert notes(app_dsn)[run.job_ids[1]] == {"when": "datetime", "by": "timedelta"}
    wait_for(lambda: set(ids) <= notes(app_dsn).keys(), message="the bulk jobs to run")
    assert {json.dumps(notes(app_dsn)[i]) for i in ids} == {
        json.dumps({"by": "timedelta", "when": "datetime"})
    }
    # A chord's callback gets the list of Decimal results as list[Decimal].
    sums = app.enqueue_workflow(chord([price.s(n) for n in (1, 2, 3)], total.s()))
    assert sums.result(timeout=60) == Decimal("0.6")
    assert notes(app_dsn)[sums.job_ids[-1]] == {"prices": "list[Decimal]"}
    # DAG nodes' arguments, and the final nodes' results, typed too.
    dag = DAG()
    first = dag.add(stamp.s(WHEN, timedelta(hours=2)))
    dag.add(stamp.s(WHEN, by=timedelta(minutes=1)), depends_on=[first])
    assert app.enqueue_workflow(dag).result(timeout=60) == [WHEN + timedelta(minutes=1)]


def test_sql_producers_write_plain_json_and_handlers_get_types(app_dsn, app, worker):
    with psycopg.connect(app_dsn, autocommit=True) as conn:
        (job,) = conn.execute(
            "SELECT pgqueue.enqueue('typed.stamp', %s::jsonb)",
            (json.dumps({"when": "2026-12-06T09:30:00Z", "by": 90}),),
        ).fetchone()  # type: ignore[misc]
    wait_for(lambda: job in notes(app_dsn), message="the SQL job to run")
    assert notes(app_dsn)[job] == {"when": "datetime", "by": "timedelta"}


def test_cron_ticks_hand_on_typed_arguments(app_dsn, app, worker):
    app.cron.schedule("typed-tick", "* * * * *", tick, {"day": date(2026, 12, 6)})
    assert scalar(app_dsn, "SELECT args FROM pgqueue.schedules") == {"day": "2026-12-06"}
    # Due now rather than at the next minute: the tick of this minute (within the grace).
    scalar(
        app_dsn,
        "UPDATE pgqueue.schedules SET next_tick = date_trunc('minute', now()) RETURNING 1",
    )
    wait_for(lambda: notes(app_dsn), timeout=60, message="the tick to run")
    assert list(notes(app_dsn).values()) == [{"day": "date", "colour": "Colour"}]


def test_process_pool_children_decode_the_same_way(app_dsn, app, tmp_path):
    workers = [spawn_worker(app_dsn, "--pool", "process", app=APP, log=tmp_path / "w.log")]
    try:
        job = echo.enqueue(**ECHO_ARGS)
        assert app.result(job, timeout=60) == Echo(
            ECHO_KINDS, WHEN, Decimal("0.10"), (7, "seven"), POINT
        )
        assert notes(app_dsn)[job] == ECHO_KINDS
    finally:
        stop_workers(workers)


def test_a_value_that_cannot_be_encoded_names_its_argument(app_dsn, app):
    with pytest.raises(InvalidJobError, match=r"^argument 'when' of typed.echo: expected datetime"):
        echo.enqueue(**{**ECHO_ARGS, "when": "next tuesday"})
    with pytest.raises(InvalidJobError, match=r"^argument 'ref' of typed.echo: expected UUID"):
        app.enqueue_many([echo.s(**ECHO_ARGS), echo.s(**{**ECHO_ARGS, "ref": 5})])
    # By name (or Task) with an args object, for a task this process registered: the same.
    with pytest.raises(InvalidJobError, match=r"^argument 'wait' of typed.echo: expected timed"):
        app.enqueue("typed.echo", {**ECHO_ARGS, "wait": "soon"})
    with pytest.raises(InvalidJobError, match=r"^argument 'n' of typed.price: .*object"):
        price.enqueue(object())  # no encoding for it (n is an int: checked by type only)
    assert scalar(app_dsn, "SELECT count(*) FROM pgqueue.jobs") == 0  # nothing half-written


def test_a_job_of_an_older_signature_still_runs(app_dsn, app, worker: Path):
    """A rolling deploy: `old` was removed from tick since, `colour` added with a default."""
    with psycopg.connect(app_dsn, autocommit=True) as conn:
        (job,) = conn.execute(
            "SELECT pgqueue.enqueue('typed.tick', %s::jsonb)",
            (json.dumps({"day": "2026-12-06", "old": 1}),),
        ).fetchone()  # type: ignore[misc]
    wait_for(lambda: job in notes(app_dsn), message="the old job to run")
    assert notes(app_dsn)[job] == {"day": "date", "colour": "Colour"}
    wait_for(lambda: "no longer takes 'old'" in worker.read_text(), message="the warning")
