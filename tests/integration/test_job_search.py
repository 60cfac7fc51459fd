"""Job search and the job page's data: the Python API (sync and async share one plan), the
CLI, and the dashboard's endpoints, over jobs that real `pgq work` processes moved to every
place a job can be (live, history, dead letters)."""

from __future__ import annotations

import asyncio
import json
import re
from datetime import UTC, datetime, timedelta
from typing import Any

import psycopg
import pytest
from typer.testing import CliRunner

from pgqueue import PgQueue, chain
from pgqueue.cli import app as cli_app
from pgqueue.db.views import job_detail, job_detail_async, search_jobs, search_jobs_async
from pgqueue.errors import InvalidCursorError, InvalidJobError, SearchTimeoutError
from tests.dashboard_helpers import dashboard
from tests.helpers import scalar, spawn_worker, stop_workers, wait_for
from tests.integration import worker_app, workflow_app
from tests.integration.workflow_app import add

runner = CliRunner()


def ids(page):
    return [job["id"] for job in page.jobs]


def walk(pgq, limit, **filters):
    """Every page of a search, following the cursors."""
    pages = [search_jobs(pgq, limit=limit, **filters)]
    while pages[-1].cursor is not None:
        pages.append(search_jobs(pgq, limit=limit, after=pages[-1].cursor, **filters))
        assert len(pages) < 100
    return pages


@pytest.fixture
def jobs(app_dsn, conn):
    """Jobs in every place, put there by real worker processes: a dead letter (three failed
    attempts), a job that succeeded at its second attempt, plain successes (history recorded:
    record_succeeded on), a cancelled job, a scheduled one, a ready one in a queue no worker
    serves, and a chain whose middle step waits."""
    conn.execute("UPDATE pgqueue.retention SET record_succeeded = true")
    pgq = worker_app.pgq
    made: dict[str, Any] = {
        "dead": pgq.enqueue("always_fails", conn=conn),
        "flaky": pgq.enqueue("flaky", {"fail_times": 1}, conn=conn),
        "noops": [pgq.enqueue("noop", {"n": n}, queue="default", conn=conn) for n in range(5)],
        "scheduled": pgq.enqueue("noop", {"n": 100}, queue="later", delay=3600, conn=conn),
        # Searched for, never run (no worker serves its queue): args noop does not take, so
        # written by a client that has not registered noop (one that has checks its args).
        "idle": PgQueue(app_dsn).enqueue(
            "noop", {"n": 101, "customer": {"id": 7}}, queue="idle", conn=conn
        ),
        "cancelled": pgq.enqueue("noop", {"n": 102}, queue="idle", delay=3600, conn=conn),
    }
    assert pgq.cancel(made["cancelled"], conn=conn) == "cancelled"
    worker = spawn_worker(app_dsn, "--queue", "default")
    try:
        wait_for(
            lambda: (
                scalar(app_dsn, "SELECT count(*) FROM pgqueue.jobs WHERE queue = 'default'") == 0
            ),
            timeout=60,
            message="the default queue to drain",
        )
    finally:
        stop_workers([worker])
    run = workflow_app.pgq.enqueue_workflow(
        chain(add.s(1, 2), add.s(y=10), add.s(y=100)), conn=conn
    )
    made["chain"] = run.job_ids
    return made


