"""Durable sleeps and waits run by real ``pgq work`` processes: the job leaves the worker while
it sleeps or waits (its slot free, no lease held), wakes at its time or on an event, replays
its earlier steps from their checkpoints, and the sleep does not count as an attempt."""

from __future__ import annotations

import json
import os
import subprocess
from collections.abc import Iterator
from datetime import datetime
from pathlib import Path
from typing import Any

import psycopg
import pytest

from pgqueue import PgQueue, chain
from tests.helpers import PGQ, ROOT, ledger, scalar, spawn_worker, stop_workers, wait_for
from tests.integration import parking_app
from tests.integration.test_dashboard_browser import browser  # noqa: F401 - a fixture
from tests.integration.test_durable_steps import finished, wait_done

APP = "tests.integration.parking_app:pgq"


@pytest.fixture(scope="module")
def parking_dsn(module_dsn: str) -> Iterator[str]:
    before = os.environ.get("PGQUEUE_DSN")
    os.environ["PGQUEUE_DSN"] = module_dsn
    try:
        yield module_dsn
    finally:
        if before is None:
            os.environ.pop("PGQUEUE_DSN", None)
        else:
            os.environ["PGQUEUE_DSN"] = before


def _worker(dsn: str, log: Path, *args: str) -> Iterator[Path]:
    proc = spawn_worker(dsn, "--lease", "5s", *args, app=APP, log=log)
    try:
        wait_for(lambda: "worker started" in log.read_text(), timeout=60, message="the worker")
        yield log
    finally:
        stop_workers([proc])


@pytest.fixture(scope="module")
def worker(parking_dsn: str, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Path]:
    """One slot: a job that sleeps must give it up for another to run."""
    log = tmp_path_factory.mktemp("parking") / "worker.log"
    yield from _worker(parking_dsn, log, "--queue", "parking", "--concurrency", "1")


@pytest.fixture(scope="module")
def process_worker(parking_dsn: str, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Path]:
    log = tmp_path_factory.mktemp("parking") / "process-worker.log"
    yield from _worker(
        parking_dsn, log, "--pool", "process", "--queue", "parking_proc", "--concurrency", "1"
    )


@pytest.fixture
def client(parking_dsn: str) -> Iterator[PgQueue]:
    queue = PgQueue(parking_dsn)
    yield queue
    queue.close()


def calls(dsn: str, job: int) -> list[str]:
    return [event for job_id, _, _, _, event, _ in ledger(dsn) if job_id == job]


def live(dsn: str, job: int) -> dict[str, Any] | None:
    with psycopg.connect(dsn) as conn:
        row = conn.execute(
            "SELECT state, attempts, lease_expires_at, worker_id FROM pgqueue.jobs WHERE id = %s",
            (job,),
        ).fetchone()
    if row is None:
        return None
    return dict(zip(("state", "attempts", "lease_expires_at", "worker_id"), row, strict=True))


def parked(dsn: str, job: int) -> dict[str, Any]:
    """Wait until the job is parked (scheduled, a waiting sleep or wait as its last step)."""

    def check() -> dict[str, Any] | None:
        row = live(dsn, job)
        step = scalar(
            dsn,
            "SELECT state FROM pgqueue.job_steps WHERE job_id = %s ORDER BY seq DESC LIMIT 1",
            (job,),
        )
        done = row is not None and row["state"] == "scheduled" and step == "waiting"
        return row if done else None

    found: dict[str, Any] = wait_for(check, timeout=30, message=f"job {job} parked")
    return found


def attempts(dsn: str, job: int) -> int:
    value: int = scalar(dsn, "SELECT attempts FROM pgqueue.job_history WHERE id = %s", (job,))
    return value


@pytest.mark.parametrize("task", [parking_app.three_steps, parking_app.three_steps_async])
def test_a_sleep_frees_the_slot_and_resumes_without_rerunning_steps(
    worker, client, parking_dsn, task
):
    job = task.enqueue(pause=3.0)
    row = parked(parking_dsn, job)
    # The job left the worker: no lease, no worker, the sleep's attempt given back.
    assert row["lease_expires_at"] is None and row["worker_id"] is None
    assert row["attempts"] == 0
    # While it sleeps, the worker's one slot runs another job.
    other = parking_app.quick.enqueue()
    assert wait_done(parking_dsn, other) == "succeeded"
    assert finished(parking_dsn, job) is None
    assert wait_done(parking_dsn, job) == "succeeded"
    assert calls(parking_dsn, job) == ["one", "two", "three"]
    assert attempts(parking_dsn, job) == 1
    assert client.result(job) == 1  # the run that woke is still the first attempt
    # It resumed at its wake time by the database's clock, not before.
    woke = scalar(
        parking_dsn,
        "SELECT bool_and(two.finished_at >= nap.wake_at) FROM pgqueue.job_steps AS nap"
        " JOIN pgqueue.job_steps AS two ON two.job_id = nap.job_id AND two.name = 'two'"
        " WHERE nap.job_id = %s AND nap.kind = 'sleep'",
        (job,),
    )
    assert woke is True
    # The worker's line says what the job parked on.
    parked_line = f"job parked job_id={job} "
    lines = [line for line in worker.read_text().splitlines() if parked_line in line]
    assert lines and all("outcome=park reason=sleep" in line for line in lines), lines


