"""Durable steps: ``ctx.step(name, fn, *args, **kwargs)`` runs ``fn`` once per job.

::

    def place_order(order_id: int) -> None:
        ctx = current_job()
        charge = ctx.step("charge", payments.charge, order_id)     # async: await ctx.step_async
        ctx.step("ship", warehouse.ship, order_id, charge.id)

A step's return value is checkpointed (typed JSON: :mod:`pgqueue.rules.codec`, decoded by
``fn``'s return annotation) in ``pgqueue.job_steps``, keyed by the job and the step's place in the
run (``seq``: 1, 2, ...). When the job runs again (a retry after a later step failed, a crash, a
lost lease) a step that completed returns its checkpoint without calling ``fn``. The first run
returns what a replay will (the value decoded from its JSON), so both see the same thing.

Costs: the first ``ctx.step`` of a run reads the job's checkpoints (``load_steps``, one query);
each step that runs writes one statement (``write_step``), fenced by the job's lease token: a
worker that lost the job cannot write a checkpoint (:class:`~pgqueue.LeaseLost`). A replayed step
costs nothing. Jobs that call no step pay nothing (the run's state is a class attribute of
:class:`~pgqueue.JobContext` until the first step).

Determinism: the names and the order of the steps must be the same on every run; a run that
reaches, at some place, a step whose name (or kind) differs from what that place recorded fails
with :class:`~pgqueue.NondeterministicStepError` naming both. A name is used once per run
(:class:`~pgqueue.DuplicateStepError`): a step in a loop takes ``repeat=True`` (its runs are
named ``name#1``, ``name#2``, ...) or a name of its own.

Transactional steps (``transaction=True``): ``fn(conn, *args, **kwargs)`` runs in a transaction
of the worker's (the host of :mod:`pgqueue.handler.job_transaction`: its connection and its
``own``), and the checkpoint is that transaction's last statement, so the step's writes and its
checkpoint commit together: exactly once. A COMMIT whose reply is lost needs no settling here:
the next run finds the checkpoint (committed) or runs the step again (not).

Failures: a step that raises fails the attempt, and the job's retry policy decides (completed
steps replay on the next attempt). ``retry=`` (a count or a :class:`StepRetry`) tries the step
again in place first. The failure is recorded on the step's row (state ``failed``, its error).
"""

from __future__ import annotations

import asyncio
import contextlib
import functools
import inspect
import json
import logging
import sys
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

import psycopg

from pgqueue._version import __version__
from pgqueue.db import durable
from pgqueue.db import plan as plans
from pgqueue.db.durable import Checkpoint
from pgqueue.errors import (
    DuplicateStepError,
    Fail,
    InvalidJobError,
    JobCancelled,
    LeaseLost,
    NondeterministicStepError,
    Retry,
    StepError,
)
from pgqueue.handler.job_transaction import TransactionHost, current_host
from pgqueue.rules.codec import TaskCodec
from pgqueue.rules.log_actions import Action, fields
from pgqueue.rules.payload import check_name, dumps
from pgqueue.rules.retry import RetryPolicy

if TYPE_CHECKING:
    from pgqueue.handler.job_context import JobContext

log = logging.getLogger("pgqueue.steps")

#: What each kind of step is called in ``job_steps.kind``.
STEP = "step"
SLEEP = "sleep"
WAIT = "wait"


@dataclass(frozen=True)
class StepRetry:
    """``ctx.step(..., retry=StepRetry(attempts=5))``: try a failing step again in place, up to
    ``attempts`` times in all within the job's attempt, waiting ``policy``'s backoff between
    tries (only errors ``policy`` retries). ``retry=5`` is ``StepRetry(attempts=5)``."""

    attempts: int = 3
    policy: RetryPolicy = field(default_factory=RetryPolicy)

    def __post_init__(self) -> None:
        if isinstance(self.attempts, bool) or not isinstance(self.attempts, int):
            raise InvalidJobError(f"a step's retry attempts must be an int, got {self.attempts!r}")
        if self.attempts < 1:
            raise InvalidJobError(
                f"a step's retry attempts must be at least 1, got {self.attempts}"
            )