def test_search_finds_every_place_filters_and_pages(app_dsn, pgq, jobs):
    everything = search_jobs(pgq, limit=100)
    assert everything.cursor is None
    expected = {
        jobs["dead"],
        jobs["flaky"],
        *jobs["noops"],
        jobs["scheduled"],
        jobs["idle"],
        jobs["cancelled"],
        *jobs["chain"],
    }
    assert sorted(ids(everything)) == sorted(expected)
    by_id = {job["id"]: job for job in everything.jobs}
    assert (by_id[jobs["dead"]]["place"], by_id[jobs["dead"]]["state"]) == ("dead", "dead")
    assert by_id[jobs["dead"]]["error_class"] == "ValueError"
    assert (by_id[jobs["flaky"]]["place"], by_id[jobs["flaky"]]["state"]) == (
        "history",
        "succeeded",
    )
    assert by_id[jobs["cancelled"]]["state"] == "cancelled"
    assert by_id[jobs["scheduled"]]["state"] == "scheduled"
    assert [by_id[i]["state"] for i in jobs["chain"]] == ["ready", "waiting", "waiting"]
    # Newest first: by the time each place is ordered by (finished for finished jobs).
    times = [
        job["created_at"] if job["place"] == "live" else job["finished_at"]
        for job in everything.jobs
    ]
    assert times == sorted(times, reverse=True)

    # Pages of two: every job exactly once, in the same order as the one big page.
    pages = walk(pgq, 2)
    assert [i for page in pages for i in ids(page)] == ids(everything)
    assert all(len(page.jobs) == 2 for page in pages[:-1])

    # Filters: each place's states, task, queue, args containment, error text, times.
    assert ids(search_jobs(pgq, state="dead")) == [jobs["dead"]]
    assert ids(search_jobs(pgq, state="cancelled")) == [jobs["cancelled"]]
    # The dead letter died after the scheduled job was enqueued.
    assert ids(search_jobs(pgq, state=["scheduled", "dead"])) == [
        jobs["dead"],
        jobs["scheduled"],
    ]
    assert sorted(ids(search_jobs(pgq, state="succeeded"))) == sorted(
        [jobs["flaky"], *jobs["noops"]]
    )
    assert ids(search_jobs(pgq, state="waiting")) == sorted(jobs["chain"][1:], reverse=True)
    assert ids(search_jobs(pgq, task="flaky")) == [jobs["flaky"]]
    assert sorted(ids(search_jobs(pgq, queue="idle"))) == sorted([jobs["idle"], jobs["cancelled"]])
    assert ids(search_jobs(pgq, args={"n": 3})) == [jobs["noops"][3]]
    assert ids(search_jobs(pgq, args={"customer": {"id": 7}})) == [jobs["idle"]]
    assert ids(search_jobs(pgq, args={"n": "3"})) == []  # containment is typed
    assert ids(search_jobs(pgq, error="FLAKY failure on attempt 1")) == [jobs["flaky"]]
    assert ids(search_jobs(pgq, error="valueerror")) == [jobs["dead"]]  # the class, too
    assert ids(search_jobs(pgq, error="no such error")) == []
    assert ids(search_jobs(pgq, task="noop", state="succeeded", args={"n": 4})) == [
        jobs["noops"][4]
    ]
    assert ids(search_jobs(pgq, id=jobs["flaky"])) == [jobs["flaky"]]
    now = datetime.now(UTC)
    finished = search_jobs(pgq, finished_since=now - timedelta(hours=1), limit=100)
    assert {j["place"] for j in finished.jobs} == {"history", "dead"}
    assert len(finished.jobs) == 8
    assert ids(search_jobs(pgq, since=now + timedelta(minutes=1))) == []
    assert len(search_jobs(pgq, until=now + timedelta(minutes=1), limit=100).jobs) == 13
    assert ids(search_jobs(pgq, finished_until=now - timedelta(hours=1))) == []


def test_async_search_and_detail_share_the_plan(dsn, jobs):
    async def both() -> tuple[object, object, object]:
        client = PgQueue(dsn)
        try:
            first = await search_jobs_async(client, limit=3)
            second = await search_jobs_async(client, limit=3, after=first.cursor)
            detail = await job_detail_async(client, jobs["dead"])
            return first, second, detail
        finally:
            await client.aclose()
            client.close()

    first, second, detail = asyncio.run(both())
    sync = PgQueue(dsn)
    try:
        assert first == search_jobs(sync, limit=3)
        assert second == search_jobs(sync, limit=3, after=first.cursor)
        assert detail == job_detail(sync, jobs["dead"])
    finally:
        sync.close()


