"""Structured logs: one line per state change, each naming the job and the worker; logging that
lives inside the application's own configuration; and log output that can never stall the
worker's event loop."""

from __future__ import annotations

import functools
import json
import logging
import os
import re
import signal
import socket
import subprocess
import threading
import urllib.request
from pathlib import Path
from typing import Any

import pytest
from prometheus_client.parser import text_string_to_metric_families

from pgqueue.handler import log_queue, logs
from tests.helpers import (
    PGQ,
    ROOT,
    ThreadWorker,
    ledger,
    scalar,
    spawn_worker,
    thread_worker,
    wait_for,
)
from tests.integration import log_tasks, worker_app

OPS_APP = "tests.integration.ops_app:pgq"
LOG_APP = "tests.integration.log_tasks:pgq"
DICTCONFIG_APP = "tests.integration.log_dictconfig_app:pgq"
# The format an application (or a --log-config file) uses: every pgqueue field by name.
FIELDS_FORMAT = (
    "CFG %(levelname)s %(name)s job=%(job_id)s task=%(task)s queue=%(queue)s "
    "attempt=%(attempt)s worker=%(worker_id)s | %(message)s"
)


def stop(worker: subprocess.Popen[bytes]) -> None:
    worker.send_signal(signal.SIGTERM)
    try:
        assert worker.wait(30) == 0
    finally:
        worker.kill()


def json_records(log: Path) -> list[dict[str, Any]]:
    return [json.loads(line) for line in log.read_text().splitlines()]


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
        stop(worker)
    records = json_records(log)
    worker_ids = {r["worker_id"] for r in records if r["logger"].startswith("pgqueue.worker")}
    assert len(worker_ids) == 1  # every worker record names the worker
    assert all("worker_id" in r for r in records if r["logger"].startswith("pgqueue.worker"))

    def state_changes(job_id):
        return [
            (r["msg"], r["attempt"], r["task"], r["queue"])
            for r in records
            if r.get("job_id") == job_id and r["logger"].startswith("pgqueue.worker")
        ]

    # Values keep their types: ids and attempts are numbers, as the worker logged them.
    assert state_changes(ok) == [
        ("job started", 1, "logs_a_line", "default"),
        ("job succeeded", 1, "logs_a_line", "default"),
    ]
    assert state_changes(broken) == [
        ("job started", 1, "always_fails", "default"),
        ("job rescheduled", 1, "always_fails", "default"),
        ("job started", 2, "always_fails", "default"),
        ("job rescheduled", 2, "always_fails", "default"),
        ("job started", 3, "always_fails", "default"),
        ("job dead-lettered", 3, "always_fails", "default"),
    ]
    assert all(r["level"] == "info" for r in records if r.get("job_id") == ok)
    # The application's own line, logged inside the handler, is tied to its job and worker.
    [line] = [r for r in records if r["logger"] == "myapp.billing"]
    assert line["msg"] == "charging card" and line["order"] == 7
    assert (line["job_id"], line["task"], line["attempt"], line["queue"]) == (
        ok,
        "logs_a_line",
        1,
        "default",
    )
    assert line["worker_id"] in worker_ids
    assert records[-1]["msg"] == "worker stopped"  # the last line made it out at exit


def test_json_lines_keep_argument_types_and_extra_values(app_dsn, conn, tmp_path):
    log = tmp_path / "worker.log"
    job = worker_app.pgq.enqueue("logs_with_extra", {"order": 42}, conn=conn)
    worker = spawn_worker(app_dsn, "--log-format", "json", log=log, app=LOG_APP)
    try:
        wait_for(lambda: "job succeeded" in log.read_text(), timeout=60, message="the job")
    finally:
        stop(worker)
    [line] = [r for r in json_records(log) if r["logger"] == "myapp.orders"]
    assert line["msg"] == "order shipped"
    assert line["order"] == 42  # an int argument stays an int
    # extra= values are fields, with their types
    assert (line["customer"], line["amount_cents"], line["gift"], line["weight"]) == (
        "c-1",
        1250,
        True,
        0.5,
    )
    assert (line["job_id"], line["task"], line["attempt"]) == (job, "logs_with_extra", 1)
    [done] = [r for r in json_records(log) if r["msg"] == "job succeeded"]
    assert done["job_id"] == job and done["attempt"] == 1 and done["queue"] == "default"


