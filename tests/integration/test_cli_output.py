"""``pgq`` output read as a CI log or ``kubectl exec`` shows it: real ``pgq`` processes writing
to a pipe with ``COLUMNS=80``. Names and ids are never cut short, tables fit the width,
``--format plain`` splits on tabs and ``--format json`` is the JSON ``--json`` gave."""

from __future__ import annotations

import json
import os
import re
import subprocess
from collections.abc import Iterator
from datetime import datetime

import pytest

from pgqueue import PgQueue
from tests.helpers import PGQ, ROOT, scalar, spawn_worker, thread_worker, wait_for
from tests.integration import worker_app

QUEUE = "payments-settlement-eu"
TASK = "orders.rebuild_customer_ledger"
# A time printed by pgq: day, time, zone offset (the one format).
TIMESTAMP = re.compile(r"\d{4}-\d\d-\d\d \d\d:\d\d:\d\d[+-]\d\d:\d\d")


def pgq_out(dsn: str, *args: str, columns: int = 80) -> str:
    env = {**os.environ, "COLUMNS": str(columns), "PGQUEUE_DSN": dsn}
    env.pop("NO_COLOR", None)
    done = subprocess.run(
        [PGQ, *args], check=False, cwd=ROOT, env=env, capture_output=True, text=True, timeout=60
    )
    assert done.returncode == 0, done.stderr
    return done.stdout


def assert_readable(output: str, *names: str, width: int = 80) -> None:
    assert "…" not in output and "..." not in output, output
    for line in output.splitlines():
        assert len(line) <= width, f"line wider than {width}:\n{output}"
    for name in names:
        assert name in output, f"{name!r} is not shown whole:\n{output}"


@pytest.fixture
def long_names(dsn: str) -> Iterator[PgQueue]:
    pgq = PgQueue(dsn)
    for n in range(3):
        pgq.enqueue(TASK, {"n": n}, queue=QUEUE, priority=5)
    pgq.enqueue(TASK, queue=QUEUE, delay=3600)
    yield pgq
    pgq.close()


@pytest.mark.parametrize(
    "command",
    [
        ("jobs", "list"),
        ("jobs", "search"),
        ("stats",),
        ("status",),
        ("queue", "list"),
    ],
)
def test_tables_in_an_80_column_pipe_show_names_whole(dsn, conn, long_names, command):
    if command == ("queue", "list"):
        pgq_out(dsn, "queue", "set", QUEUE, "--weight", "2")
    output = pgq_out(dsn, *command)
    assert_readable(output, QUEUE)
    if command[0] == "jobs":
        assert_readable(output, TASK)
        # One line per job, not a row wrapped over five.
        assert sum(TASK in line for line in output.splitlines()) == 4, output
        for (job_id,) in conn.execute("SELECT id FROM pgqueue.jobs").fetchall():
            assert re.search(rf"\b{job_id}\b", output), output


def test_wide_terminal_keeps_every_column(dsn, long_names):
    narrow = pgq_out(dsn, "jobs", "list")
    wide = pgq_out(dsn, "jobs", "list", columns=160)
    assert_readable(wide, QUEUE, TASK, width=160)
    assert "priority" in wide and "priority" not in narrow


def test_plain_output_splits_on_tabs(dsn, long_names):
    output = pgq_out(dsn, "jobs", "list", "--format", "plain")
    header, *rows = output.splitlines()
    columns = header.split("\t")
    assert columns[:4] == ["id", "queue", "task", "state"], header
    assert len(rows) == 4
    for row in rows:
        fields = dict(zip(columns, row.split("\t"), strict=True))
        assert fields["queue"] == QUEUE and fields["task"] == TASK
        assert TIMESTAMP.fullmatch(fields["run_at"]), fields["run_at"]
    # cut(1) takes a column straight out of it.
    cut = subprocess.run(
        ["cut", "-f3"], input=output, capture_output=True, text=True, check=True
    ).stdout.split()
    assert cut == ["task"] + [TASK] * 4
    stats = pgq_out(dsn, "stats", "--format", "plain").splitlines()
    assert stats[0].split("\t")[0] == "queue" and stats[1].split("\t")[0] == QUEUE


