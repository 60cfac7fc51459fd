"""The handler threads of sync jobs (pgqueue/worker/threads.py), without a database: calls
waiting behind a long handler, per-call outcomes in batches, contexts, timeouts, stops, close."""

from __future__ import annotations

import asyncio
import contextvars
import threading
from collections.abc import Callable, Coroutine
from datetime import UTC, datetime
from typing import Any

import pytest

from pgqueue import current_job
from pgqueue.handler.job_context import ClaimedJob, JobContext
from pgqueue.worker.threads import DROPPED, FINISHED, RUNNING, HandlerThreads, ThreadCall

#: Only a guard against hanging forever: nothing here is timed.
GUARD = 30.0

label: contextvars.ContextVar[str] = contextvars.ContextVar("label")


def context(n: int) -> JobContext:
    now = datetime.now(UTC)
    return JobContext(ClaimedJob(n, "default", "t", {}, 1, 3, n, 0, now, now), "worker-1")


class Delivered:
    """What the pool handed back, batch by batch."""

    def __init__(self) -> None:
        self.batches: list[list[ThreadCall]] = []
        self.changed = asyncio.Event()

    def __call__(self, calls: list[ThreadCall]) -> None:
        assert threading.current_thread() is threading.main_thread()  # on the loop
        self.batches.append(calls)
        self.changed.set()

    @property
    def calls(self) -> list[ThreadCall]:
        return [call for batch in self.batches for call in batch]

    async def until(self, predicate: Callable[[], bool]) -> None:
        async def wait() -> None:
            while not predicate():
                self.changed.clear()
                await self.changed.wait()

        await asyncio.wait_for(wait(), GUARD)


def run(test: Callable[[], Coroutine[Any, Any, None]]) -> None:
    asyncio.run(test())


def pool(limit: int, delivered: Delivered, name: str = "test-handler") -> HandlerThreads:
    return HandlerThreads(
        limit,
        delivered,
        loop=asyncio.get_running_loop(),
        context=contextvars.copy_context(),
        name=name,
    )


def call(n: int, func: Callable[..., Any], *args: Any) -> ThreadCall:
    return ThreadCall(func, list(args), {}, context(n), owner=n)


def blocker() -> tuple[threading.Event, threading.Event, Callable[[], str]]:
    """A handler that runs until released, and an event set once it is running."""
    running, release = threading.Event(), threading.Event()

    def handler() -> str:
        running.set()
        assert release.wait(GUARD)
        return threading.current_thread().name

    return running, release, handler


def test_short_calls_do_not_wait_behind_a_long_one():
    async def test() -> None:
        delivered = Delivered()
        threads = pool(3, delivered)
        # Start all three threads and let them park (a parked thread is woken without the
        # loop waiting for it, unlike a thread that starts).
        gate = threading.Barrier(3, timeout=GUARD)
        warm = [call(n, gate.wait) for n in range(3)]
        for c in warm:
            threads.submit(c)
        await delivered.until(lambda: len(delivered.calls) == 3)
        delivered.batches.clear()
        busy_running, busy_release, busy_handler = blocker()
        busy = call(0, busy_handler)
        threads.submit(busy)
        assert await asyncio.to_thread(busy_running.wait, GUARD)
        long_running, long_release, long_handler = blocker()
        long_call = call(1, long_handler)
        short = [call(n, lambda n=n: n) for n in range(2, 42)]
        # Queued in one go, the long one first: one thread is woken for them; the one that
        # takes the long call must not leave the rest waiting behind it.
        for c in [long_call, *short]:
            threads.submit(c)
        assert await asyncio.to_thread(long_running.wait, GUARD)
        await delivered.until(lambda: len(delivered.calls) == len(short))
        assert busy.state == RUNNING and long_call.state == RUNNING
        assert sorted(c.value for c in delivered.calls) == list(range(2, 42))
        busy_release.set()
        long_release.set()
        await delivered.until(lambda: len(delivered.calls) == len(short) + 2)
        assert threads.close()

    run(test)


def test_a_batch_keeps_every_call_s_own_outcome():
    async def test() -> None:
        delivered = Delivered()
        threads = pool(2, delivered)
        gate = threading.Event()
        all_done = threading.Event()
        count = 60

        def handler(n: int) -> int:
            assert gate.wait(GUARD)
            assert current_job().id == n
            if n == count - 1:
                all_done.set()
            if n % 3 == 1:
                raise ValueError(f"job {n} failed")
            if n % 3 == 2:
                raise SystemExit(n)  # not an Exception: still only this call's outcome
            return n * 10

        calls = [call(n, handler, n) for n in range(count)]
        for c in calls:
            threads.submit(c)
        gate.set()
        # Block the loop until the threads ran everything: the results must come back as
        # one batch, each with its own value or error.
        assert all_done.wait(GUARD)
        while any(c.state != FINISHED for c in calls):
            await asyncio.to_thread(threading.Event().wait, 0.01)
        await delivered.until(lambda: len(delivered.calls) == count)
        for c in calls:
            n = c.owner
            if n % 3 == 0:
                assert (c.value, c.error) == (n * 10, None)
            elif n % 3 == 1:
                assert isinstance(c.error, ValueError) and str(c.error) == f"job {n} failed"
            else:
                assert isinstance(c.error, SystemExit) and c.error.code == n
        assert sorted(c.owner for c in delivered.calls) == list(range(count))
        assert threads.close()

    run(test)


