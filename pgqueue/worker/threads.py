"""The threads that run sync handlers (``pool="thread"``), fed and drained in batches.

A ``ThreadPoolExecutor`` behind ``loop.run_in_executor`` costs, per job, a
``concurrent.futures.Future`` (with its ``threading.Condition``), an asyncio future chained to
it, a work item, a wake-up of a pool thread and a ``call_soon_threadsafe`` (a write to the
loop's self-pipe) to hand the result back: for short handlers far more than claiming, leasing
and acking the job. Here, instead:

* Calls wait in one FIFO shared by all the threads. A thread that finishes a handler takes the
  next call itself, without going back to sleep, so a thread runs as many short handlers in a
  row as are waiting.
* **Someone is always looking.** While calls wait and a thread is parked, at least one thread
  is awake and not inside a handler (``_looking``): the loop wakes one when it queues calls and
  nobody is looking, and a thread that takes a call while others still wait wakes the next one
  before it runs its handler. So a call never waits behind a handler that runs long: an idle
  thread takes it (no call is handed to a thread in advance, there is nothing to steal back).
  For no-op handlers this costs a wake-up or two per batch, not one per job: the looking thread
  finds the queue empty again by the time it gets the GIL, and parks.
* Finished calls go on a list the loop drains in one callback: the first call that finishes
  after a drain schedules it (one ``call_soon_threadsafe``), the others only append.
* Each call runs in its own copy of one base :class:`contextvars.Context` (``current_job()``
  and the worker's log context; what a handler sets in context variables does not leak into
  the next job the thread runs).

Threads are started on demand up to ``limit`` (not counting threads stuck in a handler that was
abandoned after its timeout: those are replaced) and kept, parked on a lock of their own, until
:meth:`close`. They are not daemon threads: an abandoned handler still running at interpreter
exit is waited for, as ``ThreadPoolExecutor``'s threads are.
"""

from __future__ import annotations

import asyncio
import contextlib
import contextvars
import itertools
import threading
import weakref
from collections import deque
from collections.abc import Callable
from typing import Any, Protocol

from pgqueue.handler.job_context import JobContext, set_current
from pgqueue.handler.job_hooks import call_hooked

#: Call states (only changed under the pool's mutex).
QUEUED = 0
RUNNING = 1
FINISHED = 2  # on the done list, or collected
DROPPED = 3  # taken out of the queue before any thread ran it (timeout, close)

_names = itertools.count()


class Stoppable(Protocol):
    @property
    def cancelled(self) -> bool: ...


class ThreadCall:
    """One sync handler call. ``value``/``error`` are set by the thread that ran it;
    ``skipped``: the call was asked to stop before a thread took it (``stop.cancelled``), so the
    handler never ran; ``abandoned``: its timeout passed while it ran, its result is ignored.
    ``ctx`` is what ``current_job()`` returns in it (None for a batch of jobs); ``stop`` what
    says it should not start any more (the job's context, or the batch)."""

    __slots__ = (
        "abandoned",
        "args",
        "ctx",
        "error",
        "func",
        "kwargs",
        "owner",
        "skipped",
        "state",
        "stop",
        "timer",
        "value",
    )

    def __init__(
        self,
        func: Callable[..., Any],
        args: list[Any],
        kwargs: dict[str, Any],
        ctx: JobContext | None,
        owner: Any,
        stop: Stoppable | None = None,
    ) -> None:
        self.func = func
        self.args = args
        self.kwargs = kwargs
        self.ctx = ctx
        stopper = stop if stop is not None else ctx
        assert stopper is not None, "a call without a job context says what stops it"
        self.stop: Stoppable = stopper
        #: What the caller keeps with the call (the executor's Running).
        self.owner = owner
        self.state = QUEUED
        self.value: Any = None
        self.error: BaseException | None = None
        self.skipped = False
        self.abandoned = False
        self.timer: asyncio.TimerHandle | None = None


def _invoke(call: ThreadCall) -> Any:
    set_current(call.ctx)
    return call_hooked(call.func, call.args, call.kwargs)  # the job hooks, on this thread


