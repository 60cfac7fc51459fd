"""The calls of a group commit (:mod:`pgqueue.client.group_commit`) and their group: whether a
commit is in flight, and the calls queued behind it, with the rules for taking the next batch.
The same rules serve a client's threads (under a lock) and one event loop's tasks; the group
commit decides who waits how and who writes.
"""

from __future__ import annotations

import asyncio
import threading
from collections import deque
from contextlib import AbstractContextManager
from typing import Any, Protocol

from pgqueue.rules.job_specs import JobId, JobSpec

#: The most jobs one batch writes, and the most bytes of arguments and metadata (a first job
#: larger than that is written all the same, alone).
MOST_JOBS = 1000
MOST_BYTES = 4 * 1024 * 1024

Outcome = JobId | Exception


class Signal(Protocol):
    """A threading.Event or an asyncio.Event: what a gathering leader waits on."""

    def set(self) -> None: ...

    def clear(self) -> None: ...

    def is_set(self) -> bool: ...


class Call:
    """A call waiting in a group: its job and, once settled, what it gets."""

    __slots__ = ("outcome", "size", "spec")

    def __init__(self, spec: JobSpec) -> None:
        self.spec = spec
        self.size = len(spec.args_json) + len(spec.meta_json or "")
        self.outcome: Outcome | None = None

    @property
    def abandoned(self) -> bool:
        """Its caller stopped waiting (a cancelled task): not written if not yet taken."""
        return False

    def queued(self) -> None:
        """It waits behind a commit in flight (a call that commits at once never does)."""

    def settle(self, outcome: Outcome) -> None:
        self.outcome = outcome

    def result(self) -> JobId:
        outcome = self.outcome
        assert outcome is not None, "a call is settled before its caller reads it"
        if isinstance(outcome, Exception):
            raise outcome
        return outcome


class ThreadCall(Call):
    __slots__ = ("event", "leads")

    def __init__(self, spec: JobSpec) -> None:
        super().__init__(spec)
        #: What its thread waits on, made only when it waits (most calls never do).
        self.event: threading.Event | None = None
        #: Its thread writes the next batch (the commit before it ended).
        self.leads = False

    def queued(self) -> None:
        self.event = threading.Event()

    def settle(self, outcome: Outcome) -> None:
        self.outcome = outcome
        if self.event is not None:  # (a leader's own call is settled by its own thread)
            self.event.set()

    def wake(self) -> None:
        assert self.event is not None, "only a queued call is settled by another"
        self.event.set()

    def wait(self) -> None:
        assert self.event is not None, "only a queued call waits"
        self.event.wait()


class TaskCall(Call):
    __slots__ = ("future", "loop")

    def __init__(self, spec: JobSpec, loop: asyncio.AbstractEventLoop) -> None:
        super().__init__(spec)
        self.loop = loop
        #: What its task awaits, made only when it waits for a writer (a call that commits
        #: at once never does: a future per lone call was a few microseconds of each).
        self.future: asyncio.Future[JobId] | None = None

    @property
    def abandoned(self) -> bool:
        return self.future is not None and self.future.done()

    def queued(self) -> None:
        self.waits()

    def waits(self) -> asyncio.Future[JobId]:
        """Its future (made on first use): settled by the writer of its batch."""
        if self.future is None:
            self.future = self.loop.create_future()
        return self.future

    def settle(self, outcome: Outcome) -> None:
        self.outcome = outcome
        future = self.future
        if future is None or future.done():
            return
        if isinstance(outcome, Exception):
            future.set_exception(outcome)
        else:
            future.set_result(outcome)


class Group:
    """The calls of one group: whether a commit is in flight, and the calls queued behind it
    (the same rules for threads, under a lock, and for one loop's tasks)."""

    __slots__ = ("busy", "gathering", "lock", "queue", "recent", "signal")

    def __init__(self, lock: AbstractContextManager[Any], signal: Signal) -> None:
        self.lock = lock
        self.busy = False
        self.queue: deque[Call] = deque()
        #: How many calls the group's last commit wrote: the callers seen lately.
        self.recent = 1
        #: A leader waits for the callers seen lately (see :meth:`gather`); ``signal`` tells
        #: it they are all there.
        self.gathering = False
        self.signal = signal

    def alone(self) -> bool:
        """True when nothing is in flight and the group's last commit wrote one call (nobody
        came with it to wait for): the caller commits at once, alone, and the group is busy
        until :meth:`next` finds nothing queued. Otherwise the caller :meth:`join` s."""
        with self.lock:
            if self.busy or self.recent > 1:
                return False
            self.busy = True
            return True

    def join(self, call: Call) -> bool:
        """Queue ``call`` behind the commit in flight; True when there is none: the call
        leads (it commits at once, or gathers first: :meth:`gather`), and the group is busy
        until :meth:`next` finds nothing queued."""
        with self.lock:
            if self.busy:
                call.queued()
                self.queue.append(call)
                if self.gathering and len(self.queue) >= self.recent - 1:
                    self.signal.set()
                return False
            self.busy = True
            return True

    def gather(self) -> bool:
        """A leader is about to commit: True when it should wait (up to
        :data:`GATHER_WINDOW`, until ``signal``) for the others that came with it last time.
        Only after a commit of several calls: a lone producer never waits."""
        with self.lock:
            if self.recent <= 1 or len(self.queue) >= self.recent - 1:
                return False
            self.gathering = True
            self.signal.clear()
            return True

    def ungather(self) -> None:
        """The leader stopped gathering without a batch (interrupted)."""
        with self.lock:
            self.gathering = False

    def gathered(self, leader: Call) -> list[Call]:
        """The leader's batch: its call, then the ones queued meanwhile."""
        with self.lock:
            self.gathering = False
            batch = [leader, *self._take()] if self.queue else [leader]
            self.recent = len(batch)
            return batch

    def take(self) -> list[Call]:
        """The next batch: the queued calls in the order they came, up to the limits."""
        with self.lock:
            batch = self._take()
            self.recent = max(1, len(batch))
            return batch

    def _take(self) -> list[Call]:
        batch: list[Call] = []
        size = 0
        queue = self.queue
        while queue and len(batch) < MOST_JOBS:
            call = queue[0]
            if call.abandoned:
                queue.popleft()
                continue
            if batch and size + call.size > MOST_BYTES:
                break
            batch.append(queue.popleft())
            size += call.size
        return batch

    def next(self) -> Call | None:
        """A commit ended: the first call queued (the next batch starts with it; a thread's
        call is marked to lead it, under the lock that :meth:`withdraw` takes), or None and
        the group is idle."""
        with self.lock:
            while self.queue and self.queue[0].abandoned:
                self.queue.popleft()
            if self.queue:
                first = self.queue[0]
                if isinstance(first, ThreadCall):
                    first.leads = True
                return first
            self.busy = False
            return None

    def abort(self) -> list[Call]:
        """The writer stopped (its event loop is closing): the calls still queued, to settle
        with an error; the group is idle again."""
        with self.lock:
            calls = list(self.queue)
            self.queue.clear()
            self.busy = False
            return calls

    def withdraw(self, call: Call) -> bool:
        """A waiting caller gives up (an interrupted thread): ``call`` leaves the queue if it
        is still there. True when it was to write the next batch (someone else must)."""
        with self.lock:
            if call in self.queue:
                self.queue.remove(call)
                return isinstance(call, ThreadCall) and call.leads
            return False