def test_a_wait_is_woken_by_an_emit(worker, client, parking_dsn):
    first = parking_app.waiter.enqueue(event="order-1-packed")
    second = parking_app.waiter.enqueue(event="order-1-packed")
    parked(parking_dsn, first)
    parked(parking_dsn, second)
    with psycopg.connect(parking_dsn) as conn:
        client.emit_event("order-1-packed", {"parcel": 7}, conn=conn)
        conn.rollback()  # a rolled-back emit wakes nobody
    assert live(parking_dsn, first) == {**parked(parking_dsn, first)}
    client.emit_event("order-1-packed", {"parcel": 7})
    assert wait_done(parking_dsn, first) == "succeeded"
    assert wait_done(parking_dsn, second) == "succeeded"
    assert client.result(first) == {"parcel": 7} == client.result(second)
    assert calls(parking_dsn, first) == ["before", "woken"]
    assert attempts(parking_dsn, first) == 1
    parked_line = f"job parked job_id={first} "
    lines = [line for line in worker.read_text().splitlines() if parked_line in line]
    assert lines and all(
        "outcome=park reason=wait event=order-1-packed" in line for line in lines
    ), lines


def test_an_event_emitted_before_the_wait_is_delivered_at_once(worker, client, parking_dsn):
    client.emit_event("order-2-packed", "early")
    job = parking_app.waiter.enqueue(event="order-2-packed")
    assert wait_done(parking_dsn, job, timeout=30) == "succeeded"
    assert client.result(job) == "early"
    assert calls(parking_dsn, job) == ["before", "woken"]


def test_a_wait_past_its_timeout_raises_event_timeout(worker, client, parking_dsn):
    job = parking_app.waiter.enqueue(event="never-emitted", timeout=1.0)
    assert wait_done(parking_dsn, job, timeout=30) == "succeeded"
    assert client.result(job) == "timed out"
    assert calls(parking_dsn, job) == ["before", "timeout"]


