"""Cron schedules with several worker processes (each tick exactly once), and autoscaling."""

from __future__ import annotations

import itertools
import time
from collections import Counter
from datetime import datetime, timedelta

import psycopg
import pytest
from typer.testing import CliRunner

from pgqueue import PgQueue
from pgqueue.cli import app as cli_app
from tests.helpers import ledger, scalar, spawn_fleet, spawn_worker, stop_workers, wait_for
from tests.integration import cron_app

pytestmark = pytest.mark.slow

CRON_APP = "tests.integration.cron_app:pgq"
FLOW_APP = "tests.integration.flow_app:pgq"


def ticks(dsn: str) -> Counter[str]:
    return Counter(r[5] for r in ledger(dsn, "tick"))


def test_each_tick_is_enqueued_exactly_once_with_four_workers(app_dsn, tmp_path):
    workers = spawn_fleet(app_dsn, 4, "--queue", "cron", app=CRON_APP, log_dir=tmp_path)
    try:
        wait_for(
            lambda: scalar(app_dsn, "SELECT count(*) FROM pgqueue.schedules") == 3,
            message="schedules written by the workers",
        )
        wait_for(
            lambda: sum(1 for k in ticks(app_dsn) if k.startswith("every_second")) >= 8,
            timeout=60,
            message="eight ticks",
        )
    finally:
        stop_workers(workers)
    seen = ticks(app_dsn)
    assert max(seen.values()) == 1, [k for k, n in seen.items() if n > 1]
    # No tick missing between the first and the last one of the per-second schedule.
    per_second = sorted(
        datetime.fromisoformat(k.split(":", 1)[1]) for k in seen if k.startswith("every_second")
    )
    gaps = {b - a for a, b in itertools.pairwise(per_second)}
    assert gaps == {timedelta(seconds=1)}, gaps
    assert len({r[2] for r in ledger(app_dsn, "tick")}) >= 2  # the ticks ran on several workers
    with psycopg.connect(app_dsn) as conn:
        enqueued = conn.execute(
            "SELECT ticks_enqueued FROM pgqueue.schedules WHERE name = 'every_second'"
        ).fetchone()[0]
        keys = conn.execute(
            "SELECT count(*) FROM ledger WHERE event = 'tick' AND note LIKE 'every_second:%%'"
        ).fetchone()[0]
    assert enqueued >= keys  # (a tick enqueued just before the stop may not have run)


def test_cron_cli_list_pause_resume(app_dsn, tmp_path):
    app = PgQueue(app_dsn)
    app.schedules = cron_app.pgq.schedules
    app.sync_declarations()
    app.cron.schedule("adhoc", "*/5 * * * *", "hold", {"seconds": 1}, tz="America/New_York")
    app.close()
    runner = CliRunner()
    result = runner.invoke(cli_app, ["cron", "list", "--json", "--dsn", app_dsn])
    assert result.exit_code == 0, result.output
    assert '"name": "adhoc"' in result.output and '"timezone": "America/New_York"' in result.output
    result = runner.invoke(cli_app, ["cron", "list", "--dsn", app_dsn])
    assert result.exit_code == 0 and "schedules" in result.output
    result = runner.invoke(cli_app, ["cron", "pause", "every_second", "--dsn", app_dsn])
    assert result.exit_code == 0, result.output
    assert scalar(app_dsn, "SELECT paused FROM pgqueue.schedules WHERE name = 'every_second'")
    [worker] = spawn_fleet(app_dsn, 1, "--queue", "cron", app=CRON_APP, log_dir=tmp_path)
    try:
        wait_for(
            lambda: any(k.startswith("every_two") for k in ticks(app_dsn)),
            timeout=30,
            message="another schedule ticks",
        )
        assert not any(k.startswith("every_second") for k in ticks(app_dsn))  # paused
        # A worker start keeps the operator's pause.
        assert scalar(app_dsn, "SELECT paused FROM pgqueue.schedules WHERE name = 'every_second'")
        result = runner.invoke(cli_app, ["cron", "resume", "every_second", "--dsn", app_dsn])
        assert result.exit_code == 0
        wait_for(
            lambda: any(k.startswith("every_second") for k in ticks(app_dsn)),
            timeout=30,
            message="resumed",
        )
    finally:
        stop_workers([worker])
    result = runner.invoke(cli_app, ["cron", "pause", "nope", "--dsn", app_dsn])
    assert result.exit_code == 1 and "no schedule named 'nope'" in result.output


@pytest.mark.parametrize("policy", ["skip", "catch_up"])
def test_missed_ticks_follow_the_schedules_policy(app_dsn, tmp_path, policy):
    app = PgQueue(app_dsn)
    app.cron.schedule("missed", "* * * * *", "hold", {}, missed=policy, max_catch_up=3)
    app.close()
    # Pretend no worker ran for ten minutes.
    with psycopg.connect(app_dsn) as conn:
        conn.execute(
            "UPDATE pgqueue.schedules SET next_tick = date_trunc('minute', now())"
            " - interval '10 minutes' WHERE name = 'missed'"
        )
    workers = spawn_fleet(app_dsn, 2, "--queue", "nowhere", app=CRON_APP, log_dir=tmp_path)
    try:
        wait_for(
            lambda: scalar(
                app_dsn,
                "SELECT next_tick > now() FROM pgqueue.schedules WHERE name = 'missed'",
            ),
            message="schedule caught up with the clock",
        )
        time.sleep(0.5)
    finally:
        stop_workers(workers)
    with psycopg.connect(app_dsn) as conn:
        jobs = conn.execute(
            "SELECT run_at FROM pgqueue.jobs WHERE task = 'hold' ORDER BY run_at"
        ).fetchall()
        row = conn.execute(
            "SELECT ticks_enqueued, ticks_skipped FROM pgqueue.schedules WHERE name = 'missed'"
        ).fetchone()
    assert row is not None
    enqueued, skipped = row
    # Eleven ticks were missed, or twelve when a minute boundary passed while the workers
    # started (the clock moves on in the test too).
    if policy == "skip":
        # The latest tick is under a minute late (within grace): it runs; the rest are dropped.
        assert len(jobs) == 1 and enqueued == 1 and skipped in (10, 11)
    else:
        # max_catch_up: the three latest ticks run.
        assert len(jobs) == 3 and enqueued == 3 and skipped in (8, 9)
        assert [b[0] - a[0] for a, b in itertools.pairwise(jobs)] == [timedelta(minutes=1)] * 2


def test_autoscaling_grows_under_load_and_shrinks_when_idle(app_dsn, pgq, tmp_path):
    pgq.enqueue_many([pgq.spec("hold", {"seconds": 0.5}, {}) for _ in range(150)])
    worker = spawn_worker(
        app_dsn,
        "--concurrency",
        "2:16",
        "--scale-cooldown",
        "1s",
        "--lease",
        "3s",
        app=FLOW_APP,
        log=tmp_path / "w.log",
    )
    try:
        wait_for(
            lambda: (scalar(app_dsn, "SELECT max(concurrency) FROM pgqueue.workers") or 0) >= 8,
            timeout=60,
            message="slots grew",
        )
        wait_for(lambda: len(ledger(app_dsn, "end")) == 150, timeout=90, message="drained")
        wait_for(
            lambda: scalar(app_dsn, "SELECT max(concurrency) FROM pgqueue.workers") == 2,
            timeout=60,
            message="slots shrank back",
        )
    finally:
        stop_workers([worker])
    log = (tmp_path / "w.log").read_text()
    assert "concurrency 2 -> 3" in log and "-> 2 " in log
