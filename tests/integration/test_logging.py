"""Structured logs: one line per state change, each naming the job and the worker."""

from __future__ import annotations

import json
import signal

from tests.helpers import spawn_worker, wait_for
from tests.integration import worker_app

OPS_APP = "tests.integration.ops_app:pgq"


def test_json_logs_name_job_task_attempt_and_worker_in_every_record(app_dsn, conn, tmp_path):
    log = tmp_path / "worker.log"
    pgq = worker_app.pgq
    ok = pgq.enqueue("logs_a_line", {"order": 7}, conn=conn)
    broken = pgq.enqueue("always_fails", conn=conn)
    worker = spawn_worker(app_dsn, "--log-format", "json", log=log, app=OPS_APP)
    try:
        wait_for(
            lambda: "job dead-lettered" in log.read_text(), timeout=60, message="the dead letter"
        )
    finally:
        worker.send_signal(signal.SIGTERM)
        assert worker.wait(30) == 0
    records = [json.loads(line) for line in log.read_text().splitlines()]
    worker_ids = {r["worker_id"] for r in records if r["logger"].startswith("pgqueue.worker")}
    assert len(worker_ids) == 1  # every worker record names the worker
    assert all("worker_id" in r for r in records if r["logger"].startswith("pgqueue.worker"))

    def state_changes(job_id):
        return [
            (r["msg"], r["attempt"], r["task"])
            for r in records
            if r.get("job_id") == str(job_id) and r["logger"].startswith("pgqueue.worker")
        ]

    assert state_changes(ok) == [
        ("job started", "1", "logs_a_line"),
        ("job succeeded", "1", "logs_a_line"),
    ]
    assert state_changes(broken) == [
        ("job started", "1", "always_fails"),
        ("job rescheduled", "1", "always_fails"),
        ("job started", "2", "always_fails"),
        ("job rescheduled", "2", "always_fails"),
        ("job started", "3", "always_fails"),
        ("job dead-lettered", "3", "always_fails"),
    ]
    assert all(r["level"] == "info" for r in records if r.get("job_id") == str(ok))
    # The application's own line, logged inside the handler, is tied to its job and worker.
    [line] = [r for r in records if r["logger"] == "myapp.billing"]
    assert line["msg"] == "charging card" and line["order"] == "7"
    assert (line["job_id"], line["task"], line["attempt"]) == (ok, "logs_a_line", 1)
    assert line["worker_id"] in worker_ids


def test_text_logs_carry_the_same_fields(app_dsn, conn, tmp_path):
    log = tmp_path / "worker.log"
    job = worker_app.pgq.enqueue("logs_a_line", {"order": 8}, conn=conn)
    worker = spawn_worker(app_dsn, log=log, app=OPS_APP)
    try:
        wait_for(lambda: "job succeeded" in log.read_text(), timeout=60, message="the job")
    finally:
        worker.send_signal(signal.SIGTERM)
        assert worker.wait(30) == 0
    [line] = [x for x in log.read_text().splitlines() if "charging card" in x]
    assert f"order=8 job_id={job} task=logs_a_line attempt=1 worker_id=" in line
    [done] = [x for x in log.read_text().splitlines() if "job succeeded" in x]
    assert f"job_id={job} task=logs_a_line" in done and "worker_id=" in done
