"""Durable steps (``ctx.step``) run by a real ``pgq work`` process: completed steps never run
again, a transactional step's effects happen once, a worker that lost its lease cannot
checkpoint, and misuse (a name used twice, steps that drift between runs) fails with an error
naming the step. The ledger counts every call of a step's function."""

from __future__ import annotations

import json
import os
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import psycopg
import pytest

from pgqueue import PgQueue
from tests.helpers import ledger, scalar, spawn_worker, stop_workers, wait_for
from tests.integration import durable_app
from tests.integration.test_job_transactions import take_lease

APP = "tests.integration.durable_app:pgq"


@pytest.fixture(scope="module")
def durable_dsn(module_dsn: str) -> Iterator[str]:
    with psycopg.connect(module_dsn, autocommit=True) as conn:
        conn.execute(durable_app.EFFECTS_DDL)
    before = os.environ.get("PGQUEUE_DSN")
    os.environ["PGQUEUE_DSN"] = module_dsn
    try:
        yield module_dsn
    finally:
        if before is None:
            os.environ.pop("PGQUEUE_DSN", None)
        else:
            os.environ["PGQUEUE_DSN"] = before


# Leases of 30 s: on a loaded machine a 5 s lease could run out between heartbeats and give a
# job an attempt the tests do not expect (the lost-lease test takes the lease itself).
@pytest.fixture(scope="module")
def worker(durable_dsn: str, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Path]:
    """One real worker for the module; yields its log."""
    log = tmp_path_factory.mktemp("durable") / "worker.log"
    proc = spawn_worker(
        durable_dsn, "--queue", "durable", "--concurrency", "4", "--lease", "30s", app=APP, log=log
    )
    try:
        wait_for(lambda: "worker started" in log.read_text(), timeout=60, message="the worker")
        yield log
    finally:
        stop_workers([proc])


@pytest.fixture(scope="module")
def process_worker(durable_dsn: str, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Path]:
    """``pgq work --pool process``: sync handlers (and their steps) in child processes."""
    log = tmp_path_factory.mktemp("durable") / "process-worker.log"
    proc = spawn_worker(
        durable_dsn, "--pool", "process", "--queue", "durable_proc", "--concurrency", "2",
        "--lease", "30s", app=APP, log=log,
    )  # fmt: skip
    try:
        wait_for(lambda: "worker started" in log.read_text(), timeout=60, message="the worker")
        yield log
    finally:
        stop_workers([proc])


@pytest.fixture
def client(durable_dsn: str) -> Iterator[PgQueue]:
    queue = PgQueue(durable_dsn)
    yield queue
    queue.close()


def finished(dsn: str, job: int) -> str | None:
    return scalar(
        dsn,
        "SELECT state FROM pgqueue.job_history WHERE id = %(id)s"
        " UNION ALL SELECT 'dead' FROM pgqueue.dead_letters WHERE id = %(id)s",
        {"id": job},
    )


def wait_done(dsn: str, job: int, timeout: float = 60) -> str:
    state: str = wait_for(lambda: finished(dsn, job), timeout=timeout, message=f"job {job}")
    return state


def calls(dsn: str, job: int) -> list[tuple[Any, ...]]:
    return [(event, attempt) for job_id, attempt, _, _, event, _ in ledger(dsn) if job_id == job]


def steps(dsn: str, job: int) -> list[tuple[Any, ...]]:
    with psycopg.connect(dsn) as conn:
        return conn.execute(
            "SELECT seq, name, state, attempts FROM pgqueue.job_step_status"
            " WHERE job_id = %s ORDER BY seq",
            (job,),
        ).fetchall()


def last_error(dsn: str, job: int) -> dict[str, Any]:
    errors = scalar(dsn, "SELECT errors FROM pgqueue.dead_letters WHERE id = %s", (job,))
    error: dict[str, Any] = errors[-1]
    return error


@pytest.mark.parametrize("task", [durable_app.order, durable_app.order_async])
def test_completed_steps_are_not_run_again_on_a_retry(worker, client, durable_dsn, task):
    job = task.enqueue(amount=7)
    assert wait_done(durable_dsn, job) == "succeeded"
    # Attempt 1 ran charge and reserve, then failed; attempt 2 replayed both from their
    # checkpoints (typed: reserve asserts it got a Receipt) and ran ship once.
    assert calls(durable_dsn, job) == [("charge", 1), ("reserve", 1), ("ship", 2)]
    assert client.result(job, timeout=5) == "shipped r-70"
    assert steps(durable_dsn, job) == [
        (1, "charge", "succeeded", 1),
        (2, "reserve", "succeeded", 1),
        (3, "ship", "succeeded", 1),
    ]
    receipt = scalar(
        durable_dsn, "SELECT result FROM pgqueue.job_steps WHERE job_id = %s AND seq = 1", (job,)
    )
    assert receipt == {"number": 70, "at": "2026-12-06T09:30:00+00:00"}