def test_text_logs_carry_the_same_fields(app_dsn, conn, tmp_path):
    log = tmp_path / "worker.log"
    job = worker_app.pgq.enqueue("logs_a_line", {"order": 8}, conn=conn)
    other = worker_app.pgq.enqueue("logs_with_extra", {"order": 9}, conn=conn)
    worker = spawn_worker(app_dsn, log=log, app=LOG_APP)
    try:
        wait_for(lambda: log.read_text().count("job succeeded") == 2, timeout=60, message="jobs")
    finally:
        stop(worker)
    lines = log.read_text().splitlines()
    [line] = [x for x in lines if "charging card" in x]
    assert f"order=8 job_id={job} task=logs_a_line queue=default attempt=1 worker_id=" in line
    [done] = [x for x in lines if "job succeeded" in x and f"job_id={job}" in x]
    assert "task=logs_a_line" in done and "worker_id=" in done
    [extra] = [x for x in lines if "order shipped" in x]
    assert (
        f"order shipped order=9 customer=c-1 amount_cents=1250 gift=True weight=0.5 "
        f"job_id={other} task=logs_with_extra queue=default attempt=1 worker_id="
    ) in extra
    assert "worker stopped" in lines[-1]


def test_an_app_that_configures_logging_at_import_keeps_pgqueue_lines(app_dsn, conn, tmp_path):
    """dictConfig at import (disable_existing_loggers=True by default) must not silence
    pgqueue, pgq work must not add a handler of its own, and the app's format can name the
    job fields, inside a job and outside one."""
    log = tmp_path / "worker.log"
    job = worker_app.pgq.enqueue("logs_with_extra", {"order": 5}, conn=conn)
    worker = spawn_worker(app_dsn, log=log, app=DICTCONFIG_APP)
    try:
        wait_for(lambda: "job succeeded" in log.read_text(), timeout=60, message="the job")
    finally:
        stop(worker)
    text = log.read_text()
    assert "Logging error" not in text and "KeyError" not in text
    lines = text.splitlines()
    assert lines and all(line.startswith("APP ") for line in lines), text  # only the app's handler
    [started] = [x for x in lines if "worker started" in x]
    worker_id = re.search(r"worker=(\S+)", started).group(1)
    assert worker_id  # bound to the worker, though not inside a job
    assert "job= task= queue= attempt= " in started  # outside a job: empty, never an error
    [app_line] = [x for x in lines if "order shipped" in x]
    assert app_line.startswith(
        f"APP INFO myapp.orders job={job} task=logs_with_extra queue=default attempt=1 "
        f"worker={worker_id} | order shipped order=5"
    )
    # pgqueue's own lines about a job name it in the fields too (from the message)
    [done] = [x for x in lines if "job succeeded" in x]
    assert f"job={job} task=logs_with_extra queue=default attempt=1 worker={worker_id}" in done
    assert "worker stopped" in lines[-1]


LOG_CONFIGS = {
    "json": lambda out: json.dumps(
        {
            "version": 1,
            "formatters": {"f": {"format": FIELDS_FORMAT}},
            "handlers": {
                "file": {"class": "logging.FileHandler", "formatter": "f", "filename": str(out)}
            },
            "root": {"level": "INFO", "handlers": ["file"]},
        }
    ),
    "yaml": lambda out: (
        f"""
version: 1
formatters:
  f:
    format: "{FIELDS_FORMAT}"
handlers:
  file:
    class: logging.FileHandler
    formatter: f
    filename: {out}
root:
  level: INFO
  handlers: [file]
"""
    ),
    "ini": lambda out: (
        f"""
[loggers]
keys=root

[handlers]
keys=file

[formatters]
keys=f

[logger_root]
level=INFO
handlers=file

[handler_file]
class=FileHandler
formatter=f
args=({str(out)!r},)

[formatter_f]
format={FIELDS_FORMAT}
"""
    ),
}


