"""OpenTelemetry across real `pgq work` processes: the SDK's exporter runs inside the worker (and
its children), writing every finished span to a file this test reads (tests/integration/
traced_app.py).

The test process sets no tracer provider: it enqueues under a remote span context of its own
making (what a request handler continuing an incoming ``traceparent`` has), which the API's
no-op tracer propagates, so the jobs carry a trace id and parent span id known here.
"""

from __future__ import annotations

import json
import os
import subprocess
from pathlib import Path
from typing import Any

import pytest
from opentelemetry import trace
from opentelemetry.trace import NonRecordingSpan, SpanContext, TraceFlags

from tests.helpers import PGQ, ROOT
from tests.integration import traced_app

TRACE_ID = 0x0AF7651916CD43DD8448EB211C80319C
PARENT_ID = 0x00F067AA0BA902B7
APP = "tests.integration.traced_app:pgq"


def read_lines(path: Path) -> list[dict[str, Any]]:
    if not path.exists():
        return []
    return [json.loads(line) for line in path.read_text().splitlines()]


def run_worker(dsn: str, tmp_path: Path, *args: str) -> tuple[list[dict[str, Any]], ...]:
    spans, seen = tmp_path / "spans.jsonl", tmp_path / "seen.jsonl"
    env = {
        **os.environ,
        "PGQUEUE_DSN": dsn,
        "PGQUEUE_TEST_SPANS": str(spans),
        "PGQUEUE_TEST_SEEN": str(seen),
    }
    done = subprocess.run(
        [PGQ, "work", APP, "--burst", "--poll-interval", "0.2", *args],
        cwd=ROOT,
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    assert done.returncode == 0, done.stdout + done.stderr
    return read_lines(spans), read_lines(seen)


@pytest.mark.parametrize("pool", ["thread", "process"])
def test_attempts_continue_the_enqueuers_trace_in_worker_processes(app_dsn, pgq, tmp_path, pool):
    remote = SpanContext(
        TRACE_ID, PARENT_ID, is_remote=True, trace_flags=TraceFlags(TraceFlags.SAMPLED)
    )
    with trace.use_span(NonRecordingSpan(remote)):
        sync_job = pgq.enqueue(
            traced_app.sync_seen, {"follow": True}, meta={"tenant": "acme"}, tags=["a"]
        )
        async_job = pgq.enqueue(traced_app.async_seen, {"follow": True})
        flaky = pgq.enqueue(traced_app.fails_once)
        dead = pgq.enqueue(traced_app.dies)
        fan = pgq.enqueue(traced_app.fan_out)
    untraced = pgq.enqueue(traced_app.child, {"n": 99})  # outside any span: a trace of its own
    spans, seen = run_worker(app_dsn, tmp_path, "--pool", pool)

    by_id = {span["span_id"]: span for span in spans}
    consumers: dict[int, list[dict[str, Any]]] = {}
    for span in spans:
        if span["kind"] == "CONSUMER":
            consumers.setdefault(int(span["attributes"]["messaging.message.id"]), []).append(span)
    for job in (sync_job, async_job, flaky, dead, fan):
        for span in consumers[job]:
            assert span["trace_id"] == f"{TRACE_ID:032x}"
            assert span["parent_id"] == f"{PARENT_ID:016x}"
    [sync_span] = consumers[sync_job]
    assert sync_span["name"] == "process traced.sync_seen"
    assert sync_span["attributes"] == {
        "messaging.system": "pgqueue",
        "messaging.operation.type": "process",
        "messaging.operation.name": "process",
        "messaging.destination.name": "default",
        "messaging.message.id": str(sync_job),
        "pgqueue.task": "traced.sync_seen",
        "pgqueue.attempt": 1,
        "pgqueue.max_attempts": 5,
        "pgqueue.outcome": "succeeded",
    }
    # Sync handlers of --pool process run (and are traced) in a child process.
    assert (sync_span["pid"] != by_id[consumers[async_job][0]["span_id"]]["pid"]) == (
        pool == "process"
    )

    # Inside the handler the attempt's span is current: what it starts nests under it, and
    # the job it enqueues continues the trace through a producer span.
    for job in (sync_job, async_job):
        [span] = consumers[job]
        [inner] = [s for s in spans if s["name"] == "inner" and s["parent_id"] == span["span_id"]]
        assert inner["trace_id"] == span["trace_id"]
        [send] = [s for s in spans if s["kind"] == "PRODUCER" and s["parent_id"] == span["span_id"]]
        assert send["name"] == "send traced.child"
        assert send["attributes"]["messaging.destination.name"] == "default"
        follow_id = int(send["attributes"]["messaging.message.id"])
        [follow] = consumers[follow_id]
        assert follow["parent_id"] == send["span_id"]
        assert follow["trace_id"] == f"{TRACE_ID:032x}"
    by_job = {row["job"]: row for row in seen}
    assert by_job[sync_job]["span_id"] == sync_span["span_id"]
    assert by_job[async_job]["span_id"] == consumers[async_job][0]["span_id"]
    # The job's metadata: the task's, the call's, and the enqueuer's trace context.
    assert by_job[sync_job]["meta"] == {
        "team": "billing",
        "tenant": "acme",
        "traceparent": f"00-{TRACE_ID:032x}-{PARENT_ID:016x}-01",
    }
    assert by_job[sync_job]["tags"] == ["from-task", "a"]

    # A retry links to the attempt before it; the failure is recorded on its span.
    first, second = sorted(consumers[flaky], key=lambda s: s["attributes"]["pgqueue.attempt"])
    assert first["status"] == "ERROR" and first["events"] == ["exception"]
    assert first["attributes"]["pgqueue.outcome"] == "retried"
    assert second["status"] == "UNSET" and second["attributes"]["pgqueue.outcome"] == "succeeded"
    assert second["links"] == [first["span_id"]]
    [dead_span] = consumers[dead]
    assert dead_span["status"] == "ERROR" and dead_span["attributes"]["pgqueue.outcome"] == "dead"

    # Workflow members continue the trace of the code that enqueued the workflow.
    [fan_span] = consumers[fan]
    [send] = [s for s in spans if s["kind"] == "PRODUCER" and s["parent_id"] == fan_span["span_id"]]
    assert send["attributes"]["messaging.batch.message_count"] == 2
    members = [row for row in seen if row["note"] in ("child 1", "child 2")]
    assert len(members) == 2
    for member in members:
        [span] = consumers[member["job"]]
        assert span["parent_id"] == send["span_id"]
        assert member["tags"] == ["workflow"]

    [alone] = consumers[untraced]
    assert alone["parent_id"] is None and alone["trace_id"] != f"{TRACE_ID:032x}"


def test_each_durable_step_runs_in_a_span_of_its_own(app_dsn, pgq, tmp_path):
    job = pgq.enqueue(traced_app.stepped)
    spans, _ = run_worker(app_dsn, tmp_path)
    attempts = {
        span["attributes"]["pgqueue.attempt"]: span
        for span in spans
        if span["kind"] == "CONSUMER" and span["attributes"]["messaging.message.id"] == str(job)
    }
    assert sorted(attempts) == [1, 2]
    for attempt, replayed in ((1, False), (2, True)):
        steps = [s for s in spans if s["parent_id"] == attempts[attempt]["span_id"]]
        assert [(s["name"], s["attributes"]) for s in steps] == [
            (
                f"step {name}",
                {
                    "pgqueue.job.id": job,
                    "pgqueue.step.name": name,
                    "pgqueue.step.seq": seq,
                    "pgqueue.step.replayed": replayed,
                },
            )
            for seq, name in ((1, "double"), (2, "again"))
        ]
