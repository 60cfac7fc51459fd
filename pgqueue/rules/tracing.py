"""OpenTelemetry tracing: the optional extra ``pgqueue[otel]`` (``opentelemetry-api``).

Nothing here imports OpenTelemetry unless the application already did: a process that never
imported ``opentelemetry.trace`` can have no span to continue and no tracer provider, so
pgqueue looks the module up in ``sys.modules`` and otherwise does nothing (and costs nothing).

Enqueue (:func:`sending`): a call made while a span is current (a valid span context: recording
or not) is wrapped in a ``PRODUCER`` span, ``send <task>``, and each job's metadata records
that span's W3C trace context (``traceparent``, and ``tracestate`` when there is one). A bulk
call or a workflow is one span (``messaging.batch.message_count``); every member of a workflow
carries it, the ``on_failure`` step too. Outside any span nothing is recorded.

The worker (:func:`consumer`): when the application set a tracer provider (an SDK's; the API's
default proxy or no-op provider means tracing is off) each attempt runs in a ``CONSUMER`` span,
``process <task>``, whose parent is the context the job's metadata carries (a root span when it
carries none). The span is the current context inside the handler in all three ways a handler
runs (``async def`` on the loop, sync ones in the handler threads, ``--pool process``
children), so spans the handler starts nest under it and jobs it enqueues continue its trace.
Attributes follow the messaging semantic conventions where they fit (``messaging.system``
``pgqueue``, ``messaging.operation.type``/``name`` ``process``, ``messaging.destination.name``
the queue, ``messaging.message.id`` the job id) plus ``pgqueue.task``, ``pgqueue.attempt``,
``pgqueue.max_attempts`` and ``pgqueue.outcome`` (succeeded, retried, dead, cancelled, stopped).
An exception is recorded on the span and sets its status to error.

Retries are linked: a failed attempt's error record (the job's ``errors``) keeps the attempt's
span context (``trace``), the claim returns the latest one (``last_trace``), and the next
attempt's span links to it. An attempt that ended with :class:`~pgqueue.Retry` records no error,
so the next one links to the latest failed attempt before it, if any.
"""

from __future__ import annotations

import json
import sys
from collections.abc import Awaitable, Callable, Sequence
from types import ModuleType
from typing import TYPE_CHECKING, Any, TypeVar

from pgqueue._version import __version__

if TYPE_CHECKING:
    from opentelemetry.trace import Span

    from pgqueue.handler.job_context import ClaimedJob
    from pgqueue.rules.job_specs import JobSpec
    from pgqueue.worker.outcome import Outcome

T = TypeVar("T")

SYSTEM = "pgqueue"
#: The metadata keys the trace context is recorded under (W3C Trace Context).
TRACEPARENT = "traceparent"
TRACESTATE = "tracestate"
#: What each outcome kind of an attempt is called on its span (``pgqueue.outcome``).
_OUTCOMES = {
    "ack": "succeeded",
    "retry": "retried",
    "fail": "dead",
    "no_retry": "dead",
    "cancelled": "cancelled",
}


def _trace() -> ModuleType | None:
    """``opentelemetry.trace`` if this process imported it, else None (never imported here)."""
    return sys.modules.get("opentelemetry.trace")


def _propagator() -> Any:
    from opentelemetry.trace.propagation.tracecontext import TraceContextTextMapPropagator

    return TraceContextTextMapPropagator()


# -- enqueue -----------------------------------------------------------------------------------


class Sending:
    """The producer span of one enqueue call, current while its jobs are written
    (``with sending: ...``); :meth:`stamp` records its trace context in a job's metadata."""

    def __init__(self, trace: ModuleType, task: str | None, queue: str | None, count: int) -> None:
        attributes: dict[str, Any] = {
            "messaging.system": SYSTEM,
            "messaging.operation.type": "send",
            "messaging.operation.name": "send",
        }
        if queue is not None:
            attributes["messaging.destination.name"] = queue
        if task is not None:
            attributes["pgqueue.task"] = task
        if count != 1:
            attributes["messaging.batch.message_count"] = count
        tracer = trace.get_tracer("pgqueue", __version__)
        self._trace = trace
        self._span = tracer.start_as_current_span(
            f"send {task}" if task is not None else "send",
            kind=trace.SpanKind.PRODUCER,
            attributes=attributes,
        )
        self._meta: dict[str, str] = {}
        self._stamped: dict[str | None, str] = {}

    def __enter__(self) -> Sending:
        self.span: Span = self._span.__enter__()
        _propagator().inject(self._meta)
        return self

    def __exit__(self, *exc: Any) -> None:
        self._span.__exit__(*exc)

    def stamp(self, spec: JobSpec) -> JobSpec:
        """``spec`` with this span's trace context in its metadata (over a ``traceparent`` the
        metadata may already hold: the span enqueueing the job is its parent)."""
        if not self._meta:
            return spec
        meta_json = self._stamped.get(spec.meta_json)
        if meta_json is None:
            own = json.loads(spec.meta_json) if spec.meta_json is not None else {}
            meta_json = json.dumps({**own, **self._meta}, ensure_ascii=False)
            self._stamped[spec.meta_json] = meta_json
        return spec.with_meta_json(meta_json)

    def stamp_all(self, specs: Sequence[JobSpec]) -> list[JobSpec]:
        """Every spec stamped (jobs sharing metadata share the stamped text)."""
        return [self.stamp(spec) for spec in specs]

    def sent(self, job_id: T) -> T:
        """Record the id of the one job this call wrote; returns it."""
        self.span.set_attribute("messaging.message.id", str(job_id))
        return job_id


