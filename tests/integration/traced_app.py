"""Tasks for the metadata and tracing tests, importable by `pgq work` and by its children:

    pgq work tests.integration.traced_app:pgq [--pool process]

When ``PGQUEUE_TEST_SPANS`` names a file, importing this module sets an OpenTelemetry SDK
tracer provider whose exporter appends every finished span to that file (one JSON object a
line), in the worker and in each child process alike. Handlers append what they saw to the file
``PGQUEUE_TEST_SEEN`` names: the job, its metadata and tags, and the span current inside them.
"""

from __future__ import annotations

import json
import os
from collections.abc import Sequence
from typing import Any

from opentelemetry import trace
from opentelemetry.sdk.trace import ReadableSpan, TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor, SpanExporter, SpanExportResult

from pgqueue import ConstantBackoff, PgQueue, chain, current_job

pgq = PgQueue()


class FileExporter(SpanExporter):
    """Appends finished spans to a file, a line each (processes share it: O_APPEND)."""

    def __init__(self, path: str) -> None:
        self.path = path

    def export(self, spans: Sequence[ReadableSpan]) -> SpanExportResult:
        lines = "".join(json.dumps(_as_dict(span)) + "\n" for span in spans)
        with open(self.path, "a", encoding="utf-8") as out:
            out.write(lines)
        return SpanExportResult.SUCCESS


def _hex(value: int, width: int) -> str:
    return format(value, f"0{width}x")


def _as_dict(span: ReadableSpan) -> dict[str, Any]:
    context = span.get_span_context()
    assert context is not None
    return {
        "name": span.name,
        "kind": span.kind.name,
        "trace_id": _hex(context.trace_id, 32),
        "span_id": _hex(context.span_id, 16),
        "parent_id": _hex(span.parent.span_id, 16) if span.parent is not None else None,
        "attributes": dict(span.attributes or {}),
        "status": span.status.status_code.name,
        "events": [event.name for event in span.events],
        "links": [_hex(link.context.span_id, 16) for link in span.links],
        "pid": os.getpid(),
    }


if os.environ.get("PGQUEUE_TEST_SPANS"):
    provider = TracerProvider()
    provider.add_span_processor(SimpleSpanProcessor(FileExporter(os.environ["PGQUEUE_TEST_SPANS"])))
    trace.set_tracer_provider(provider)

tracer = trace.get_tracer("tests.traced_app")


def seen(note: str = "") -> None:
    """What the handler sees: its job, metadata, tags, and the span current in it."""
    ctx = current_job()
    context = trace.get_current_span().get_span_context()
    path = os.environ.get("PGQUEUE_TEST_SEEN")
    if path is None:
        return
    record = {
        "job": ctx.id,
        "task": ctx.task,
        "attempt": ctx.attempt,
        "meta": ctx.meta,
        "tags": ctx.tags,
        "span_id": _hex(context.span_id, 16) if context.is_valid else None,
        "trace_id": _hex(context.trace_id, 32) if context.is_valid else None,
        "pid": os.getpid(),
        "note": note,
    }
    with open(path, "a", encoding="utf-8") as out:
        out.write(json.dumps(record) + "\n")


@pgq.task(name="traced.sync_seen", meta={"team": "billing"}, tags=["from-task"])
def sync_seen(follow: bool = False) -> None:
    seen("sync")
    with tracer.start_as_current_span("inner"):
        pass
    if follow:
        # Inside the attempt's span: the new job continues its trace.
        child.enqueue()


@pgq.task(name="traced.async_seen")
async def async_seen(follow: bool = False) -> None:
    seen("async")
    with tracer.start_as_current_span("inner"):
        pass
    if follow:
        await child.enqueue_async()


@pgq.task(name="traced.child")
def child(n: int = 0) -> None:
    seen(f"child {n}")


@pgq.task(name="traced.fails_once", backoff=ConstantBackoff(0))
def fails_once() -> None:
    seen("fails_once")
    if current_job().attempt == 1:
        raise ValueError("first attempt fails")


@pgq.task(name="traced.dies", max_attempts=1)
def dies() -> None:
    seen("dies")
    raise RuntimeError("always fails")


@pgq.task(name="traced.fan_out")
def fan_out() -> None:
    """Enqueues a workflow from inside its attempt: the members continue this trace."""
    seen("fan_out")
    chain(child.s(1), child.s(2), tags=["workflow"]).enqueue()


def _double(n: int) -> int:
    return n * 2


@pgq.task(name="traced.stepped", backoff=ConstantBackoff(0))
def stepped() -> None:
    """Two steps; the first attempt fails after them, so the retry replays both."""
    ctx = current_job()
    ctx.step("double", _double, 2)
    ctx.step("again", _double, 4)
    if ctx.attempt == 1:
        raise RuntimeError("fails once after its steps")
