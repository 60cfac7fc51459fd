"""The process pool (``pgq work --pool process``): sync handlers run in child processes.

Why: a thread cannot be stopped. A sync handler past its timeout keeps running (and writing)
while its retry runs elsewhere, and one that leaks memory or crashes the interpreter (a segfault
in a C extension, ``os._exit``, the OOM killer) takes the whole worker down with every job it
holds. A child process can be killed, recycled, and can die alone.

What stays in the worker: claiming, heartbeats (a child's job is held by the executor like any
running job, so every beat extends its lease), acks, the timeout clock, cancellation and lease
loss. A child only imports the app (by its ``module:attribute`` spec), runs one job at a time
and reports what the attempt amounted to; it never touches the worker's database connections.

The parts, one job each: this module hands jobs to children (an idle one, one starting, or a
new one while there is room) and stops them; :mod:`pgqueue.worker.child_handle` is the worker's
end of one child (its pipes, messages, and terminating it);
:mod:`pgqueue.worker.child_process` starts the processes (one spawner thread, ``spawn``, pidfds)
and signals them; :mod:`pgqueue.worker.pool_sizing` says when a child is replaced or retired;
:mod:`pgqueue.worker.frames` is the wire format; :mod:`pgqueue.worker.child` the child's side.

Stopping a child's job: a message sets ``ctx.cancelled`` in the child; for a timeout or shutdown
the worker then terminates the child at once, for a cancel or a lost lease after
``stop_grace`` unless the handler stopped by itself. Terminating is SIGTERM (the child raises
an exception in the handler, so ``finally`` blocks run) and SIGKILL ``kill_grace`` later. A
job's outcome is written only once its child is dead or has answered, so a retry can never
overlap the attempt it replaces.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import signal
import sys
from collections import deque
from collections.abc import Callable
from typing import TYPE_CHECKING

from pgqueue.errors import ConfigurationError
from pgqueue.handler.job_context import ClaimedJob, JobContext
from pgqueue.handler.job_transaction import TransactionHost
from pgqueue.rules.log_actions import Action, fields
from pgqueue.rules.vocabulary import CancelReason
from pgqueue.worker.child_handle import Child
from pgqueue.worker.child_process import (
    ChildGone,
    ChildProcessDied,
    ChildSettings,
    ChildStartFailed,
    Spawner,
    child_config,
    describe_exit,
)
from pgqueue.worker.frames import ChildReply, JobKey
from pgqueue.worker.pool_sizing import Recycling, shrunk

if TYPE_CHECKING:
    from pgqueue.client import PgQueue

__all__ = [
    "ChildGone",
    "ChildProcessDied",
    "ChildReply",
    "ChildSettings",
    "ChildStartFailed",
    "ProcessPool",
    "app_spec_for",
    "describe_exit",
]

log = logging.getLogger("pgqueue.worker.pool")

#: At shutdown, children get at least this long to exit after the last job.
_CLOSE_MIN = 1.0


def app_spec_for(app: PgQueue) -> str:
    """The ``module:attribute`` a child imports to get ``app``: the module of one of its tasks
    that holds it, else any loaded module that does (for programmatic ``Worker`` users; ``pgq
    work`` passes the spec it was given)."""
    names = [task.func.__module__ for task in app.tasks.values()]
    for name in dict.fromkeys([*names, *list(sys.modules)]):
        module = sys.modules.get(name)
        if module is None:
            continue
        for attribute, value in list(vars(module).items()):
            if value is app and not attribute.startswith("__"):
                return f"{name}:{attribute}"
    raise ConfigurationError(
        "pool='process' needs the module the PgQueue can be imported from, and no loaded "
        "module holds it: set WorkerSettings(app_spec='package.module:attribute')"
    )


class ProcessPool:
    """Up to ``size`` children (the worker's slots), started on demand and kept while idle."""

    def __init__(
        self,
        settings: ChildSettings,
        size: int,
        worker_id: str,
        sync_tasks: frozenset[str],
        transactions: TransactionHost | None = None,
    ) -> None:
        self.settings = settings
        #: Where the children's ctx.transaction() blocks connect (their own connection each).
        self.transactions = transactions
        self.size = size
        self.worker_id = worker_id
        self.sync_tasks = sync_tasks
        self.children: set[Child] = set()
        self.closing = False
        self._idle: deque[Child] = deque()
        self._busy: dict[JobKey, Child] = {}
        self._acquiring: dict[JobKey, asyncio.Event] = {}
        self._available = asyncio.Event()  # an idle child, or room for a new one
        self._all_gone = asyncio.Event()
        self._all_gone.set()
        self._spawner = Spawner()
        self._starting: set[asyncio.Task[None]] = set()
        self._warned_tasks = False
        self.recycling = Recycling(settings)

    # -- running a job -----------------------------------------------------------------------

    async def run(
        self,
        job: ClaimedJob,
        ctx: JobContext,
        started: Callable[[], None],
        batch: list[JobContext] | None = None,
    ) -> ChildReply | ChildGone | None:
        """Run one attempt in a child (or, with ``batch``, one call for the jobs of a batch:
        ``job`` is its first, whose key is the batch's). None: stopped (``stop``) before it was
        handed over. ``started`` is called the moment it is (the timeout counts from there, not
        from the wait for a child to import the app)."""
        key = (job.id, job.lease_token)
        acquired = await self._acquire(key)
        if not isinstance(acquired, Child):
            return acquired
        child = acquired
        cancelled = ctx.cancelled if batch is None else all(c.cancelled for c in batch)
        if cancelled:  # asked to stop while it waited for a child: it never starts
            self._release(child)
            return None
        try:
            reply = child.begin(job, ctx, batch)
        except (TypeError, ValueError, RecursionError) as exc:  # args JSON cannot encode again
            child.end()
            self._release(child)
            return ChildGone(ChildStartFailed(f"cannot send the job to a child: {exc}"))
        self._busy[key] = child
        started()
        try:
            result = await reply
        except BaseException:
            # Our wait was cancelled (the loop is going away): the handler must not go on
            # unwatched.
            child.terminate(0.0)
            raise
        finally:
            self._busy.pop(key, None)
            child.end()
        if isinstance(result, ChildReply):
            child.jobs += 1
            why = self.recycling.why_replace(child.jobs, child.rss)
            if why is not None:
                child.retire(why)
            else:
                self._release(child)
        return result

    def stop(self, key: JobKey, reason: CancelReason) -> None:
        """Stop the attempt ``key`` (the executor set its context's reason already): a timeout
        or shutdown terminates its child now; a cancel or a lost lease gives the handler
        ``stop_grace`` to notice ``ctx.cancelled`` first."""
        waiting = self._acquiring.get(key)
        if waiting is not None:
            waiting.set()
            return
        child = self._busy.get(key)
        if child is None:
            return
        if reason == "timeout":
            child.stop(key, reason, None)
            child.terminate(self.settings.kill_grace)
        elif reason == "shutdown":
            # The shutdown grace was the handler's time to finish; die before the job is
            # handed back (the drain waits up to a second for that).
            child.stop(key, reason, None)
            child.terminate(min(self.settings.kill_grace, 0.5))
        else:
            child.stop(key, reason, self.settings.stop_grace)

    def stop_item(self, key: JobKey, item: JobKey, reason: CancelReason) -> None:
        """One job (``item``) of the batch ``key`` was asked to stop (a cancel, a lost lease):
        its child's handler is told; the batch goes on. Before a child took the batch, the
        job's context says so when the batch is sent."""
        child = self._busy.get(key)
        if child is not None:
            child.stop_item(item, reason)

    def read_now(self, key: JobKey) -> None:
        """Read what the child running ``key`` has written so far (its transaction's state
        comes that way)."""
        child = self._busy.get(key)
        if child is not None:
            child.read_now()

    # -- children ----------------------------------------------------------------------------

    async def _acquire(self, key: JobKey) -> Child | ChildGone | None:
        """A ready child for ``key``: an idle one, one starting with nobody waiting for it, or a
        new one while there is room; otherwise wait. None: stopped meanwhile."""
        stop = self._acquiring[key] = asyncio.Event()
        try:
            while not stop.is_set():
                while self._idle:
                    idle = self._idle.pop()  # the most recently used: warm caches
                    if not idle.gone and not idle.retiring:
                        return idle
                starting = self._adoptable()
                if starting is None and len(self.children) < self.size and not self.closing:
                    starting = self._spawn()
                if starting is not None:
                    return await self._wait_ready(starting, key, stop)
                self._available.clear()
                await _first(self._available, stop)
            return None
        finally:
            self._acquiring.pop(key, None)

    async def _wait_ready(
        self, child: Child, key: JobKey, stop: asyncio.Event
    ) -> Child | ChildGone | None:
        child.owner = key
        stopper = asyncio.ensure_future(stop.wait())
        try:
            await asyncio.wait((child.ready, stopper), return_when=asyncio.FIRST_COMPLETED)
        finally:
            stopper.cancel()
            child.owner = None
        if not child.ready.done():
            return None  # stopped first; the child goes idle once ready (child_ready)
        gone = child.ready.result()
        if gone is not None:
            return gone
        if stop.is_set():
            self._release(child)
            return None
        return child

    def _adoptable(self) -> Child | None:
        """A child still starting that no job waits for (a replacement started ahead)."""
        for child in self.children:
            if child.owner is None and not child.ready.done() and not child.retiring:
                return child
        return None

    def _spawn(self) -> Child:
        loop = asyncio.get_running_loop()
        child = Child(self, loop)
        self.children.add(child)
        self._all_gone.clear()
        task = loop.create_task(self._start(child))
        self._starting.add(task)
        task.add_done_callback(self._starting.discard)
        return child

    async def _start(self, child: Child) -> None:
        config = child_config(self.settings, self.worker_id, self.transactions)
        try:
            process = await self._spawner.launch(config)
        except Exception as exc:
            log.exception(
                "could not start a child process", extra=fields(Action.CHILD_START_FAILED)
            )
            child.launch_failed(exc)
            return
        child.connect(process)

    def child_ready(self, child: Child) -> None:
        log.info("child process started", extra=fields(Action.CHILD_STARTED, pid=child.pid))
        missing = self.sync_tasks - child.tasks
        if missing and not self._warned_tasks:
            self._warned_tasks = True
            log.error(
                "the app the children import (%s) lacks tasks this worker runs: %s; their "
                "jobs fail in children (register them at import time, or set app_spec)",
                self.settings.app_spec,
                ", ".join(sorted(missing)),
                extra=fields(Action.CHILD_TASKS_MISSING),
            )
        if child.owner is None:
            self._release(child)

    def _release(self, child: Child) -> None:
        """A child free for the next job (or retired, when the pool is over its size)."""
        if child.gone or child.retiring:
            return
        if self.closing:
            child.retire("the worker is stopping")
            return
        if len(self.children) > self.size:
            child.retire(shrunk(self.size))
            return
        self._idle.append(child)
        self._available.set()

    def child_gone(self, child: Child) -> None:
        self.children.discard(child)
        with contextlib.suppress(ValueError):
            self._idle.remove(child)
        self._available.set()  # room for a new child
        if not self.children:
            self._all_gone.set()
        # A child that ran jobs and was recycled or died gets a successor at once, so the
        # next job does not wait for an interpreter to start and import the app.
        if child.jobs and not self.closing and len(self.children) < self.size:
            self._spawn()

    def resize(self, size: int) -> None:
        self.size = size
        while len(self.children) > size and self._idle:
            self._idle.popleft().retire(shrunk(size))
        self._available.set()

    # -- shutting down -----------------------------------------------------------------------

    async def close(self, timeout: float) -> None:
        """Idle children exit; any still running is killed. Returns once every child is
        gone, or after ``timeout`` plus a kill (never leaves a live child behind)."""
        self.closing = True
        if self._starting:  # a launch in the spawner thread takes milliseconds: let it finish
            await asyncio.wait(list(self._starting), timeout=5.0)
        for child in list(self.children):
            if child.job is None and child.ready.done():
                child.retire("the worker is stopping")
            else:
                child.terminate(self.settings.kill_grace)
        with contextlib.suppress(TimeoutError):
            await asyncio.wait_for(self._all_gone.wait(), max(timeout, _CLOSE_MIN))
        if self.children:
            for child in list(self.children):
                child.signal(signal.SIGKILL)
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(self._all_gone.wait(), 2.0)
        for child in list(self.children):
            log.error(
                "child process did not exit after SIGKILL",
                extra=fields(Action.CHILD_UNKILLABLE, pid=child.pid),
            )
            child.abandon()
        self.children.clear()
        self._spawner.close()

    def kill_all(self) -> None:
        """At teardown without a drain (the worker's run was cancelled): SIGKILL every child
        left; multiprocessing reaps them at exit."""
        self.closing = True
        for child in list(self.children):
            child.abandon()
        self.children.clear()
        self._spawner.close()


async def _first(event: asyncio.Event, stop: asyncio.Event) -> None:
    """Until ``event`` or ``stop`` is set."""
    waiters = (asyncio.ensure_future(event.wait()), asyncio.ensure_future(stop.wait()))
    try:
        await asyncio.wait(waiters, return_when=asyncio.FIRST_COMPLETED)
    finally:
        for waiter in waiters:
            waiter.cancel()