@pytest.mark.parametrize("kind", sorted(LOG_CONFIGS))
def test_log_config_file_configures_the_worker_logging(app_dsn, conn, tmp_path, kind):
    out = tmp_path / "app.log"
    config = tmp_path / f"logging.{kind}"
    config.write_text(LOG_CONFIGS[kind](out))
    stderr = tmp_path / "stderr.log"
    job = worker_app.pgq.enqueue("logs_with_extra", {"order": 3}, conn=conn)
    worker = spawn_worker(app_dsn, "--log-config", str(config), log=stderr, app=LOG_APP)
    try:
        wait_for(
            lambda: out.exists() and "job succeeded" in out.read_text(),
            timeout=60,
            message="the job in the configured file",
        )
    finally:
        stop(worker)
    text = out.read_text()
    assert "Logging error" not in stderr.read_text() + text
    assert "worker started" not in stderr.read_text()  # pgq work added no handler of its own
    lines = text.splitlines()
    assert all(line.startswith("CFG ") for line in lines), text
    # the file disables existing loggers (the default); pgqueue's survive it
    [started] = [x for x in lines if "| worker started" in x]
    assert started.startswith("CFG INFO pgqueue.worker job= task= queue= attempt= worker=")
    [app_line] = [x for x in lines if "order shipped" in x]
    assert f"job={job} task=logs_with_extra queue=default attempt=1 worker=" in app_line
    assert "worker stopped" in lines[-1]


def run_pgq(dsn: str, *args: str) -> subprocess.CompletedProcess[str]:
    env = {**os.environ, "PGQUEUE_DSN": dsn}
    return subprocess.run(
        [PGQ, "work", LOG_APP, "--burst", *args],
        cwd=ROOT,
        env=env,
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )


def one_line(text: str) -> str:
    """typer's error box, with the box drawn away and the wrapping undone."""
    return " ".join(re.sub(r"[│╭╮╰╯─]", " ", text).split())


@pytest.mark.parametrize(
    ("args", "expected"),
    [
        (["--log-format", "yaml"], ["--log-format", "'yaml'", "text", "json"]),
        (["--log-level", "loud"], ["--log-level", "DEBUG", "INFO", "WARNING", "ERROR"]),
        (["--log-config", "{tmp}/logging.txt"], ["--log-config", ".json", ".yaml", ".ini"]),
        (["--log-config", "{tmp}/missing.json"], ["--log-config", "does not exist"]),
        (["--log-config", "{tmp}/broken.json"], ["--log-config", "broken.json", "JSON"]),
        (["--log-config", "{tmp}/bad.yaml"], ["--log-config", "bad.yaml", "nosuch"]),
        (
            ["--log-config", "{tmp}/ok.json", "--log-format", "json"],
            ["--log-format", "--log-config"],
        ),
    ],
)
def test_bad_logging_options_are_one_line_usage_errors(app_dsn, tmp_path, args, expected):
    (tmp_path / "logging.txt").write_text("version: 1\n")
    (tmp_path / "broken.json").write_text('{"version": 1,')
    (tmp_path / "bad.yaml").write_text("version: 1\nhandlers:\n  h:\n    class: nosuch.Handler\n")
    (tmp_path / "ok.json").write_text('{"version": 1}')
    result = run_pgq(app_dsn, *[a.replace("{tmp}", str(tmp_path)) for a in args])
    assert result.returncode == 2, result.stdout + result.stderr
    assert "Traceback" not in result.stderr
    message = one_line(result.stderr)
    for word in expected:
        assert word in message, message


def scraped(port: int, name: str) -> float:
    """One unlabelled sample from a worker's /metrics."""
    with urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=10) as response:
        text = response.read().decode()
    samples = [
        s.value
        for family in text_string_to_metric_families(text)
        for s in family.samples
        if s.name == name
    ]
    assert len(samples) == 1, f"{name} in /metrics"
    return float(samples[0])


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def up_or_exited(dsn: str, worker: subprocess.Popen[bytes]) -> bool:
    if worker.poll() is not None:
        return True
    return bool(scalar(dsn, "SELECT count(*) FROM pgqueue.workers WHERE pid = %s", (worker.pid,)))


def spawn_unread(dsn: str) -> tuple[subprocess.Popen[bytes], int]:
    """A registered `pgq work` whose stdout and stderr are a pipe nobody reads, with its metrics
    port (picked free, tried again should another process take it first)."""
    env = {**os.environ, "PGQUEUE_DSN": dsn}
    for _ in range(3):
        port = free_port()
        command = [
            PGQ, "work", LOG_APP, "--lease", "3s", "--reaper-interval", "0.5s",
            "--metrics-port", str(port), "--metrics-host", "127.0.0.1",
        ]  # fmt: skip
        worker = subprocess.Popen(
            command, cwd=ROOT, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT
        )
        wait_for(functools.partial(up_or_exited, dsn, worker), timeout=60, message="the worker up")
        if worker.poll() is None:
            return worker, port
        assert worker.stdout is not None
        out = worker.stdout.read().decode()
        worker.stdout.close()
        assert "cannot serve metrics" in out, f"pgq work exited {worker.returncode}: {out[-3000:]}"
    raise AssertionError("no free port for the metrics server")


