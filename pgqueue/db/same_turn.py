"""A future whose waiting task can be woken in the very turn of the event loop that completes it.

An ``asyncio.Future`` never runs its callbacks when it completes: it schedules them
(``call_soon``), so a task waiting on a future that a reader's callback completes runs one turn of
the loop later. That turn is a second ``epoll_wait``, the selector's and the loop's bookkeeping,
and a handle made and run, for every statement an async connection waits for: a statement
answered costs two turns where the blocking driver makes one ``poll``. :class:`SameTurnFuture`
keeps the future protocol asyncio's tasks speak (``_asyncio_future_blocking``, ``get_loop``,
``add_done_callback``, ``result``, ``cancel``: any awaitable that speaks it can be awaited by a
task) and adds :meth:`SameTurnFuture.wake`: complete it and run its waiter's step now, from the
loop's callback that saw the answer, in the waiter's own context. Everything else (a
cancellation, a completion from inside a task) schedules the callbacks as a future does.
"""

from __future__ import annotations

import asyncio
import contextvars
from collections.abc import Callable, Generator
from typing import Any, Generic, TypeVar

T = TypeVar("T")

_PENDING, _RESULT, _ERROR, _CANCELLED = range(4)

Callback = Callable[[Any], object]


class SameTurnFuture(Generic[T]):
    """A future of ``loop`` (see the module docstring); awaited by one task at a time."""

    # asyncio's mark of a future (asyncio.isfuture reads it on the class; a task sets it on
    # the instance while it waits).
    _asyncio_future_blocking = False

    def __init__(self, loop: asyncio.AbstractEventLoop) -> None:
        self._loop = loop
        self._state = _PENDING
        self._value: Any = None
        self._callbacks: list[tuple[Callback, contextvars.Context]] = []

    def get_loop(self) -> asyncio.AbstractEventLoop:
        return self._loop

    def add_done_callback(
        self, fn: Callback, *, context: contextvars.Context | None = None
    ) -> None:
        if context is None:
            context = contextvars.copy_context()
        if self._state != _PENDING:
            self._loop.call_soon(fn, self, context=context)
        else:
            self._callbacks.append((fn, context))

    def remove_done_callback(self, fn: Callback) -> int:
        kept = [(f, c) for f, c in self._callbacks if f != fn]
        removed = len(self._callbacks) - len(kept)
        self._callbacks = kept
        return removed

    def done(self) -> bool:
        return self._state != _PENDING

    def cancelled(self) -> bool:
        return self._state == _CANCELLED

    def result(self) -> T:
        if self._state == _RESULT:
            return self._value  # type: ignore[no-any-return]
        if self._state == _PENDING:
            raise asyncio.InvalidStateError("Result is not ready.")
        raise self._value

    def exception(self) -> BaseException | None:
        if self._state == _PENDING:
            raise asyncio.InvalidStateError("Exception is not set.")
        if self._state == _CANCELLED:
            raise self._value
        return self._value if self._state == _ERROR else None

    def cancel(self, msg: Any | None = None) -> bool:
        if self._state != _PENDING:
            return False
        self._complete(_CANCELLED, asyncio.CancelledError(*(() if msg is None else (msg,))))
        self._schedule()
        return True

    def set_result(self, value: T) -> None:
        """Complete it; its callbacks run in the loop's next turn (as a future's)."""
        self._complete(_RESULT, value)
        self._schedule()

    def set_exception(self, exc: BaseException) -> None:
        """Fail it; its callbacks run in the loop's next turn (as a future's)."""
        self._complete(_ERROR, exc)
        self._schedule()

    def wake(self, value: T | None = None, exc: BaseException | None = None) -> None:
        """Complete it with ``value`` (or fail it with ``exc``) and run its callbacks (the
        waiting task's next step) now. Only from one of the loop's own callbacks, outside any
        task: from inside a task (which cannot run another one) they are scheduled instead."""
        if exc is None:
            self._complete(_RESULT, value)
        else:
            self._complete(_ERROR, exc)
        if asyncio.current_task(self._loop) is not None:
            self._schedule()
            return
        callbacks, self._callbacks = self._callbacks, []
        for fn, context in callbacks:
            context.run(fn, self)

    def _complete(self, state: int, value: Any) -> None:
        if self._state != _PENDING:
            raise asyncio.InvalidStateError("the future is already done")
        self._state, self._value = state, value

    def _schedule(self) -> None:
        callbacks, self._callbacks = self._callbacks, []
        for fn, context in callbacks:
            self._loop.call_soon(fn, self, context=context)

    def __await__(self) -> Generator[Any, None, T]:
        if self._state == _PENDING:
            self._asyncio_future_blocking = True
            yield self  # the task adds its wake-up and waits
        return self.result()

    __iter__ = __await__