@pytest.mark.parametrize("task", [durable_app.transfer, durable_app.transfer_async])
@pytest.mark.parametrize("fail_inside", [False, True])
def test_a_transactional_step_writes_its_effects_exactly_once(
    worker, client, durable_dsn, fail_inside, task
):
    job = task.enqueue(fail_inside=fail_inside)
    assert wait_done(durable_dsn, job) == "succeeded"
    effects = scalar(
        durable_dsn,
        "SELECT array_agg(attempt ORDER BY id) FROM durable_effects WHERE job_id = %s",
        (job,),
    )
    # Attempts 1 and 2 fail after the step (attempt 1's step itself failing after its write
    # when fail_inside: rolled back with its checkpoint); the effect is kept once, from the
    # attempt whose step committed, and later attempts replay the step.
    assert effects == ([2] if fail_inside else [1])
    step = steps(durable_dsn, job)
    assert step == [(1, "book", "succeeded", 2 if fail_inside else 1)]


def test_a_worker_that_lost_its_lease_cannot_checkpoint(worker, client, durable_dsn):
    job = durable_app.slow_step.enqueue()
    wait_for(lambda: ("slow", 1) in calls(durable_dsn, job), message="the first attempt's step")
    take_lease(durable_dsn, job)  # attempt 2 starts while attempt 1's step still runs
    assert wait_done(durable_dsn, job) == "succeeded"
    wait_for(
        lambda: [r for r in ledger(durable_dsn, "step_raised") if r[0] == job],
        message="attempt 1's step to end",
    )
    # Attempt 1's checkpoint was refused (LeaseLost): the one recorded is attempt 2's.
    assert [r[5] for r in ledger(durable_dsn, "step_raised") if r[0] == job] == ["LeaseLost"]
    recorded = scalar(durable_dsn, "SELECT result FROM pgqueue.job_steps WHERE job_id = %s", (job,))
    assert recorded == 2
    assert steps(durable_dsn, job) == [(1, "slow", "succeeded", 1)]


def test_a_step_name_used_twice_fails_with_an_error_naming_it(worker, client, durable_dsn):
    job = durable_app.duplicate.enqueue()
    assert wait_done(durable_dsn, job) == "dead"
    error = last_error(durable_dsn, job)
    assert error["error"] == "pgqueue.errors.DuplicateStepError"
    assert "step 'fetch' ran already in this run" in error["message"]
    assert calls(durable_dsn, job) == [("fetch", 1)]


def test_a_run_whose_steps_differ_from_its_checkpoints_fails_naming_the_step(
    worker, client, durable_dsn
):
    job = durable_app.drifting.enqueue()
    assert wait_done(durable_dsn, job) == "dead"
    error = last_error(durable_dsn, job)
    assert error["error"] == "pgqueue.errors.NondeterministicStepError"
    assert "step 2 is step 'refund'" in error["message"]
    assert "recorded step 'reserve' there" in error["message"]
    # The second run replayed charge, then stopped before calling refund.
    assert calls(durable_dsn, job) == [("charge", 1), ("reserve", 1)]


def test_steps_in_a_loop_and_a_step_retried_in_place(worker, client, durable_dsn):
    job = durable_app.pages.enqueue(count=3)
    assert wait_done(durable_dsn, job) == "succeeded"
    assert [e for e in calls(durable_dsn, job) if e[0] == "page"] == [
        ("page", 1),
        ("page", 1),
        ("page", 1),
    ]
    assert [e for e in calls(durable_dsn, job) if e[0] == "flaky"] == [("flaky", 1)] * 3
    assert steps(durable_dsn, job) == [
        (1, "page#1", "succeeded", 1),
        (2, "page#2", "succeeded", 1),
        (3, "page#3", "succeeded", 1),
        (4, "flaky", "succeeded", 3),
    ]


def test_jobs_show_lists_the_steps(worker, client, durable_dsn):
    from typer.testing import CliRunner

    from pgqueue.cli.app import app

    job = durable_app.order.enqueue(amount=2)
    assert wait_done(durable_dsn, job) == "succeeded"
    runner = CliRunner()
    shown = runner.invoke(app, ["jobs", "show", str(job), "--dsn", durable_dsn, "--json"])
    assert shown.exit_code == 0, shown.output
    listed = json.loads(shown.output)["steps"]
    assert [(s["seq"], s["name"], s["state"]) for s in listed] == [
        (1, "charge", "succeeded"),
        (2, "reserve", "succeeded"),
        (3, "ship", "succeeded"),
    ]
    table = runner.invoke(app, ["jobs", "show", str(job), "--dsn", durable_dsn])
    assert table.exit_code == 0, table.output
    assert "steps (3)" in table.output and "reserve" in table.output


def test_steps_in_the_children_of_a_process_pool(process_worker, client, durable_dsn):
    order = durable_app.order.enqueue(amount=3, queue="durable_proc")
    transfer = durable_app.transfer.enqueue(fail_inside=True, queue="durable_proc")
    assert wait_done(durable_dsn, order) == "succeeded"
    assert wait_done(durable_dsn, transfer) == "succeeded"
    assert calls(durable_dsn, order) == [("charge", 1), ("reserve", 1), ("ship", 2)]
    effects = scalar(
        durable_dsn, "SELECT array_agg(attempt) FROM durable_effects WHERE job_id = %s", (transfer,)
    )
    assert effects == [2]