def test_format_json_is_the_json_output_and_json_flag_still_works(dsn, long_names):
    as_format = json.loads(pgq_out(dsn, "jobs", "list", "--format", "json"))
    as_flag = json.loads(pgq_out(dsn, "jobs", "list", "--json"))
    assert as_format == as_flag and len(as_format) == 4
    assert {job["task"] for job in as_format} == {TASK}
    status = json.loads(pgq_out(dsn, "status", "--format", "json"))
    assert status["queues"][0]["queue"] == QUEUE
    env = {**os.environ, "PGQUEUE_DSN": dsn}
    clash = subprocess.run(
        [PGQ, "jobs", "list", "--json", "--format", "plain"],
        check=False,
        env=env,
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert clash.returncode == 2 and "--json" in clash.stderr, clash.stderr


def test_times_carry_their_zone_everywhere(dsn, long_names):
    job_id = scalar(dsn, "SELECT min(id) FROM pgqueue.jobs")
    shown = pgq_out(dsn, "jobs", "show", str(job_id), "--format", "plain")
    fields = dict(line.split("\t", 1) for line in shown.splitlines()[1:])
    for name in ("run_at", "created_at"):
        assert TIMESTAMP.fullmatch(fields[name]), fields[name]
        datetime.fromisoformat(fields[name])  # parseable back
    table = pgq_out(dsn, "jobs", "list", columns=160)
    assert TIMESTAMP.search(table), table


def test_dead_letters_and_workers_in_an_80_column_pipe(app_dsn, conn):
    broken = worker_app.pgq.enqueue("always_fails", queue=QUEUE, conn=conn)
    with thread_worker(worker_app.pgq, app_dsn, queues=[QUEUE]) as worker:
        wait_for(
            lambda: scalar(app_dsn, "SELECT count(*) FROM pgqueue.dead_letters") == 1,
            message="the dead letter",
        )
        workers = pgq_out(app_dsn, "workers")
        assert_readable(workers, QUEUE)
        plain = pgq_out(app_dsn, "workers", "--format", "plain").splitlines()
        assert plain[0].split("\t")[0] == "id"
        assert plain[1].split("\t")[0] == str(worker.worker.id)  # the whole id
    dead = pgq_out(app_dsn, "dlq", "list")
    assert_readable(dead, QUEUE, str(broken), "always_fails")
    header, row = pgq_out(app_dsn, "dlq", "list", "--format", "plain").splitlines()
    fields = dict(zip(header.split("\t"), row.split("\t"), strict=True))
    assert fields["id"] == str(broken) and TIMESTAMP.fullmatch(fields["dead_at"]), fields


def test_status_shows_the_worker_that_just_stopped(dsn):
    # getting-started: run a --burst worker, then `pgq status` shows "the worker that just
    # stopped".
    worker = spawn_worker(dsn, "--burst", "--queue", "default")
    assert worker.wait(60) == 0
    pid = worker.pid
    output = pgq_out(dsn, "status")
    assert_readable(output)
    line = next(line for line in output.splitlines() if "stopped" in line)
    assert f"pid {pid}" in line and TIMESTAMP.search(line), output
    data = json.loads(pgq_out(dsn, "status", "--format", "json"))
    (stopped,) = data["workers"]["recently_stopped"]
    assert stopped["pid"] == pid and stopped["stopped_at"]


def test_a_name_wider_than_the_terminal_folds_whole(dsn):
    task = "orders.reconciliation.rebuild_customer_ledger_snapshot_for_all_regions"
    with PgQueue(dsn) as pgq:
        job = pgq.enqueue(task, queue=QUEUE)
    output = pgq_out(dsn, "jobs", "list")
    assert_readable(output)
    lines = output.splitlines()
    header = next(i for i, line in enumerate(lines) if line.startswith("id "))
    start, end = lines[header].index("task"), lines[header].index("state")
    row = [line for line in lines[header + 2 :] if line.strip()]
    assert row[0].startswith(f"{job} ") and "ready" in row[0]
    # The column's pieces, top to bottom, are the whole name.
    assert "".join(line[start:end].strip() for line in row) == task, output