def step_retry(value: int | StepRetry | None) -> StepRetry | None:
    """``retry=`` as given: a count, a :class:`StepRetry`, or None (the job's policy alone)."""
    if value is None or isinstance(value, StepRetry):
        return value
    if isinstance(value, int) and not isinstance(value, bool):
        return StepRetry(attempts=value)
    raise InvalidJobError(f"retry= takes a number of tries or a StepRetry, got {value!r}")


class StepRun:
    """One run's steps: what the job recorded (read at the run's first step), the next place,
    and the names used so far. Kept on the job's context (``JobContext.step_run``)."""

    __slots__ = ("job_id", "names", "next_seq", "recorded", "repeats")

    def __init__(self, job_id: int, recorded: list[Checkpoint]) -> None:
        self.job_id = job_id
        self.recorded = {checkpoint.seq: checkpoint for checkpoint in recorded}
        self.next_seq = 1
        self.names: set[str] = set()
        self.repeats: dict[str, int] = {}

    def place(
        self, name: str, kind: str, repeat: bool = False
    ) -> tuple[int, str, Checkpoint | None]:
        """The next step's place, its full name and what the job recorded there (None: it never
        got there). Raises for a name used twice, and for a place that recorded another step."""
        check_name(name, "a step's name")
        if repeat:
            count = self.repeats.get(name, 0) + 1
            self.repeats[name] = count
            full = f"{name}#{count}"
        else:
            full = name
        if full in self.names:
            raise DuplicateStepError(
                f"step {full!r} ran already in this run of job {self.job_id}: each step needs a "
                "name of its own (in a loop: ctx.step(name, fn, repeat=True), or put the "
                "loop's index in the name)"
            )
        self.names.add(full)
        seq = self.next_seq
        self.next_seq += 1
        recorded = self.recorded.get(seq)
        # A place whose step failed holds no result: the run may put another step there.
        if (
            recorded is not None
            and recorded.state != durable.FAILED
            and (recorded.name != full or recorded.kind != kind)
        ):
            raise NondeterministicStepError(
                f"job {self.job_id}: this run's step {seq} is {kind} {full!r}, but the "
                f"job's checkpoints recorded {recorded.kind} {recorded.name!r} there: the "
                "order and names of a durable job's steps must be the same on every run"
            )
        return seq, full, recorded


def host_of(ctx: JobContext, what: str) -> TransactionHost:
    """The worker's side of a job's database work (as ``ctx.transaction()`` finds it)."""
    host = ctx.transactions or current_host()
    if host is None:
        raise StepError(
            f"{what} works in a handler run by a pgqueue worker (or pgqueue.testing's drain): "
            "this job context has no worker behind it"
        )
    return host


def _not_on_loop(what: str, instead: str) -> None:
    try:
        asyncio.get_running_loop()
    except RuntimeError:
        return
    raise StepError(
        f"{what} on the event loop blocks it: use `await {instead}` in an async handler"
    )


@functools.lru_cache(maxsize=1024)
def _codec(fn: Callable[..., Any]) -> TaskCodec:
    """What ``fn``'s return annotation says its result decodes to (derived once per function)."""
    try:
        signature = inspect.signature(fn)
    except (TypeError, ValueError):
        return TaskCodec(None, inspect.Signature(), _described(fn))
    return TaskCodec(fn, signature, _described(fn))


def _described(fn: Callable[..., Any]) -> str:
    return f"step function {getattr(fn, '__qualname__', None) or fn!r}"


def _codec_of(fn: Callable[..., Any]) -> TaskCodec:
    target = getattr(fn, "__func__", fn)  # a bound method: its function (methods are new each time)
    try:
        return _codec(target)
    except TypeError:  # unhashable callable
        return _codec.__wrapped__(target)


_NOT_RETRIED = (StepError, LeaseLost, JobCancelled, InvalidJobError, Retry, Fail)