@pytest.mark.slow
def test_a_log_reader_that_never_reads_does_not_stall_the_worker(app_dsn, pgq):
    """`pgq work ... | sleep 40`: stdout and stderr are a pipe nobody reads. The pipe fills after
    a few hundred lines; the worker must go on claiming, acking and heartbeating (no lease
    expires, every job runs once) and count the log records it had to drop."""
    jobs = 2500  # 2 worker lines + 4 handler lines each: far more than the pipe and the queue
    pgq.enqueue_many([pgq.spec("chatty", {"n": n}, {}) for n in range(jobs)])
    worker, port = spawn_unread(app_dsn)
    output: list[bytes] = []

    def all_done() -> bool:
        assert worker.poll() is None, f"the worker exited with {worker.returncode}"
        return scalar(app_dsn, "SELECT count(*) FROM ledger WHERE event = 'end'") == jobs

    try:
        wait_for(
            all_done,
            timeout=150,
            interval=0.5,
            message=f"all {jobs} jobs done while nobody reads the log pipe",
        )
        ends = ledger(app_dsn, "end")
        assert len({row[0] for row in ends}) == jobs  # each job once
        assert {row[1] for row in ends} == {1}  # first attempt: no lease ever expired
        # The handlers' last lines are in; their acks follow (the completer writes them in
        # batches, a moment after the handler returned).
        wait_for(
            lambda: scalar(app_dsn, "SELECT count(*) FROM pgqueue.jobs") == 0,
            timeout=10,
            message="every job acked",
        )
        assert scalar(app_dsn, "SELECT count(*) FROM pgqueue.dead_letters") == 0
        # Heartbeats go on with the pipe still full.
        seen = scalar(
            app_dsn, "SELECT last_seen FROM pgqueue.workers WHERE pid = %s", (worker.pid,)
        )
        wait_for(
            lambda: scalar(
                app_dsn,
                "SELECT last_seen > %s FROM pgqueue.workers WHERE pid = %s",
                (seen, worker.pid),
            ),
            timeout=30,
            message="a later heartbeat",
        )
        dropped = scraped(port, "pgqueue_log_records_dropped_total")
        assert dropped > 0, "the log queue never filled: the pipe was not blocking"
        assert worker.poll() is None

        # Now someone reads: the writer catches up, says what it dropped, and at exit the last
        # lines come out too.
        def read() -> None:
            while chunk := worker.stdout.read1(65536):
                output.append(chunk)

        reader = threading.Thread(target=read)
        reader.start()
        wait_for(lambda: sum(map(len, output)) > 500_000, timeout=60, message="the queued lines")
        worker.send_signal(signal.SIGTERM)
        assert worker.wait(60) == 0
        reader.join(30)
    finally:
        worker.kill()
        worker.wait()
        worker.stdout.close()
    lines = b"".join(output).decode().splitlines()
    assert any("log records dropped: the log output did not keep up count=" in x for x in lines)
    # the last line, or the one before a last drop report
    assert any("worker stopped" in x for x in lines[-2:]), lines[-5:]


class BlockedHandler(logging.Handler):
    """A handler whose output blocks (like a full pipe) until ``gate`` is set."""

    def __init__(self) -> None:
        super().__init__()
        self.gate = threading.Event()
        self.lines: list[str] = []
        self.setFormatter(logs.TextFormatter())

    def emit(self, record: logging.LogRecord) -> None:
        self.gate.wait(120)
        self.lines.append(self.format(record))


