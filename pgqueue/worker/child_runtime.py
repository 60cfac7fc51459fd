"""Sync handlers in child processes (``pool="process"``): :class:`ChildRuntime`, the
:class:`~pgqueue.worker.runtimes.Runtime` over :mod:`pgqueue.worker.process_pool`, and what a
child's answer (or death) makes of an attempt (:func:`from_child`).

The same reasons as in the other runtimes reach the handler's ``ctx.cancelled`` by a message; a
timeout or shutdown then kills the child, a cancel or a lost lease does after a short grace.
The attempt's outcome waits for the child's answer or death, so nothing the handler does can
outlive it.

A module of its own, imported by the executor only when a worker runs children: it brings
multiprocessing, the pool and the children's frames, which a worker running handlers on its
threads (the default) never uses.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Callable
from typing import Any

from pgqueue.errors import JobTimeout
from pgqueue.handler.job_transaction import TransactionHost
from pgqueue.rules.tasks import Task
from pgqueue.rules.vocabulary import CancelReason
from pgqueue.worker.attempts import Running, Verdicts
from pgqueue.worker.batches import BatchRun
from pgqueue.worker.child_process import ChildGone, ChildSettings
from pgqueue.worker.frames import ChildReply, read_park
from pgqueue.worker.outcome import Outcome, failed_outcome
from pgqueue.worker.process_pool import ProcessPool
from pgqueue.worker.runtimes import Host, OnTheLoop, Settled

__all__ = ["ChildRuntime", "from_child"]


class ChildRuntime(OnTheLoop):
    """Sync handlers in child processes (``pool="process"``)."""

    traces = False  # a child process traces the attempts it runs itself

    def __init__(
        self,
        host: Host,
        children: ChildSettings,
        concurrency: int,
        sync_tasks: frozenset[str],
        transactions: TransactionHost | None,
    ) -> None:
        super().__init__(host)
        self.pool = ProcessPool(children, concurrency, host.worker_id, sync_tasks, transactions)

    def _timed(
        self, timeout: float | None, on_timeout: Callable[[], object]
    ) -> tuple[Callable[[], None], Callable[[], None]]:
        """``started`` for the pool (the timeout counts from the hand-over, not from the wait
        for a child to start and import the app) and the timer's cancel."""
        loop = asyncio.get_running_loop()
        timer: asyncio.TimerHandle | None = None

        def started() -> None:
            nonlocal timer
            if timeout is not None:
                timer = loop.call_later(timeout, on_timeout)

        def cancel() -> None:
            if timer is not None:
                timer.cancel()

        return started, cancel

    async def _call(
        self, running: Running, task: Task[..., Any], args: list[Any], kwargs: dict[str, Any]
    ) -> Outcome | None:
        job, host = running.job, self.host
        timed, cancel = self._timed(
            task.timeout, lambda: host.stop_job(job.id, "timeout", job.lease_token)
        )

        def started() -> None:
            running.started = time.monotonic()  # the handler's own time
            timed()

        try:
            reply = await self.pool.run(job, running.ctx, started)
        finally:
            cancel()
        return from_child(host.verdicts, running, task, reply)

    async def _call_batch(self, run: BatchRun) -> Settled:
        task, host = run.task, self.host
        timed, cancel = self._timed(task.timeout, lambda: host.stop_batch(run, "timeout"))

        def started() -> None:
            run.started = time.monotonic()
            timed()

        members: list[Running] = [run.members[position] for position in run.positions]
        first = members[0]
        try:
            reply = await self.pool.run(
                first.job, first.ctx, started, batch=[m.ctx for m in members]
            )
        finally:
            cancel()
        if isinstance(reply, ChildReply):
            replies: list[ChildReply | ChildGone | None] = [*reply.items]
        else:
            replies = [reply] * len(members)
        return [
            from_child(host.verdicts, member, task, answer)
            for member, answer in zip(members, replies, strict=True)
        ]

    def stop(self, running: Running, reason: CancelReason) -> None:
        self.pool.stop((running.job.id, running.job.lease_token), reason)

    def stop_batch(self, run: BatchRun, reason: CancelReason) -> None:
        self.pool.stop(run.key, reason)

    def stop_item(self, run: BatchRun, running: Running, reason: CancelReason) -> None:
        self.pool.stop_item(run.key, (running.job.id, running.job.lease_token), reason)

    def refresh(self, running: Running) -> None:
        # A child's transaction state comes by its pipe: what it wrote before sending the
        # completion is read first.
        self.pool.read_now((running.job.id, running.job.lease_token))

    def resize(self, concurrency: int) -> None:
        self.pool.resize(concurrency)

    async def drain(self, timeout: float) -> None:
        await self.pool.close(timeout)

    def close(self) -> bool:
        self.pool.kill_all()  # only children the drain did not stop
        return True


def from_child(
    verdicts: Verdicts, running: Running, task: Task[..., Any], reply: ChildReply | ChildGone | None
) -> Outcome | None:
    """What a child's answer (or death, or never starting) makes of a job's attempt."""
    job, ctx = running.job, running.ctx
    if reply is None:  # stopped before a child took it
        return verdicts.stopped(running, task, None)
    if isinstance(reply, ChildGone):
        if ctx.cancel_reason is not None:
            # Killed because we asked it to stop: the reason decides (a timeout is a
            # failed attempt, a cancel is cancelled, a lost lease or shutdown not ours).
            return _child_stopped(verdicts, running, task)
        return failed_outcome(task, job, reply.error, verdicts.worker_id)
    if reply.kind == "park":
        signal = None if reply.park is None else read_park(reply.park)
        if signal is None:
            error = ValueError(f"a child's park reply was malformed: {reply.park!r}")
            return failed_outcome(task, job, error, verdicts.worker_id)
        return verdicts.parked(running, task, signal)
    if reply.kind == "stopped" or (
        reply.kind in ("error", "no_retry")
        and ctx.cancel_reason in ("lease lost", "shutdown", "timeout")
    ):
        return _child_stopped(verdicts, running, task)
    return Outcome(
        job, reply.kind, reply.delay, reply.error, result=reply.result, summary=reply.summary
    )


def _child_stopped(verdicts: Verdicts, running: Running, task: Task[..., Any]) -> Outcome | None:
    """A child's attempt that ended because we stopped it (answer or death alike)."""
    if running.ctx.cancel_reason == "timeout":
        timeout = JobTimeout(
            f"{task.name} timed out after {task.timeout:g}s (child process killed)"
        )
        return verdicts.stopped(running, task, timeout)
    return verdicts.stopped(running, task, None)