def test_a_sleeping_job_can_be_cancelled(worker, client, parking_dsn):
    by_api = parking_app.three_steps.enqueue(pause=3600.0)
    by_cli = parking_app.three_steps.enqueue(pause=3600.0)
    parked(parking_dsn, by_api)
    parked(parking_dsn, by_cli)
    assert client.cancel(by_api)
    done = subprocess.run(
        [PGQ, "cancel", str(by_cli), "--dsn", parking_dsn],
        check=False,
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert done.returncode == 0, done.stdout + done.stderr
    assert finished(parking_dsn, by_api) == "cancelled"
    assert finished(parking_dsn, by_cli) == "cancelled"
    assert calls(parking_dsn, by_api) == ["one"]


def test_a_waiting_job_can_be_cancelled(worker, client, parking_dsn):
    job = parking_app.waiter.enqueue(event="order-3-packed")
    parked(parking_dsn, job)
    assert client.cancel(job)
    assert finished(parking_dsn, job) == "cancelled"
    client.emit_event("order-3-packed", "late")
    assert finished(parking_dsn, job) == "cancelled"


@pytest.mark.parametrize("task", [parking_app.gated_sleep, parking_app.gated_wait])
def test_a_cancel_requested_while_the_job_parks_cancels_it(worker, client, parking_dsn, task):
    """The cancel reaches the running job after its handler asked to sleep or wait and before
    the park is written: the job is cancelled, not parked with the request forgotten (to wake
    days later and run on)."""
    job = task.enqueue()
    wait_for(lambda: "gated" in calls(parking_dsn, job), message="the handler to start")
    with psycopg.connect(parking_dsn) as holder:
        # The job's row held, the handler parks: the worker's park waits on the row.
        holder.execute("SELECT 1 FROM pgqueue.jobs WHERE id = %s FOR UPDATE", (job,))
        with psycopg.connect(parking_dsn, autocommit=True) as gate:
            gate.execute(
                "INSERT INTO ledger (job_id, attempt, event) VALUES (%s, 1, 'open')", (job,)
            )
        wait_for(
            lambda: scalar(
                parking_dsn,
                "SELECT count(*) FROM pg_stat_activity WHERE wait_event_type = 'Lock'"
                " AND query LIKE %s",
                ("%park%" if task is parking_app.gated_wait else "%state = 'scheduled'%",),
            ),
            message="the park to wait for the job's row",
        )
        assert holder.execute("SELECT pgqueue.cancel(%s)", (job,)).fetchone() == ("cancelling",)
    assert wait_done(parking_dsn, job, timeout=30) == "cancelled"
    assert live(parking_dsn, job) is None
    assert "after" not in calls(parking_dsn, job)


def test_a_durable_member_of_a_chain_releases_its_dependent_when_it_finishes(
    worker, client, parking_dsn
):
    """A member that sleeps is parked, not finished: its dependent waits for its end (and its
    result), and its steps run once."""
    run = chain(parking_app.three_steps.s(pause=2.0), parking_app.follow.s()).enqueue()
    first, second = run.job_ids
    parked(parking_dsn, first)
    assert live(parking_dsn, second)["state"] == "waiting"
    assert run.result(timeout=30) == "followed 1"
    assert calls(parking_dsn, first) == ["one", "two", "three"]
    followed_at = scalar(
        parking_dsn, "SELECT at FROM ledger WHERE job_id = %s AND event = 'follow'", (second,)
    )
    three_at = scalar(
        parking_dsn, "SELECT at FROM ledger WHERE job_id = %s AND event = 'three'", (first,)
    )
    assert followed_at > three_at


def test_a_sleep_in_a_process_pool_child(process_worker, client, parking_dsn):
    job = parking_app.three_steps.enqueue(pause=1.0, queue="parking_proc")
    row = parked(parking_dsn, job)
    assert row["worker_id"] is None and row["attempts"] == 0
    assert wait_done(parking_dsn, job) == "succeeded"
    assert calls(parking_dsn, job) == ["one", "two", "three"]
    assert attempts(parking_dsn, job) == 1


def test_jobs_show_says_what_a_parked_job_waits_for(worker, client, parking_dsn):
    from typer.testing import CliRunner

    from pgqueue.cli.app import app

    sleeping = parking_app.three_steps.enqueue(pause=3600.0)
    waiting = parking_app.waiter.enqueue(event="order-4-packed", timeout=7200.0)
    parked(parking_dsn, sleeping)
    parked(parking_dsn, waiting)
    runner = CliRunner()

    def show(job: int, *args: str) -> str:
        shown = runner.invoke(app, ["jobs", "show", str(job), "--dsn", parking_dsn, *args])
        assert shown.exit_code == 0, shown.output
        return shown.output

    as_json = json.loads(show(sleeping, "--json"))["parked"]
    wake = scalar(parking_dsn, "SELECT run_at FROM pgqueue.jobs WHERE id = %s", (sleeping,))
    assert as_json["kind"] == "sleep"
    assert datetime.fromisoformat(as_json["until"]) == wake
    assert "sleeping until " in show(sleeping)
    waited = json.loads(show(waiting, "--json"))["parked"]
    assert (waited["kind"], waited["event"]) == ("wait", "order-4-packed")
    assert "waiting for event 'order-4-packed' until" in show(waiting)
    assert client.cancel(sleeping) and client.cancel(waiting)


def test_the_dashboards_job_page_lists_the_steps_and_the_sleep(
    worker,
    client,
    parking_dsn,
    browser,  # noqa: F811 - the fixture imported above
):
    from selenium.webdriver.common.by import By

    from tests.dashboard_helpers import dashboard
    from tests.integration.test_dashboard_browser import job_page

    job = parking_app.three_steps.enqueue(pause=3600.0)
    parked(parking_dsn, job)
    try:
        with dashboard(parking_dsn) as board:
            browser.get(board.url + f"/#/jobs/{job}")
            wait_for(lambda: job_page(browser, job), message="the job page")
            assert browser.find_element(By.ID, "job-parked").text.startswith("sleeping until ")
            rows = browser.find_elements(By.CSS_SELECTOR, "#job-step-rows tbody tr")
            cells = [[c.text for c in r.find_elements(By.TAG_NAME, "td")][:4] for r in rows]
            assert cells == [
                ["1", "one", "step", "succeeded"],
                ["2", "sleep#1", "sleep", "waiting"],
            ]
    finally:
        client.cancel(job)


def test_metrics_count_sleeping_and_waiting_jobs(worker, client, parking_dsn):
    from pgqueue.worker.metrics import ParkedCollector

    sleeping = parking_app.three_steps.enqueue(pause=3600.0)
    waiting = parking_app.waiter.enqueue(event="order-5-packed")
    parked(parking_dsn, sleeping)
    parked(parking_dsn, waiting)
    collector = ParkedCollector(parking_dsn, max_age=0)
    try:
        samples = {
            (s.name, tuple(sorted(s.labels.items()))): s.value
            for family in collector.collect()
            for s in family.samples
        }
    finally:
        collector.close()
    assert samples[("pgqueue_parked_up", ())] == 1
    by_state = {
        dict(labels)["state"]: value
        for (name, labels), value in samples.items()
        if name == "pgqueue_parked_jobs" and dict(labels)["queue"] == "parking"
    }
    assert by_state == {"sleeping": 1, "waiting": 1}
    assert client.cancel(sleeping) and client.cancel(waiting)