class HandlerThreads:
    def __init__(
        self,
        limit: int,
        deliver: Callable[[list[ThreadCall]], None],
        *,
        loop: asyncio.AbstractEventLoop,
        context: contextvars.Context,
        name: str = "pgqueue-job",
    ) -> None:
        self.limit = limit
        self._deliver = deliver
        self._loop = loop
        self._context = context
        self._name = name
        self._mutex = threading.Lock()
        self._queue: deque[ThreadCall] = deque()
        self._done: list[ThreadCall] = []
        self._notified = False  # a drain of _done is scheduled on the loop
        self._parked: list[threading.Lock] = []  # LIFO: the most recently busy thread first
        self._threads: set[threading.Thread] = set()
        self._looking = 0  # threads awake and not in a handler (they will look at the queue)
        self._busy = 0  # threads in a handler, abandoned ones included
        self._stuck = 0  # of those, in a handler abandoned after its timeout
        self._closing = False
        _register_atexit(self)

    # -- on the loop ---------------------------------------------------------------------------

    def submit(self, call: ThreadCall) -> None:
        with self._mutex:
            if self._closing:
                raise RuntimeError("handler threads are closed")
            self._queue.append(call)
            wake = self._wake_one() if self._looking == 0 else None
        if wake is not None:
            _wake(wake)

    def abandon(self, call: ThreadCall) -> bool:
        """The call's timeout passed: drop it if no thread took it yet, else mark it abandoned
        (its thread is replaced, its result ignored). False if it finished meanwhile: its
        result stands."""
        wake = None
        with self._mutex:
            if call.state == QUEUED:
                self._queue.remove(call)
                call.state = DROPPED
                return True
            if call.state != RUNNING:
                return False
            call.abandoned = True
            self._stuck += 1
            if self._queue and self._looking == 0:  # the queue may have waited for it
                wake = self._wake_one()
        if wake is not None:
            _wake(wake)
        return True

    def _drain(self) -> None:
        with self._mutex:
            done, self._done = self._done, []
            self._notified = False
        if done:
            self._deliver(done)

    def close(self) -> bool:
        """No more calls: parked threads exit, calls still queued are dropped, threads in a
        handler exit after it. True if no handler is running (then the threads are joined)."""
        with self._mutex:
            self._closing = True
            for call in self._queue:
                call.state = DROPPED
            self._queue.clear()
            parked, self._parked = self._parked, []
            self._looking += len(parked)
            busy = self._busy > 0
            threads = list(self._threads)
        for lock in parked:
            lock.release()
        if not busy:
            for thread in threads:
                if thread is not threading.current_thread():
                    thread.join()
        return not busy

    # -- under the mutex ---------------------------------------------------------------------

    def _wake_one(self) -> threading.Lock | threading.Thread | None:
        """One more thread to look at the queue: a parked thread's lock to release, a new
        thread to start, or None when every thread is in a handler."""
        if self._parked:
            self._looking += 1
            return self._parked.pop()
        if len(self._threads) - self._stuck < self.limit:
            self._looking += 1
            thread = threading.Thread(
                target=self._work, name=f"{self._name}_{next(_names)}", daemon=False
            )
            self._threads.add(thread)
            return thread
        return None

    def _finished(self, call: ThreadCall) -> bool:
        """Hand a finished (or skipped) call to the loop; True if the loop must be told."""
        call.state = FINISHED
        self._done.append(call)
        if self._notified:
            return False
        self._notified = True
        return True

    # -- in the threads ----------------------------------------------------------------------

    def _work(self) -> None:
        mutex = self._mutex
        queue = self._queue
        me = threading.current_thread()
        park = threading.Lock()
        park.acquire()
        call: ThreadCall | None = None
        while True:
            notify = leave = False
            wake: threading.Lock | threading.Thread | None = None
            with mutex:
                if call is None:
                    self._looking -= 1
                else:
                    self._busy -= 1
                    if call.abandoned:
                        self._stuck -= 1
                    notify = self._finished(call)
                    call = None
                while queue:
                    taken = queue.popleft()
                    if taken.stop.cancelled:
                        # Asked to stop (cancel, lost lease, shutdown) before it started.
                        taken.skipped = True
                        notify = self._finished(taken) or notify
                        continue
                    call = taken
                    call.state = RUNNING
                    self._busy += 1
                    if queue and self._looking == 0:
                        wake = self._wake_one()  # the rest must not wait for this handler
                    break
                if call is None:
                    if self._closing:
                        self._threads.discard(me)
                        leave = True
                    else:
                        self._parked.append(park)
            if notify:
                # A closed loop: nobody waits for these any more.
                with contextlib.suppress(RuntimeError):
                    self._loop.call_soon_threadsafe(self._drain)
            if wake is not None:
                _wake(wake)
            if call is None:
                if leave:
                    return
                park.acquire()  # until _wake_one or close releases it
                continue
            try:
                call.value = self._context.copy().run(_invoke, call)
            except BaseException as exc:  # every handler error is the job's outcome
                call.error = exc


def _wake(wake: threading.Lock | threading.Thread) -> None:
    if isinstance(wake, threading.Thread):
        wake.start()
    else:
        wake.release()


def _register_atexit(pool: HandlerThreads) -> None:
    """Parked threads exit when the interpreter does (before it joins non-daemon threads), as
    ``concurrent.futures`` arranges for its own; a worker closes its threads before that."""
    register = getattr(threading, "_register_atexit", None)
    if register is None:  # pragma: no cover - CPython has had it since 3.9
        return
    ref = weakref.ref(pool)

    def close() -> None:
        if (alive := ref()) is not None:
            alive.close()

    register(close)