class Step:
    """One step being run: its place, name and codec, and the statements it writes (the sync
    and the async driver share every decision here)."""

    def __init__(
        self, ctx: JobContext, host: TransactionHost, fn: Callable[..., Any], seq: int, name: str
    ) -> None:
        self.ctx = ctx
        self.host = host
        self.seq = seq
        self.name = name
        self.codec = _codec_of(fn)

    def decode(self, stored: Any) -> Any:
        """A checkpoint's JSON as ``fn``'s return annotation names it."""
        return self.codec.decode_result(stored)

    def encode(self, value: Any) -> str:
        """``value`` as the checkpoint's JSON (checked against the return annotation)."""
        stored = self.codec.encode_result(value)
        return dumps(
            stored, limit=self.host.max_result_bytes, what=f"the result of step {self.name!r}"
        )

    def checkpoint(self, result: str, tries: int, elapsed: float) -> plans.Plan[bool]:
        job = self.ctx.job
        return durable.write_step(
            job.id,
            job.lease_token,
            self.ctx.worker_id,
            seq=self.seq,
            name=self.name,
            state=durable.SUCCEEDED,
            attempts=tries,
            elapsed=elapsed,
            result=result,
        )

    def failure(self, error: BaseException, tries: int, elapsed: float) -> plans.Plan[bool]:
        job = self.ctx.job
        recorded = {"error": type(error).__name__, "message": str(error)[:2000]}
        return durable.write_step(
            job.id,
            job.lease_token,
            self.ctx.worker_id,
            seq=self.seq,
            name=self.name,
            state=durable.FAILED,
            attempts=tries,
            elapsed=elapsed,
            error=json.dumps(recorded),
        )

    def lost(self) -> LeaseLost:
        ctx = self.ctx
        return LeaseLost(
            f"job {ctx.id} (attempt {ctx.attempt}) is no longer held by this worker: step "
            f"{self.name!r} was not checkpointed (the job's new holder runs it)"
        )

    def retry_after(
        self, retry: StepRetry | None, error: BaseException, tries: int
    ) -> float | None:
        """Seconds before trying the step again, or None: the step failed."""
        if isinstance(error, _NOT_RETRIED):
            # Not a failure to try again in place: a misuse, a lost job, a result that cannot
            # be stored, or the handler's own word on the job (Retry later, Fail for good).
            return None
        if retry is None or tries >= retry.attempts or not retry.policy.retryable(error):
            return None
        return max(0.0, retry.policy.delay(tries, error))


def _result(step: Step, text: str) -> Any:
    return step.decode(json.loads(text))


def _log_unrecorded(step: Step, exc: BaseException) -> None:
    log.warning(
        "could not record step %r of job %s as failed: %s",
        step.name,
        step.ctx.id,
        exc,
        extra=fields(Action.STEP_NOT_RECORDED),
    )


# -- sync ----------------------------------------------------------------------------------


def load_run(ctx: JobContext) -> StepRun:
    """The run's steps, read from the database at its first step (one query)."""
    _not_on_loop("a durable step", "its _async form")
    return _load(ctx, host_of(ctx, "a durable step"))


async def load_run_async(ctx: JobContext) -> StepRun:
    """The async form of :func:`load_run`."""
    return await _load_async(ctx, host_of(ctx, "a durable step"))


def _load(ctx: JobContext, host: TransactionHost) -> StepRun:
    run = ctx.step_run
    if run is None:
        with host.connection() as conn:
            recorded = plans.run(durable.load_steps(ctx.id), conn)
        run = ctx.step_run = StepRun(ctx.id, recorded)
    return run


# -- async ---------------------------------------------------------------------------------


async def _load_async(ctx: JobContext, host: TransactionHost) -> StepRun:
    run = ctx.step_run
    if run is None:
        async with host.connection_async() as conn:
            recorded = await plans.run_async(durable.load_steps(ctx.id), conn)
        run = ctx.step_run
        if run is None:  # (two steps started together: the first one loaded)
            run = ctx.step_run = StepRun(ctx.id, recorded)
    return run


