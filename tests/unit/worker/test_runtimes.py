"""The executor's runtimes: one chosen per task when the executor is built, one-job and batch
attempts alike going through it (no database: outcomes are collected as the completer would
get them)."""

from __future__ import annotations

import asyncio
import threading
from collections.abc import Callable, Iterator
from datetime import UTC, datetime
from typing import Any

import pytest

from pgqueue import PgQueue
from pgqueue.handler.batch import Item
from pgqueue.handler.job_context import ClaimedJob
from pgqueue.worker.child_process import ChildSettings
from pgqueue.worker.child_runtime import ChildRuntime
from pgqueue.worker.executor import Executor
from pgqueue.worker.outcome import Outcome
from pgqueue.worker.runtimes import LoopRuntime, ThreadRuntime

NOW = datetime(2026, 1, 1, tzinfo=UTC)
release = threading.Event()
tidied: list[bool] = []


@pytest.fixture
def app() -> Iterator[PgQueue]:
    pgq = PgQueue("postgresql://nobody@localhost/none")

    @pgq.task(name="aio")
    async def aio() -> int:
        return 1

    @pgq.task(name="sync")
    def sync() -> int:
        return 2

    @pgq.task(name="stuck", timeout=0.05)
    def stuck() -> None:
        release.wait(5)

    @pgq.task(name="pending")
    async def pending() -> None:
        await asyncio.Event().wait()

    @pgq.task(name="tidies")
    async def tidies() -> None:
        try:
            await asyncio.Event().wait()
        except asyncio.CancelledError:
            await asyncio.sleep(0.05)  # its cleanup: writing that it stopped, say
            tidied.append(True)
            raise

    @pgq.task(name="sums", batch_size=3, batch_wait=0.01)
    def sums(items: list[Item[Any]]) -> list[int]:
        return [n for n, _ in enumerate(items)]

    yield pgq
    pgq.close()


async def until(condition: Callable[[], bool]) -> None:
    for _ in range(500):
        if condition():
            return
        await asyncio.sleep(0.01)


def job(job_id: int, task: str) -> ClaimedJob:
    return ClaimedJob(job_id, "default", task, {}, 1, 3, 1, 0, NOW, NOW)


def test_each_task_gets_its_runtime_once(app):
    threads = Executor(app.tasks, 2, "w", lambda o: None)
    assert isinstance(threads.runtime["aio"], LoopRuntime)
    assert isinstance(threads.runtime["sync"], ThreadRuntime)
    assert threads.runtime["sums"] is threads.runtime["sync"]
    children = Executor(app.tasks, 2, "w", lambda o: None, children=ChildSettings("x:pgq"))
    assert isinstance(children.runtime["aio"], LoopRuntime)
    assert isinstance(children.runtime["sync"], ChildRuntime)
    assert children.runtime["sums"] is children.runtime["sync"]
    assert children.shutdown_threads()


def test_one_job_and_batch_attempts_go_through_their_runtimes(app):
    outcomes: list[Outcome] = []

    async def main() -> None:
        executor = Executor(app.tasks, 4, "w", outcomes.append)
        executor.accept([job(1, "aio"), job(2, "sync"), *(job(n, "sums") for n in (3, 4, 5))])
        await until(lambda: len(outcomes) == 5)
        assert executor.idle() and executor.slots_busy() == 0
        assert executor.shutdown_threads()

    asyncio.run(main())
    assert sorted((o.job.id, o.kind, o.result) for o in outcomes) == [
        (1, "ack", None),
        (2, "ack", None),
        (3, "ack", None),
        (4, "ack", None),
        (5, "ack", None),
    ]


def test_a_thread_past_its_timeout_is_abandoned_and_an_async_one_cancelled(app):
    outcomes: list[Outcome] = []

    async def main() -> None:
        executor = Executor(app.tasks, 4, "w", outcomes.append)
        executor.accept([job(1, "stuck"), job(2, "pending")])
        await asyncio.sleep(0.2)
        assert executor.abandoned == 1 and [o.job.id for o in outcomes] == [1]
        assert executor.stop_job(2, "cancelled")
        await asyncio.sleep(0.05)
        release.set()
        await until(lambda: executor.abandoned == 0)
        assert executor.abandoned == 0
        assert executor.shutdown_threads()

    asyncio.run(main())
    by_id = {o.job.id: o for o in outcomes}
    assert by_id[1].kind == "error" and "timed out after 0.05s (thread abandoned)" in (
        by_id[1].summary or ""
    )
    assert by_id[2].kind == "cancelled"


def test_a_cancel_heard_twice_does_not_interrupt_the_handlers_cleanup(app):
    """The cancel's NOTIFY and a heartbeat reading cancel_requested both stop the job: the
    second must not cancel the handler again while it cleans up after the first."""
    outcomes: list[Outcome] = []
    tidied.clear()

    async def main() -> None:
        executor = Executor(app.tasks, 4, "w", outcomes.append)
        executor.accept([job(1, "tidies")])
        await asyncio.sleep(0.02)
        assert executor.stop_job(1, "cancelled")
        await asyncio.sleep(0.01)
        assert executor.stop_job(1, "cancelled")  # heard again, mid-cleanup
        await until(lambda: bool(outcomes))

    asyncio.run(main())
    assert tidied == [True]
    assert [o.kind for o in outcomes] == ["cancelled"]