def sending(specs: Sequence[JobSpec]) -> Sending | None:
    """A producer span for enqueueing ``specs``, or None when no span is current (nothing to
    continue) or OpenTelemetry was never imported."""
    trace = _trace()
    if trace is None or not trace.get_current_span().get_span_context().is_valid:
        return None
    tasks = {spec.task for spec in specs}
    queues = {spec.queue for spec in specs}
    return Sending(
        trace,
        next(iter(tasks)) if len(tasks) == 1 else None,
        next(iter(queues)) if len(queues) == 1 else None,
        len(specs),
    )


# -- the worker --------------------------------------------------------------------------------


class Consumer:
    """The worker's side: one ``CONSUMER`` span per attempt (see the module docstring)."""

    def __init__(self, trace: ModuleType) -> None:
        from opentelemetry import context
        from opentelemetry.trace import Status, StatusCode

        self._trace = trace
        self._context = context
        self._tracer = trace.get_tracer("pgqueue", __version__)
        self._propagator = _propagator()
        self._error = StatusCode.ERROR
        self._status = Status

    def _extract(self, carrier: dict[str, Any]) -> Any:
        return self._propagator.extract(
            {
                k: v
                for k, v in carrier.items()
                if k in (TRACEPARENT, TRACESTATE) and isinstance(v, str)
            },
            context=self._context.Context(),
        )

    def start(self, job: ClaimedJob) -> Span:
        """The span of this attempt (not current yet: :meth:`wrap` makes it current around the
        handler), a child of the trace the job's metadata carries."""
        meta = job.meta if isinstance(job.meta, dict) else {}
        parent = self._extract(meta) if TRACEPARENT in meta else self._context.Context()
        links = []
        if job.last_trace:
            previous = self._trace.get_current_span(
                self._extract({TRACEPARENT: job.last_trace})
            ).get_span_context()
            if previous.is_valid:
                links.append(self._trace.Link(previous, {"pgqueue.link": "previous_attempt"}))
        span: Span = self._tracer.start_span(
            f"process {job.task}",
            context=parent,
            kind=self._trace.SpanKind.CONSUMER,
            links=links,
            attributes={
                "messaging.system": SYSTEM,
                "messaging.operation.type": "process",
                "messaging.operation.name": "process",
                "messaging.destination.name": job.queue,
                "messaging.message.id": str(job.id),
                "pgqueue.task": job.task,
                "pgqueue.attempt": job.attempt,
                "pgqueue.max_attempts": job.max_attempts,
            },
        )
        return span

    def wrap(self, func: Callable[..., Any], span: Span, is_async: bool) -> Callable[..., Any]:
        """``func`` run with ``span`` as the current span (in the task, thread or process that
        runs it)."""
        context, in_context = self._context, self._trace.set_span_in_context

        if is_async:

            async def traced_async(*args: Any, **kwargs: Any) -> Any:
                token = context.attach(in_context(span))
                try:
                    awaitable: Awaitable[Any] = func(*args, **kwargs)
                    return await awaitable
                finally:
                    context.detach(token)

            return traced_async

        def traced(*args: Any, **kwargs: Any) -> Any:
            token = context.attach(in_context(span))
            try:
                return func(*args, **kwargs)
            finally:
                context.detach(token)

        return traced

    def failed(self, span: Span, exc: BaseException) -> None:
        """The handler raised ``exc``: recorded on the span, whose status becomes error."""
        span.record_exception(exc)
        span.set_status(self._status(self._error, f"{type(exc).__name__}: {exc}"[:500]))

    def finish(self, span: Span, outcome: Outcome | None) -> None:
        """End the attempt's span with its outcome (None: stopped, nothing written: a lost
        lease or a shutdown); a failed attempt's error record keeps the span's context, which
        the next attempt links to."""
        if outcome is None:
            name = "stopped"
        elif outcome.kind == "error":
            name = "dead" if outcome.job.attempt >= outcome.job.max_attempts else "retried"
        else:
            name = _OUTCOMES.get(outcome.kind, outcome.kind)
        span.set_attribute("pgqueue.outcome", name)
        if outcome is not None and outcome.error is not None:
            if name == "dead" and outcome.summary:
                # A final failure the handler did not raise (an unstorable result, bad args).
                span.set_status(self._status(self._error, outcome.summary[:500]))
            record = json.loads(outcome.error)
            context = span.get_span_context()
            if context.is_valid:
                carrier: dict[str, str] = {}
                self._propagator.inject(carrier, context=self._trace.set_span_in_context(span))
                record["trace"] = carrier.get(TRACEPARENT)
                outcome.error = json.dumps(record, ensure_ascii=False)
        span.end()


def consumer() -> Consumer | None:
    """The worker's tracer when this process traces: it imported OpenTelemetry and set a tracer
    provider (the API's default proxy or no-op provider: tracing is off, and costs nothing)."""
    trace = _trace()
    if trace is None:
        return None
    provider = trace.get_tracer_provider()
    if isinstance(provider, trace.ProxyTracerProvider | trace.NoOpTracerProvider):
        return None
    return Consumer(trace)