# sync-twin: async source
async def run_step_async(
    ctx: JobContext,
    name: str,
    fn: Callable[..., Any],
    args: tuple[Any, ...],
    kwargs: dict[str, Any],
    *,
    retry: int | StepRetry | None,
    transaction: object,
    repeat: bool,
) -> Any:
    """``ctx.step_async()``'s work (see the module docstring)."""
    if True:  # ASYNC
        pass  # fn may be sync (called on the event loop) or async
    else:
        _not_on_loop("ctx.step()", "ctx.step_async()")
        if inspect.iscoroutinefunction(fn):
            raise StepError(  # the names in a plain string: the sync twin renames f-strings
                f"step {name!r}: " + "ctx.step() of an async function: use await ctx.step_async()"
            )
    policy = step_retry(retry)
    if True:  # ASYNC  # noqa: SIM108
        host = host_of(ctx, "ctx.step_async()")
    else:
        host = host_of(ctx, "ctx.step()")
    seq, full, recorded = (await _load_async(ctx, host)).place(name, STEP, repeat)
    step = Step(ctx, host, fn, seq, full)
    with step_span(
        ctx, step, replayed=recorded is not None and recorded.state == durable.SUCCEEDED
    ):
        if recorded is not None and recorded.state == durable.SUCCEEDED:
            return step.decode(recorded.result)
        ctx.raise_if_cancelled()
        tries = 0
        started = time.monotonic()
        while True:
            tries += 1
            try:
                text = await _attempt_async(step, fn, args, kwargs, transaction, tries, started)
            except Exception as exc:
                delay = step.retry_after(policy, exc, tries)
                if delay is None:
                    await _record_failure_async(step, exc, tries, started)
                    raise
                if True:  # ASYNC
                    await asyncio.sleep(delay)
                    ctx.raise_if_cancelled()
                elif ctx.wait_cancelled(delay):
                    ctx.raise_if_cancelled()
                continue
            return _result(step, text)


# sync-twin: generated from the async source above by `make sync-twins`; do not edit


def run_step(
    ctx: JobContext,
    name: str,
    fn: Callable[..., Any],
    args: tuple[Any, ...],
    kwargs: dict[str, Any],
    *,
    retry: int | StepRetry | None,
    transaction: object,
    repeat: bool,
) -> Any:
    """``ctx.step()``'s work (see the module docstring)."""
    _not_on_loop("ctx.step()", "ctx.step_async()")
    if inspect.iscoroutinefunction(fn):
        raise StepError(  # the names in a plain string: the sync twin renames f-strings
            f"step {name!r}: " + "ctx.step() of an async function: use await ctx.step_async()"
        )
    policy = step_retry(retry)
    host = host_of(ctx, "ctx.step()")
    seq, full, recorded = (_load(ctx, host)).place(name, STEP, repeat)
    step = Step(ctx, host, fn, seq, full)
    with step_span(
        ctx, step, replayed=recorded is not None and recorded.state == durable.SUCCEEDED
    ):
        if recorded is not None and recorded.state == durable.SUCCEEDED:
            return step.decode(recorded.result)
        ctx.raise_if_cancelled()
        tries = 0
        started = time.monotonic()
        while True:
            tries += 1
            try:
                text = _attempt(step, fn, args, kwargs, transaction, tries, started)
            except Exception as exc:
                delay = step.retry_after(policy, exc, tries)
                if delay is None:
                    _record_failure(step, exc, tries, started)
                    raise
                if ctx.wait_cancelled(delay):
                    ctx.raise_if_cancelled()
                continue
            return _result(step, text)


# sync-twin: end


def _call(fn: Callable[..., Any], *args: Any, **kwargs: Any) -> Any:
    """A sync step's call (an async ``fn`` was refused before)."""
    return fn(*args, **kwargs)


async def _call_async(fn: Callable[..., Any], *args: Any, **kwargs: Any) -> Any:
    """An async step's call: ``fn`` may be sync (called on the event loop) or async."""
    value = fn(*args, **kwargs)
    if inspect.isawaitable(value):
        value = await value
    return value


