"""Job metadata and tags: written by every enqueue path, carried by every statement that moves a
job, shown by the views, searched, and seen by handlers (``current_job().meta`` / ``.tags``).
Handlers in --pool process children see them too (tests/integration/test_tracing.py)."""

from __future__ import annotations

import json
import os
from datetime import timedelta
from typing import Any

import psycopg
import pytest
from typer.testing import CliRunner

from pgqueue import chain
from pgqueue.cli import app as cli_app
from pgqueue.db import views
from pgqueue.errors import InvalidJobError
from tests.dashboard_helpers import dashboard
from tests.helpers import thread_worker, wait_for
from tests.integration import traced_app

META = {"tenant": "acme", "n": 3}


def row(dsn: str, table: str, job_id: int) -> tuple[Any, Any]:
    with psycopg.connect(dsn) as conn:
        found = conn.execute(
            f"SELECT meta, tags FROM pgqueue.{table} WHERE id = %s",  # noqa: S608 (fixed names)
            (job_id,),
        ).fetchone()
    assert found is not None, (table, job_id)
    return found[0], found[1]


def test_every_enqueue_path_writes_meta_and_tags(dsn, pgq):
    single = pgq.enqueue("t", {}, meta=META, tags=["a", "b", "a"])
    keyed = pgq.enqueue("t", {}, meta=META, tags=["k"], idempotency_key="key-1")
    plain = pgq.enqueue("t", {})
    few = pgq.enqueue_many(
        [pgq.spec("t", {"i": i}, {"meta": {"i": i}, "tags": ["few"]}) for i in range(3)]
    )
    many = pgq.enqueue_many([pgq.spec("t", {"i": i}, {"tags": ["many"]}) for i in range(70)])
    copied = pgq.enqueue_many([pgq.spec("t", {}, {"meta": META, "delay": 60}) for _ in range(70)])
    keyed_bulk = pgq.enqueue_many(
        [pgq.spec("t", {}, {"idempotency_key": f"bulk-{i}", "tags": ["kb"]}) for i in range(2)]
    )
    # A deduplication mode (enqueue_job, one by one) and a fair queue (ranked COPY, enqueue_job).
    moded = pgq.enqueue_many(
        [pgq.spec("t", {}, {"idempotency_key": "m", "throttle": 60, "tags": ["mode"]})]
    )
    pgq.flow.configure_queue("fair", fair=True)
    fair_one = pgq.enqueue("t", {}, queue="fair", meta=META, tags=["f1"])
    fair_bulk = pgq.enqueue_many(
        [pgq.spec("t", {}, {"queue": "fair", "meta": META, "tags": ["fb"]}) for _ in range(70)]
    )
    with psycopg.connect(dsn, autocommit=True) as conn:
        sql_id = conn.execute(
            "SELECT pgqueue.enqueue('t', '{}', meta => '{\"from\": \"sql\"}', tags => ARRAY['s'])"
        ).fetchone()[0]
        old_call = conn.execute("SELECT pgqueue.enqueue('t', '{}', 'default', 0)").fetchone()[0]
        with pytest.raises(
            psycopg.errors.InvalidParameterValue, match="meta must be a JSON object"
        ):
            conn.execute("SELECT pgqueue.enqueue('t', '{}', meta => '[1]')")
    assert row(dsn, "jobs", single) == (META, ["a", "b"])
    assert row(dsn, "jobs", keyed) == (META, ["k"])
    assert row(dsn, "jobs", plain) == (None, None)
    assert [row(dsn, "jobs", i) for i in few] == [({"i": i}, ["few"]) for i in range(3)]
    assert row(dsn, "jobs", many[-1]) == (None, ["many"])
    assert row(dsn, "jobs", copied[0]) == (META, None)
    assert row(dsn, "jobs", keyed_bulk[1]) == (None, ["kb"])
    assert row(dsn, "jobs", sql_id) == ({"from": "sql"}, ["s"])
    assert row(dsn, "jobs", moded[0]) == (None, ["mode"])
    assert row(dsn, "jobs", fair_one) == (META, ["f1"])
    assert row(dsn, "jobs", fair_bulk[-1]) == (META, ["fb"])
    assert row(dsn, "jobs", old_call) == (None, None)