def test_finished_calls_come_back_together_while_the_loop_is_busy():
    async def test() -> None:
        delivered = Delivered()
        threads = pool(4, delivered)
        calls = [call(n, lambda n=n: n) for n in range(50)]
        for c in calls:
            threads.submit(c)
        # The loop does not run until all 50 are finished: one drain takes them all.
        deadline = asyncio.get_running_loop().time() + GUARD
        while any(c.state != FINISHED for c in calls):
            assert asyncio.get_running_loop().time() < deadline
            threading.Event().wait(0.001)
        await delivered.until(lambda: len(delivered.calls) == 50)
        assert len(delivered.batches) == 1
        assert sorted(c.value for c in delivered.batches[0]) == list(range(50))
        assert threads.close()

    run(test)


def test_each_call_sees_its_job_and_the_base_context_but_not_the_previous_call_s_changes():
    async def test() -> None:
        label.set("from the worker")
        delivered = Delivered()
        threads = pool(1, delivered)  # one thread: the calls run one after the other in it

        def first() -> tuple[int, str]:
            seen = label.get()
            label.set("changed by a handler")
            return current_job().id, seen

        def second() -> tuple[int, str]:
            return current_job().id, label.get()

        calls = [call(7, first), call(8, second)]
        for c in calls:
            threads.submit(c)
        await delivered.until(lambda: len(delivered.calls) == 2)
        assert [c.value for c in calls] == [(7, "from the worker"), (8, "from the worker")]
        assert threads.close()

    run(test)


def test_an_abandoned_handler_is_replaced_and_its_late_result_still_comes_back_marked():
    async def test() -> None:
        delivered = Delivered()
        threads = pool(1, delivered)
        running, release, long_handler = blocker()
        stuck = call(0, long_handler)
        threads.submit(stuck)
        assert await asyncio.to_thread(running.wait, GUARD)
        assert threads.abandon(stuck) and stuck.abandoned
        after = call(1, lambda: threading.current_thread().name)
        threads.submit(after)  # the only slot's thread is stuck: a new thread runs this
        await delivered.until(lambda: after in delivered.calls)
        assert stuck.state == RUNNING
        release.set()
        await delivered.until(lambda: stuck in delivered.calls)
        assert stuck.abandoned and stuck.value != after.value  # two different threads
        assert not threads.abandon(stuck)  # finished: nothing to abandon
        assert threads.close()

    run(test)


def test_a_call_that_times_out_while_queued_never_runs():
    async def test() -> None:
        delivered = Delivered()
        threads = pool(1, delivered)
        running, release, long_handler = blocker()
        first = call(0, long_handler)
        threads.submit(first)
        assert await asyncio.to_thread(running.wait, GUARD)
        ran: list[int] = []
        queued = call(1, ran.append, 1)
        threads.submit(queued)
        assert threads.abandon(queued) and queued.state == DROPPED and not queued.abandoned
        release.set()
        await delivered.until(lambda: first in delivered.calls)
        assert not ran and queued not in delivered.calls
        assert threads.close()

    run(test)


def test_a_job_stopped_before_a_thread_takes_it_is_skipped():
    async def test() -> None:
        delivered = Delivered()
        threads = pool(1, delivered)
        running, release, long_handler = blocker()
        first = call(0, long_handler)
        threads.submit(first)
        assert await asyncio.to_thread(running.wait, GUARD)
        ran: list[int] = []
        stopped = call(1, ran.append, 1)
        threads.submit(stopped)
        stopped.ctx.cancel("lease lost")
        release.set()
        await delivered.until(lambda: stopped in delivered.calls)
        assert stopped.skipped and not ran and stopped.value is None
        assert not first.skipped
        assert threads.close()

    run(test)


def test_close_ends_idle_threads_and_says_when_a_handler_still_runs():
    async def test() -> None:
        delivered = Delivered()
        threads = pool(4, delivered, name="test-close")
        running, release, long_handler = blocker()
        busy = call(0, long_handler)
        threads.submit(busy)
        for n in range(1, 9):
            threads.submit(call(n, lambda: None))
        await delivered.until(lambda: len(delivered.calls) == 8)
        assert await asyncio.to_thread(running.wait, GUARD)
        assert not threads.close()  # a handler still runs: not waited for
        with pytest.raises(RuntimeError):
            threads.submit(call(9, lambda: None))
        release.set()
        for thread in [t for t in threading.enumerate() if t.name.startswith("test-close")]:
            await asyncio.to_thread(thread.join, GUARD)
            assert not thread.is_alive()

    run(test)