# sync-twin: async source
async def _attempt_async(
    step: Step,
    fn: Callable[..., Any],
    args: tuple[Any, ...],
    kwargs: dict[str, Any],
    transaction: object,
    tries: int,
    started: float,
) -> str:
    host = step.host
    if transaction is False or transaction is None:
        text = step.encode(await _call_async(fn, *args, **kwargs))
        async with host.connection_async() as conn:
            elapsed = time.monotonic() - started
            written = await plans.run_async(step.checkpoint(text, tries, elapsed), conn)
        if not written:
            raise step.lost()
        return text
    async with contextlib.AsyncExitStack() as stack:
        own = transaction is True  # else the application's connection (ctx.transaction(conn))
        source = await stack.enter_async_context(host.connection_async()) if own else transaction
        owned = await stack.enter_async_context(host.own_async(source))
        driver = owned.driver if own else transaction
        text = step.encode(await _call_async(fn, driver, *args, **kwargs))
        if owned.flush is not None:
            await owned.flush()  # the ORM's pending writes first: the job's row lock is last
        # The transaction's last statement: its row lock is held only until the COMMIT.
        elapsed = time.monotonic() - started
        checkpoint = step.checkpoint(text, tries, elapsed)
        if not await plans.run_async(checkpoint, owned.driver, foreign=not own):
            raise step.lost()  # rolls the step's writes back
    return text


# sync-twin: generated from the async source above by `make sync-twins`; do not edit


def _attempt(
    step: Step,
    fn: Callable[..., Any],
    args: tuple[Any, ...],
    kwargs: dict[str, Any],
    transaction: object,
    tries: int,
    started: float,
) -> str:
    host = step.host
    if transaction is False or transaction is None:
        text = step.encode(_call(fn, *args, **kwargs))
        with host.connection() as conn:
            elapsed = time.monotonic() - started
            written = plans.run(step.checkpoint(text, tries, elapsed), conn)
        if not written:
            raise step.lost()
        return text
    with contextlib.ExitStack() as stack:
        own = transaction is True  # else the application's connection (ctx.transaction(conn))
        source = stack.enter_context(host.connection()) if own else transaction
        owned = stack.enter_context(host.own(source))
        driver = owned.driver if own else transaction
        text = step.encode(_call(fn, driver, *args, **kwargs))
        if owned.flush is not None:
            owned.flush()  # the ORM's pending writes first: the job's row lock is last
        # The transaction's last statement: its row lock is held only until the COMMIT.
        elapsed = time.monotonic() - started
        checkpoint = step.checkpoint(text, tries, elapsed)
        if not plans.run(checkpoint, owned.driver, foreign=not own):
            raise step.lost()  # rolls the step's writes back
    return text


# sync-twin: end


# sync-twin: async source
async def _record_failure_async(step: Step, exc: BaseException, tries: int, started: float) -> None:
    if isinstance(exc, StepError | LeaseLost | JobCancelled):
        return
    try:
        async with step.host.connection_async() as conn:
            await plans.run_async(step.failure(exc, tries, time.monotonic() - started), conn)
    except (psycopg.Error, StepError) as error:
        _log_unrecorded(step, error)


# sync-twin: generated from the async source above by `make sync-twins`; do not edit


def _record_failure(step: Step, exc: BaseException, tries: int, started: float) -> None:
    if isinstance(exc, StepError | LeaseLost | JobCancelled):
        return
    try:
        with step.host.connection() as conn:
            plans.run(step.failure(exc, tries, time.monotonic() - started), conn)
    except (psycopg.Error, StepError) as error:
        _log_unrecorded(step, error)


# sync-twin: end


# -- tracing -------------------------------------------------------------------------------


@contextlib.contextmanager
def step_span(ctx: JobContext, step: Step, *, replayed: bool) -> Iterator[None]:
    """A span per step when this process traces (see :mod:`pgqueue.rules.tracing`: OpenTelemetry
    imported and a tracer provider set), a child of the attempt's span; nothing otherwise."""
    trace = sys.modules.get("opentelemetry.trace")
    if trace is None:
        yield
        return
    provider = trace.get_tracer_provider()
    if isinstance(provider, trace.ProxyTracerProvider | trace.NoOpTracerProvider):
        yield
        return
    tracer = trace.get_tracer("pgqueue", __version__)
    attributes = {
        "pgqueue.job.id": ctx.id,
        "pgqueue.step.name": step.name,
        "pgqueue.step.seq": step.seq,
        "pgqueue.step.replayed": replayed,
    }
    with tracer.start_as_current_span(f"step {step.name}", attributes=attributes):
        yield
