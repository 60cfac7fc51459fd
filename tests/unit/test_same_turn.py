"""A task awaiting a :class:`SameTurnFuture` runs its next step inside the loop's callback that
wakes it (an ``asyncio.Future`` runs it one turn later), in its own context and with no
exception being handled; completed from inside a task, or cancelled, it behaves as a future."""

from __future__ import annotations

import asyncio
import contextvars
import sys

import pytest

from pgqueue.db.same_turn import SameTurnFuture

where: contextvars.ContextVar[str] = contextvars.ContextVar("where", default="outside")


def test_a_task_woken_by_a_loop_callback_runs_in_that_callback() -> None:
    async def main() -> list[str]:
        loop = asyncio.get_running_loop()
        steps: list[str] = []
        future: SameTurnFuture[int] = SameTurnFuture(loop=loop)

        async def waiter() -> None:
            where.set("the task")
            value = await future
            steps.append(f"woken with {value} in {where.get()}")
            steps.append(f"handling {sys.exc_info()[1]!r}")

        def callback() -> None:
            try:
                raise LookupError("handled before the wake")
            except LookupError:
                pass
            future.wake(7)
            steps.append("callback returns")

        task = asyncio.create_task(waiter())
        await asyncio.sleep(0)  # the task waits
        loop.call_soon(callback)
        await task
        return steps

    assert asyncio.run(main()) == [
        "woken with 7 in the task",
        "handling None",
        "callback returns",
    ]


def test_an_asyncio_future_wakes_its_task_one_turn_later() -> None:
    """What the test above tells apart: the same callback with a future of asyncio's."""

    async def main() -> list[str]:
        loop = asyncio.get_running_loop()
        steps: list[str] = []
        future: asyncio.Future[int] = loop.create_future()

        async def waiter() -> None:
            steps.append(f"woken with {await future}")

        def callback() -> None:
            future.set_result(7)
            steps.append("callback returns")

        task = asyncio.create_task(waiter())
        await asyncio.sleep(0)
        loop.call_soon(callback)
        await task
        return steps

    assert asyncio.run(main()) == ["callback returns", "woken with 7"]


def test_a_failure_is_raised_where_the_task_awaits() -> None:
    async def main() -> None:
        loop = asyncio.get_running_loop()
        future: SameTurnFuture[int] = SameTurnFuture(loop=loop)
        loop.call_soon(lambda: future.wake(exc=LookupError("gone")))
        await future

    with pytest.raises(LookupError, match="gone"):
        asyncio.run(main())


def test_woken_from_inside_a_task_the_waiter_runs_later() -> None:
    """A task cannot run another one's step: the wake-up is scheduled as a future's."""

    async def main() -> list[str]:
        loop = asyncio.get_running_loop()
        steps: list[str] = []
        future: SameTurnFuture[int] = SameTurnFuture(loop=loop)

        async def waiter() -> None:
            steps.append(f"woken with {await future}")

        task = asyncio.create_task(waiter())
        await asyncio.sleep(0)
        future.wake(3)
        steps.append("waker goes on")
        await task
        return steps

    assert asyncio.run(main()) == ["waker goes on", "woken with 3"]


def test_a_cancelled_task_cancels_its_future() -> None:
    async def main() -> tuple[bool, bool]:
        loop = asyncio.get_running_loop()
        future: SameTurnFuture[int] = SameTurnFuture(loop=loop)
        waiting = asyncio.create_task(_await(future))
        await asyncio.sleep(0)
        waiting.cancel("stop")
        with pytest.raises(asyncio.CancelledError, match="stop"):
            await waiting
        return future.cancelled(), asyncio.isfuture(future)

    assert asyncio.run(main()) == (True, True)


async def _await(future: SameTurnFuture[int]) -> int:
    return await future


def test_a_done_future_refuses_another_outcome() -> None:
    async def main() -> int:
        future: SameTurnFuture[int] = SameTurnFuture(loop=asyncio.get_running_loop())
        future.set_result(1)
        assert not future.cancel()
        with pytest.raises(asyncio.InvalidStateError):
            future.wake(2)
        return await future

    assert asyncio.run(main()) == 1
