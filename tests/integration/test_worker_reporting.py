"""What a worker reports about failures: one log line per written outcome that names the error,
and each lost lease counted once however long its handler runs on."""

from __future__ import annotations

import contextvars
import json
import logging

import pytest

from pgqueue.handler.logs import JsonFormatter, TextFormatter
from tests.helpers import ledger, scalar, thread_worker, wait_for
from tests.hostile import hostile_app

pytestmark = pytest.mark.slow


def test_retry_and_dead_letter_lines_name_the_error(app_dsn, conn, caplog):
    caplog.set_level(logging.INFO, logger="pgqueue.worker.completer")
    job = hostile_app.pgq.enqueue("bad_address", conn=conn)
    with thread_worker(hostile_app.pgq, app_dsn, concurrency=1):
        wait_for(
            lambda: scalar(app_dsn, "SELECT count(*) FROM pgqueue.dead_letters") == 1,
            message="the dead letter",
        )
    lines = [r for r in caplog.records if getattr(r, "job_id", None) == job]
    lines = [r for r in lines if r.getMessage() != "job started"]
    assert [(r.levelno, r.getMessage(), r.action) for r in lines] == [
        (logging.INFO, "job rescheduled", "job.rescheduled"),
        (logging.INFO, "job dead-lettered", "job.dead_lettered"),
    ]
    # Formatted in an empty context: fields another test bound in this thread (bind()) must
    # not be appended. Nor the worker's id, which a handler that adds the context's fields to
    # the record itself sets on it in the worker's context (seen once in a full run of the
    # suite, after other logging tests in the same process).
    retry, dead = (
        contextvars.Context().run(TextFormatter("%(message)s").format, _without_worker_id(r))
        for r in lines
    )
    # One line each (the message's newline folded), the class and message at the end.
    assert "\n" not in retry and "\n" not in dead
    assert "attempt=1 max_attempts=2" in retry and "delay=0.05s" in retry
    assert retry.endswith("error=ValueError: bad address: x=1 second line")
    assert "attempt=2 max_attempts=2" in dead and "reason=max attempts reached" in dead
    assert dead.endswith("error=ValueError: bad address: x=1 second line")
    # JSON logs: the message stays "job rescheduled"; the error is one field, whole, and the
    # delay a number of seconds.
    entry = json.loads(JsonFormatter().format(lines[0]))
    assert entry["msg"] == "job rescheduled" and entry["attempt"] == 1
    assert entry["action"] == "job.rescheduled" and entry["delay"] == 0.05
    assert entry["error"] == "ValueError: bad address: x=1 second line"
    assert "x" not in entry


def _without_worker_id(record: logging.LogRecord) -> logging.LogRecord:
    copy = logging.makeLogRecord(record.__dict__)
    copy.__dict__.pop("worker_id", None)
    return copy


def test_a_lost_lease_is_counted_once_while_its_sync_handler_runs_on(app_dsn, conn):
    job = hostile_app.pgq.enqueue("holds_on", conn=conn)
    with thread_worker(hostile_app.pgq, app_dsn, concurrency=1, lease=1.5) as running:
        worker = running.worker
        wait_for(lambda: ledger(app_dsn, "start"), message="the handler started")
        # Someone else took the job over (what the reaper and a new claim do): the token moved.
        conn.execute("UPDATE pgqueue.jobs SET lease_token = lease_token + 1 WHERE id = %s", (job,))
        wait_for(lambda: worker.stats.lost == 1, message="the loss noticed")
        # Four more heartbeats (each refreshes the worker's row) while the handler runs on.
        beats: set[object] = set()

        def beat() -> bool:
            beats.add(
                scalar(app_dsn, "SELECT last_seen FROM pgqueue.workers WHERE id = %s", (worker.id,))
            )
            return len(beats) >= 5

        wait_for(beat, timeout=30, message="more heartbeats")
        assert worker.stats.lost == 1
        assert (
            scalar(app_dsn, "SELECT leases_lost FROM pgqueue.workers WHERE id = %s", (worker.id,))
            == 1
        )
        conn.execute("INSERT INTO ledger (job_id, event) VALUES (%s, 'release')", (job,))
        wait_for(lambda: ledger(app_dsn, "end"), message="the handler returned")
    assert worker.stats.lost == 1 and worker.stats.stale == 1
