"""A task awaiting a future that :func:`same_turn.wake` completes runs its next step inside the
loop's callback that wakes it (completed the ordinary way, it runs one turn later), in its own
context and with no exception being handled; woken from inside a task, it runs later, as usual."""

from __future__ import annotations

import asyncio
import contextvars
import sys

import pytest

from pgqueue.db import same_turn

where: contextvars.ContextVar[str] = contextvars.ContextVar("where", default="outside")


def _steps(complete: str) -> list[str]:
    """What happens when a loop callback completes the future a task awaits."""

    async def main() -> list[str]:
        loop = asyncio.get_running_loop()
        steps: list[str] = []
        future: asyncio.Future[int] = loop.create_future()

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
            if complete == "wake":
                same_turn.wake(future, 7)
            else:
                future.set_result(7)
            steps.append("callback returns")

        task = asyncio.create_task(waiter())
        await asyncio.sleep(0)  # the task waits
        loop.call_soon(callback)
        await asyncio.wait_for(task, 10)  # a task never woken fails the test, not hangs it
        return steps

    return asyncio.run(main())


def test_a_task_woken_by_a_loop_callback_runs_in_that_callback() -> None:
    assert _steps("wake") == ["woken with 7 in the task", "handling None", "callback returns"]


def test_a_future_completed_the_ordinary_way_wakes_its_task_one_turn_later() -> None:
    """What the test above tells apart."""
    assert _steps("set_result") == [
        "callback returns",
        "woken with 7 in the task",
        "handling None",
    ]


def test_a_failure_is_raised_where_the_task_awaits() -> None:
    async def main() -> None:
        loop = asyncio.get_running_loop()
        future: asyncio.Future[int] = loop.create_future()
        loop.call_soon(lambda: same_turn.wake(future, exc=LookupError("gone")))
        await future

    with pytest.raises(LookupError, match="gone"):
        asyncio.run(main())


def test_woken_from_inside_a_task_the_waiter_runs_later() -> None:
    """A task cannot run another one's step: the wake-up is scheduled as a future's."""

    async def main() -> list[str]:
        loop = asyncio.get_running_loop()
        steps: list[str] = []
        future: asyncio.Future[int] = loop.create_future()

        async def waiter() -> None:
            steps.append(f"woken with {await future}")

        task = asyncio.create_task(waiter())
        await asyncio.sleep(0)
        same_turn.wake(future, 3)
        steps.append("waker goes on")
        await task
        return steps

    assert asyncio.run(main()) == ["waker goes on", "woken with 3"]


def test_a_done_future_refuses_another_outcome() -> None:
    async def main() -> int:
        future: asyncio.Future[int] = asyncio.get_running_loop().create_future()
        future.set_result(1)
        with pytest.raises(asyncio.InvalidStateError):
            same_turn.wake(future, 2)
        return await future

    assert asyncio.run(main()) == 1


def test_without_the_futures_callbacks_to_read_it_completes_the_future_as_usual(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """``Future._callbacks`` is not public API: a Python without it wakes the task a turn later,
    as completing the future does, and nothing fails."""
    real = getattr

    def hidden(obj: object, name: str, *default: object) -> object:
        if name == "_callbacks":
            return default[0] if default else None
        return real(obj, name, *default)

    monkeypatch.setattr(same_turn, "getattr", hidden, raising=False)
    assert _steps("wake") == ["callback returns", "woken with 7 in the task", "handling None"]


def test_a_pure_python_future_is_woken_too(monkeypatch: pytest.MonkeyPatch) -> None:
    """asyncio's Python Future (where its C one is missing) keeps its callbacks in its own list,
    which taking them off empties: they are read first, and the task still wakes."""
    import asyncio.futures

    python_future = asyncio.futures._PyFuture  # type: ignore[attr-defined]
    monkeypatch.setattr(
        asyncio.BaseEventLoop, "create_future", lambda loop: python_future(loop=loop)
    )
    assert _steps("wake") == ["woken with 7 in the task", "handling None", "callback returns"]