def test_job_detail_has_every_attempt_the_workflow_and_the_actions(pgq, jobs):
    dead = job_detail(pgq, jobs["dead"])
    assert (dead["place"], dead["state"], dead["actions"]) == ("dead", "dead", ["replay"])
    assert [e["attempt"] for e in dead["errors"]] == [1, 2, 3]
    assert all("raise ValueError" in e["traceback"] for e in dead["errors"])
    assert dead["workflow"] is None
    flaky = job_detail(pgq, jobs["flaky"])
    assert (flaky["state"], flaky["actions"]) == ("succeeded", [])
    assert [e["message"] for e in flaky["errors"]] == ["flaky failure on attempt 1"]
    assert job_detail(pgq, jobs["scheduled"])["actions"] == ["retry", "cancel"]
    assert job_detail(pgq, jobs["idle"])["args"] == {"n": 101, "customer": {"id": 7}}

    first, middle, last = jobs["chain"]
    page = job_detail(pgq, middle)
    assert (page["state"], page["actions"]) == ("waiting", ["cancel"])
    workflow = page["workflow"]
    assert [(n["id"], n["state"], n["task"]) for n in workflow["parents"]] == [
        (first, "ready", "wf.add")
    ]
    assert [(n["id"], n["state"]) for n in workflow["dependents"]] == [(last, "waiting")]
    assert job_detail(pgq, first)["workflow"]["parents"] == []
    assert job_detail(pgq, last)["workflow"]["dependents"] == []
    assert job_detail(pgq, 10**12) is None


def test_bad_input_is_refused_before_any_query(pgq):
    with pytest.raises(InvalidJobError, match="unknown state 'lost'"):
        search_jobs(pgq, state="lost")
    with pytest.raises(InvalidJobError, match="timezone-aware"):
        search_jobs(pgq, since=datetime(2026, 1, 1))
    with pytest.raises(InvalidJobError, match="since must be earlier"):
        search_jobs(
            pgq, since=datetime(2026, 2, 1, tzinfo=UTC), until=datetime(2026, 1, 1, tzinfo=UTC)
        )
    with pytest.raises(InvalidJobError, match="limit must be between 1 and 1000"):
        search_jobs(pgq, limit=0)
    with pytest.raises(InvalidJobError, match="args must be an object"):
        search_jobs(pgq, args=["n"])
    for cursor in ("", "v1.", "v1.!!!", "v2.e30", "v1.eyJsIjpbMF19", "v1.eyJ4IjoxfQ"):
        with pytest.raises(InvalidCursorError, match="invalid cursor"):
            search_jobs(pgq, after=cursor)


def test_a_search_past_its_time_limit_says_so(dsn, pgq):
    pgq.enqueue("t")
    with psycopg.connect(dsn) as locker:
        locker.execute("LOCK TABLE pgqueue.jobs IN ACCESS EXCLUSIVE MODE")
        with pytest.raises(SearchTimeoutError, match=r"took longer than 0\.2 s: narrow it"):
            search_jobs(pgq, task="t", timeout=0.2)
        locker.rollback()
    assert len(search_jobs(pgq, task="t", timeout=0.2).jobs) == 1


def invoke(*args: str):
    return runner.invoke(cli_app, list(args), catch_exceptions=False)


def test_cli_search_pages_filters_and_explains_bad_input(dsn, jobs):
    result = invoke("jobs", "search", "--dsn", dsn, "--state", "dead", "--json")
    assert result.exit_code == 0, result.output
    data = json.loads(result.stdout)
    assert [j["id"] for j in data["jobs"]] == [jobs["dead"]] and data["cursor"] is None

    result = invoke(
        "jobs", "search", "--dsn", dsn, "--task", "noop", "--args", "n=2", "--since", "1h", "--json"
    )
    assert [j["id"] for j in json.loads(result.stdout)["jobs"]] == [jobs["noops"][2]]

    # The table, then the command line of the next page.
    seen: list[int] = []
    after: list[str] = []
    for _ in range(10):
        result = invoke(
            "jobs", "search", "--dsn", dsn, "--state", "succeeded", "--limit", "4", *after
        )
        assert result.exit_code == 0, result.output
        seen += [int(n) for n in re.findall(r"^[│ ]*(\d+) ", result.stdout, re.MULTILINE)]
        match = re.search(r"next page: --after (\S+)", result.stdout)
        if match is None:
            break
        after = ["--after", match.group(1)]
    assert sorted(seen) == sorted([jobs["flaky"], *jobs["noops"]])

    for args, code, message in (
        (["--state", "lost"], 2, "unknown state 'lost'"),
        (["--since", "yesterday"], 2, "is not a time"),
        (["--args", "n"], 2, "expected KEY=VALUE"),
        (["--after", "v1.bogus"], 1, "invalid cursor"),
        (["--limit", "0"], 2, "between 1 and 1000"),
    ):
        result = invoke("jobs", "search", "--dsn", dsn, *args)
        assert result.exit_code == code, (args, result.output)
        assert message in result.output, (args, result.output)
        assert "Traceback" not in result.output