def test_task_defaults_merge_with_the_call(app_dsn, pgq):
    job = pgq.enqueue(traced_app.sync_seen, {}, meta={"tenant": "acme"}, tags=["b", "from-task"])
    assert row(app_dsn, "jobs", job) == (
        {"team": "billing", "tenant": "acme"},
        ["from-task", "b"],
    )
    overridden = pgq.enqueue(traced_app.sync_seen, {}, meta={"team": "ops"})
    assert row(app_dsn, "jobs", overridden)[0] == {"team": "ops"}


@pytest.mark.parametrize(
    ("options", "message"),
    [
        ({"meta": ["x"]}, "meta must be a JSON object"),
        ({"meta": {"x": float("nan")}}, "NaN"),
        ({"meta": {"x": "\x00"}}, "NUL"),
        ({"meta": {1: "x"}}, "key"),
        ({"meta": {"x": "y" * 9000}}, "over the limit of 8192"),
        ({"tags": "urgent"}, "write \\['urgent'\\] for one tag"),
        ({"tags": [""]}, "non-empty strings"),
        ({"tags": ["x" * 101]}, "at most 100 characters"),
        ({"tags": [str(i) for i in range(21)]}, "at most 20 tags"),
        ({"tags": ["\ud800"]}, "lone surrogate"),
    ],
)
def test_bad_meta_and_tags_are_refused_before_writing(pgq, options, message):
    with pytest.raises(InvalidJobError, match=message):
        pgq.enqueue("t", {}, **options)


def test_workflows_carry_their_own_and_the_members_meta(dsn, pgq):
    run = pgq.enqueue_workflow(
        chain(
            traced_app.child.s(1),
            traced_app.child.s(2, meta={"step": 2}, tags=["second"]),
            meta={"flow": "etl"},
            tags=["wf"],
            on_failure=traced_app.child.s(3),
        )
    )
    first, second = run.job_ids
    assert row(dsn, "jobs", first) == ({"flow": "etl"}, ["wf"])
    assert row(dsn, "jobs", second) == ({"flow": "etl", "step": 2}, ["wf", "second"])
    with psycopg.connect(dsn) as conn:
        spec = conn.execute("SELECT on_failure FROM pgqueue.workflows").fetchone()[0]
    assert (spec["meta"], spec["tags"]) == ({"flow": "etl"}, ["wf"])


