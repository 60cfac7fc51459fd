"""Tasks for the process pool tests, importable by `pgq work` and by its children:

    pgq work tests.integration.process_app:pgq --pool process

Every handler writes what it does to ``ledger`` on a connection of its own, with the pid of the
process it ran in, so tests see which child ran what and whether anything happened after a
child was killed.
"""

from __future__ import annotations

import asyncio
import ctypes
import os
import resource
import signal
import time

import psycopg

from pgqueue import ConstantBackoff, Fail, JobContext, PgQueue, Retry, current_job

pgq = PgQueue()

#: What the leaking handler keeps (it lives as long as its child).
_leaked: list[bytes] = []


def record(event: str, note: str | None = None, ctx: JobContext | None = None) -> None:
    ctx = ctx or current_job()
    with psycopg.connect(os.environ["PGQUEUE_DSN"], autocommit=True) as conn:
        conn.execute(
            "INSERT INTO ledger (job_id, attempt, pid, worker, event, note)"
            " VALUES (%s, %s, %s, %s, %s, %s)",
            (ctx.id, ctx.attempt, os.getpid(), ctx.worker_id, event, note),
        )


@pgq.task(name="proc.noop")
def noop(n: int = 0) -> None:
    record("end", str(n))


@pgq.task(name="proc.async_noop")
async def async_noop() -> None:
    """Stays on the worker's loop: its pid is the worker's."""
    await asyncio.to_thread(record, "end", "async", current_job())


@pgq.task(name="proc.context", max_attempts=4)
def context(label: str) -> None:
    ctx = current_job()
    record("end", f"{label}:{ctx.id}:{ctx.task}:{ctx.queue}:{ctx.attempt}/{ctx.max_attempts}")


@pgq.task(name="proc.pass_context", pass_context=True)
def pass_context(ctx: JobContext, label: str) -> None:
    record("end", f"{label}:{ctx.task}:{ctx is current_job()}", ctx)


@pgq.task(name="proc.result", result_ttl=3600)
def result(a: int, b: int) -> dict[str, int]:
    return {"sum": a + b, "pid": os.getpid()}


@pgq.task(name="proc.echo", result_ttl=3600)
def echo(data: str) -> dict[str, object]:
    """Big arguments in, a big result out: frames larger than a pipe's buffer, both ways."""
    return {"data": data[::-1], "job": current_job().id}


@pgq.task(name="proc.sleep")
def sleep(seconds: float, cooperative: bool = True) -> None:
    """A cooperative one stops as soon as ctx.cancelled turns true (a message from the worker)."""
    ctx = current_job()
    record("start")
    if cooperative:
        if ctx.wait_cancelled(seconds):
            record("cancelled", ctx.cancel_reason)
            ctx.raise_if_cancelled()
    else:
        time.sleep(seconds)
    record("end")


@pgq.task(name="proc.timeout", timeout=1.0, max_attempts=2, backoff=ConstantBackoff(0.1))
def timeout() -> None:
    """Sleeps past its timeout, then writes: a write that must never happen."""
    record("start")
    time.sleep(3.0)
    record("late")


@pgq.task(name="proc.crash", max_attempts=1)
def crash(how: str) -> None:
    record("start", how)
    if how == "segv":
        resource.setrlimit(resource.RLIMIT_CORE, (0, 0))  # no core file in the tree
        ctypes.string_at(0)
    elif how == "exit3":
        os._exit(3)
    elif how == "sigkill":  # what the OOM killer does
        os.kill(os.getpid(), signal.SIGKILL)
    record("end", how)


@pgq.task(name="proc.crash_twice", max_attempts=2, backoff=ConstantBackoff(0.1))
def crash_twice() -> None:
    """Dies on its first attempt only: the attempt counts and the retry runs in a new child."""
    record("start")
    if current_job().attempt == 1:
        os._exit(3)
    record("end")


@pgq.task(name="proc.leak")
def leak(mb: int) -> None:
    _leaked.append(b"\x01" * (mb * 2**20))  # touched pages: they count in RSS
    record("end", str(mb))


@pgq.task(name="proc.retry_once", max_attempts=1)
def retry_once() -> None:
    record("start")
    with psycopg.connect(os.environ["PGQUEUE_DSN"]) as conn:
        seen = conn.execute(
            "SELECT count(*) FROM ledger WHERE job_id = %s", (current_job().id,)
        ).fetchone()
    if seen and seen[0] == 1:
        raise Retry(delay=0.1, reason="not ready yet")
    record("end")


@pgq.task(name="proc.fails_for_good", max_attempts=5)
def fails_for_good() -> None:
    record("start")
    raise Fail("bad input: cannot be retried")


class Permanent(Exception):
    pass


@pgq.task(name="proc.no_retry", max_attempts=5, no_retry_on=Permanent)
def no_retry() -> None:
    record("start")
    raise Permanent("not worth another attempt")


def _backoff(attempt: int, error: BaseException | None) -> float:
    # Looks at the error object: only possible where the exception exists (the child).
    return 0.1 if isinstance(error, KeyError) else 3600.0


@pgq.task(name="proc.backoff_by_error", max_attempts=3, backoff=_backoff)
def backoff_by_error() -> None:
    record("start")
    raise KeyError("missing")


@pgq.task(name="proc.log")
def log_line() -> None:
    import logging

    logging.getLogger("proc.handler").warning("hello from pid=%s", os.getpid())
    record("end")