def test_cli_jobs_show_has_the_workflow_neighbours_and_actions(dsn, jobs):
    first, middle, last = jobs["chain"]
    result = invoke("jobs", "show", str(middle), "--dsn", dsn)
    assert result.exit_code == 0, result.output
    assert f"waits for: {first} wf.add (ready)" in result.stdout
    assert f"then runs: {last} wf.add (waiting)" in result.stdout
    shown = json.loads(invoke("jobs", "show", str(jobs["dead"]), "--dsn", dsn, "--json").stdout)
    assert (shown["state"], shown["actions"], shown["workflow"]) == ("dead", ["replay"], None)


def test_dashboard_search_and_job_endpoints(dsn, jobs):
    with dashboard(dsn) as board:
        status, headers, body = board.request("/api/search?state=dead&state=cancelled&limit=1")
        page = json.loads(body)
        assert (
            status == 200
            and {k.lower(): v for k, v in headers.items()}["cache-control"] == "no-store"
        )
        assert [j["id"] for j in page["jobs"]] == [jobs["dead"]] and page["cursor"]
        status, _, body = board.request(
            f"/api/search?state=dead&state=cancelled&limit=1&after={page['cursor']}"
        )
        assert [j["id"] for j in json.loads(body)["jobs"]] == [jobs["cancelled"]]
        status, _, body = board.request("/api/search?args=n%3D3&task=noop&error=&queue=")
        assert [j["id"] for j in json.loads(body)["jobs"]] == [jobs["noops"][3]]
        for query, message in (
            ("state=lost", "unknown state"),
            ("since=soon", "is not a time"),
            ("after=v1.x", "invalid cursor"),
            ("id=abc", "id must be an integer"),
        ):
            status, _, body = board.request(f"/api/search?{query}")
            assert (status, message in body) == (400, True), (query, body)

        status, _, body = board.request(f"/api/jobs/{jobs['dead']}")
        detail = json.loads(body)
        assert status == 200 and detail["actions"] == ["replay"] and len(detail["errors"]) == 3
        assert board.request("/api/jobs/999999999")[0] == 404
        assert board.request("/api/jobs/abc")[0] == 404

    # Behind auth like every other page and endpoint.
    with dashboard(dsn, env={"PGQUEUE_DASHBOARD_TOKEN": "s3cret"}) as board:
        assert board.request("/api/search")[0] == 401
        assert board.request(f"/api/jobs/{jobs['dead']}")[0] == 401
        auth = {"Authorization": "Bearer s3cret"}
        assert board.request("/api/search?state=dead", headers=auth)[0] == 200


@pytest.mark.parametrize("skew", [-86400, 86400])
def test_an_age_is_counted_by_the_database_clock_not_the_callers(dsn, pgq, skew):
    """``--since 1h`` on a host whose clock is a day off finds what an hour by the database's
    clock holds; the Python API takes the age as a timedelta, resolved the same way."""
    import os
    import subprocess
    import sys

    recent = pgq.enqueue("aged.task", {"n": 1}, allow_unknown=True)
    old = pgq.enqueue("aged.task", {"n": 2}, allow_unknown=True)
    with psycopg.connect(dsn, autocommit=True) as conn:
        conn.execute(
            "UPDATE pgqueue.jobs SET created_at = now() - interval '2 hours' WHERE id = %s", (old,)
        )
    done = subprocess.run(
        [sys.executable, "-m", "tests.chaos.skewed", "jobs", "search", "--dsn", dsn,
         "--task", "aged.task", "--since", "1h", "--json"],
        env={**os.environ, "CHAOS_CLOCK_SKEW": str(skew)},
        capture_output=True, text=True, timeout=60, check=False,
    )  # fmt: skip
    assert done.returncode == 0, done.stderr
    assert [j["id"] for j in json.loads(done.stdout)["jobs"]] == [recent]
    assert ids(search_jobs(pgq, task="aged.task", since=timedelta(hours=1))) == [recent]
    assert ids(search_jobs(pgq, task="aged.task", until=timedelta(hours=1))) == [old]