def test_meta_and_tags_follow_the_job_everywhere(app_dsn, pgq):
    kept = pgq.enqueue(traced_app.child, {}, meta=META, tags=["kept"], result_ttl=60)
    dead = pgq.enqueue(traced_app.dies, {}, meta=META, tags=["dead"])
    cancelled = pgq.enqueue(traced_app.child, {}, meta=META, tags=["cancelled"], delay=3600)
    async_job = pgq.enqueue(traced_app.async_seen, {}, meta=META, tags=["async"])
    sync_job = pgq.enqueue(traced_app.sync_seen, {}, tags=["sync"])
    assert pgq.cancel(cancelled) == "cancelled"
    seen_file = os.path.join(os.environ.get("TMPDIR", "/tmp"), f"seen-{os.getpid()}.jsonl")
    os.environ["PGQUEUE_TEST_SEEN"] = seen_file
    try:
        with thread_worker(traced_app.pgq, app_dsn, burst=True) as worker:
            worker.join()
        with open(seen_file, encoding="utf-8") as lines:
            seen = {r["job"]: r for r in map(json.loads, lines)}
    finally:
        del os.environ["PGQUEUE_TEST_SEEN"]
        if os.path.exists(seen_file):
            os.remove(seen_file)
    # Handlers read them: async on the loop, sync in a handler thread.
    assert (seen[async_job]["meta"], seen[async_job]["tags"]) == (META, ["async"])
    assert (seen[sync_job]["meta"], seen[sync_job]["tags"]) == (
        {"team": "billing"},
        ["from-task", "sync"],
    )
    assert row(app_dsn, "job_history", kept) == (META, ["kept"])
    assert row(app_dsn, "job_history", cancelled) == (META, ["cancelled"])
    assert row(app_dsn, "dead_letters", dead) == (META, ["dead"])
    [letter] = pgq.admin.dead_letters(ids=[dead])
    assert (letter["meta"], letter["tags"]) == (META, ["dead"])

    # Search: by tag and by metadata, in every place.
    found = views.search_jobs(pgq, tags=["dead"])
    assert [j["id"] for j in found.jobs] == [dead]
    found = views.search_jobs(pgq, meta={"tenant": "acme"})
    assert {j["id"] for j in found.jobs} == {kept, dead, cancelled}
    runner = CliRunner()
    result = runner.invoke(
        cli_app, ["jobs", "search", "--tag", "kept", "--meta", "n=3", "--json", "--dsn", app_dsn]
    )
    assert result.exit_code == 0, result.output
    assert [j["id"] for j in json.loads(result.output)["jobs"]] == [kept]
    detail = views.job_detail(pgq, dead)
    assert detail is not None and (detail["meta"], detail["tags"]) == (META, ["dead"])
    with dashboard(app_dsn) as board:
        status, _, body = board.request("/api/search?tag=kept&meta=n%3D3&meta=tenant%3Dacme")
        assert status == 200 and [j["id"] for j in json.loads(body)["jobs"]] == [kept]
        assert json.loads(body)["jobs"][0]["tags"] == ["kept"]
        status, _, body = board.request(f"/api/jobs/{dead}")
        assert status == 200 and (json.loads(body)["meta"], json.loads(body)["tags"]) == (
            META,
            ["dead"],
        )

    # Replay brings them back with the job.
    assert pgq.admin.replay_dead_letters(ids=[dead]) == 1
    assert row(app_dsn, "jobs", dead) == (META, ["dead"])
    result = runner.invoke(
        cli_app,
        ["jobs", "list", "--tag", "dead", "--meta", "tenant=acme", "--json", "--dsn", app_dsn],
    )
    assert result.exit_code == 0, result.output
    assert [j["id"] for j in json.loads(result.output)] == [dead]
    assert views.jobs(pgq, tags=["nope"]) == []


def test_the_reaper_and_running_jobs_view_keep_them(dsn, pgq):
    job = pgq.enqueue("t", {}, meta=META, tags=["reaped"], max_attempts=1)
    with psycopg.connect(dsn, autocommit=True) as conn:
        conn.execute(
            "UPDATE pgqueue.jobs SET state = 'running', attempts = 1, started_at = now(),"
            " lease_expires_at = now() + interval '1 hour' WHERE id = %s",
            (job,),
        )
        [running] = views.running_jobs(pgq)
        assert (running["meta"], running["tags"]) == (META, ["reaped"])
        conn.execute(
            "UPDATE pgqueue.jobs SET lease_expires_at = now() - interval '1 second' WHERE id = %s",
            (job,),
        )
        conn.execute("SELECT pgqueue.reap()")
    assert row(dsn, "dead_letters", job) == (META, ["reaped"])


def test_cron_ticks_carry_the_schedules_meta_and_tags(app_dsn, pgq):
    pgq.cron.schedule(
        "tagged", "* * * * *", traced_app.child, {"n": 1}, meta={"source": "cron"}, tags=["cron"]
    )
    [schedule] = pgq.cron.schedules()
    assert (schedule["meta"], schedule["tags"]) == ({"source": "cron"}, ["cron"])
    with psycopg.connect(app_dsn, autocommit=True) as conn:
        conn.execute("UPDATE pgqueue.schedules SET next_tick = date_trunc('minute', now())")
    with thread_worker(traced_app.pgq, app_dsn, queues=["nowhere"]):
        wait_for(
            lambda: views.jobs(pgq, tags=["cron"], meta={"source": "cron"}),
            message="the tick's job",
            timeout=timedelta(seconds=20).total_seconds(),
        )
