"""A future whose waiting task can be woken in the very turn of the event loop that completes it.

An ``asyncio.Future`` never runs its callbacks when it completes: it schedules them
(``call_soon``), so a task waiting on a future that a reader's callback completes runs one turn of
the loop later. That turn is a second ``epoll_wait``, the selector's and the loop's bookkeeping,
and a handle made and run, for every statement an async connection waits for: a statement
answered cost two turns where the blocking driver makes one ``poll``.

:class:`SameTurnFuture` is an ``asyncio.Future`` (everything a future does, done by asyncio's
own, C-implemented future) with one more way to complete it, :meth:`SameTurnFuture.wake`: its
callbacks (the waiting task's wake-up) are taken off first, and run at once, each in the context
it was added with, from the loop's callback that saw the answer.
"""

from __future__ import annotations

import asyncio
from typing import TypeVar

T = TypeVar("T")


class SameTurnFuture(asyncio.Future[T]):
    """An ``asyncio.Future`` that :meth:`wake` completes with its callbacks run now."""

    __slots__ = ()

    def wake(self, value: T | None = None, exc: BaseException | None = None) -> None:
        """Complete it with ``value`` (or fail it with ``exc``) and run its callbacks (the
        waiting task's next step) now. Only from one of the loop's own callbacks, outside any
        task: from inside a task (which cannot run another one's step) they are scheduled, as
        a future's are."""
        # (The future's own list of (callback, context) pairs: None when it has none.)
        callbacks = self._callbacks
        inline = callbacks and asyncio.current_task(self.get_loop()) is None
        if inline:
            for fn, _ in callbacks:
                self.remove_done_callback(fn)
        if exc is None:
            self.set_result(value)  # type: ignore[arg-type]
        else:
            self.set_exception(exc)
        if inline:
            for fn, context in callbacks:
                context.run(fn, self)