def test_an_in_process_worker_behind_queue_logging_runs_while_its_handler_blocks(app_dsn, pgq):
    """The same guarantee for a worker embedded in an application's own process
    (pgqueue.handler.log_queue.queue_logging around it): the handler blocks from the first record
    on, every job still runs once, records beyond the queue are counted, and once the handler can
    write again the queued lines and the drop report come out."""
    jobs = 300
    pgq.enqueue_many([pgq.spec("chatty", {"n": n}, {}) for n in range(jobs)])
    root = logging.getLogger()
    handler = BlockedHandler()
    level = root.level
    root.addHandler(handler)
    root.setLevel(logging.INFO)
    dropped_before = log_queue.dropped_total()
    try:
        with log_queue.queue_logging(maxsize=100) as writer:
            worker = ThreadWorker(log_tasks.pgq, app_dsn, lease=1.5).start()
            try:
                wait_for(
                    lambda: len(ledger(app_dsn, "end")) == jobs, timeout=90, message="all jobs"
                )
                ends = ledger(app_dsn, "end")
                assert len({row[0] for row in ends}) == jobs and {row[1] for row in ends} == {1}
                # heartbeats go on while the handler stays blocked
                beat = "SELECT last_seen FROM pgqueue.workers WHERE id = %s"
                seen = scalar(app_dsn, beat, (worker.worker.id,))
                wait_for(
                    lambda: scalar(app_dsn, beat, (worker.worker.id,)) > seen,
                    timeout=30,
                    message="a later heartbeat",
                )
                assert handler.lines == []  # blocked all along
                assert writer.dropped > 0
                assert log_queue.dropped_total() - dropped_before == writer.dropped
                handler.gate.set()
            finally:
                handler.gate.set()
                worker.stop()
        # stopped: the handlers are back where they were, and what was queued got written
        assert handler in root.handlers
        assert not any(isinstance(h, log_queue.QueueingHandler) for h in root.handlers)
        assert any("log records dropped" in line for line in handler.lines)
        assert "worker stopped" in handler.lines[-1]
    finally:
        root.removeHandler(handler)
        root.setLevel(level)


class Records(logging.Handler):
    def __init__(self) -> None:
        super().__init__(logging.DEBUG)
        self.records: list[logging.LogRecord] = []

    def emit(self, record: logging.LogRecord) -> None:
        self.records.append(record)


def test_every_pgqueue_record_of_a_worker_run_names_its_action_and_carries_its_fields(
    app_dsn, conn
):
    """pgqueue's records carry their data as attributes (extra=), with a declared action."""
    from pgqueue.rules.log_actions import Action

    pgq = worker_app.pgq
    ok = pgq.enqueue("logs_a_line", {"order": 7}, conn=conn)
    broken = pgq.enqueue("always_fails", conn=conn)
    logger = logging.getLogger("pgqueue")
    handler, level = Records(), logger.level
    logger.addHandler(handler)
    logger.setLevel(logging.DEBUG)
    try:
        with thread_worker(pgq, app_dsn, concurrency=2) as running:
            wait_for(
                lambda: scalar(app_dsn, "SELECT count(*) FROM pgqueue.dead_letters") == 1,
                timeout=60,
                message="the dead letter",
            )
            running.stop()
    finally:
        logger.removeHandler(handler)
        logger.setLevel(level)
    declared = {a.code: a for a in Action}
    standard = set(vars(logging.makeLogRecord({}))) | {"message", "asctime", "taskName"}
    records = handler.records
    assert records
    for record in records:
        action = getattr(record, "action", None)
        assert action in declared, (record.name, record.getMessage())
        stated = set(vars(record)) - standard - set(logs.FIELDS) - {"action"}
        assert stated <= set(declared[action].fields), (action, stated)
    by_job = [
        (r.action, r.attempt)  # type: ignore[attr-defined]
        for r in records
        if getattr(r, "job_id", None) == broken and r.action.startswith("job.")  # type: ignore[attr-defined]
    ]
    assert by_job == [
        ("job.started", 1),
        ("job.rescheduled", 1),
        ("job.started", 2),
        ("job.rescheduled", 2),
        ("job.started", 3),
        ("job.dead_lettered", 3),
    ]
    [done] = [r for r in records if getattr(r, "action", "") == "job.succeeded"]
    assert (done.job_id, done.task, done.queue, done.attempt) == (ok, "logs_a_line", "default", 1)  # type: ignore[attr-defined]
    assert isinstance(done.duration, float)  # type: ignore[attr-defined]
    [dead] = [r for r in records if getattr(r, "action", "") == "job.dead_lettered"]
    assert dead.error == "ValueError: this job is broken" and dead.max_attempts == 3  # type: ignore[attr-defined]
    actions = {r.action for r in records}  # type: ignore[attr-defined]
    assert {"worker.started", "worker.serving", "worker.stopped"} <= actions
