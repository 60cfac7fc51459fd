"""Waking a future's waiting task in the very turn of the event loop that completes the future.

An ``asyncio.Future`` never runs its callbacks when it completes: it schedules them
(``call_soon``), so a task waiting on a future that a reader's callback completes runs one turn of
the loop later. That turn is a second ``epoll_wait``, the selector's and the loop's bookkeeping,
and a handle made and run, for every statement an async connection waits for: a statement
answered cost two turns where the blocking driver makes one ``poll``.

:func:`wake` completes a future and runs its callbacks (the waiting task's wake-up) at once,
each in the context it was added with, from the loop's callback that saw the answer: they are
taken off the future first (``remove_done_callback``), so that completing it schedules nothing.
The future stays asyncio's own (C-implemented), which a task awaits on its fastest path.
Its callbacks are read from ``Future._callbacks``, which asyncio does not document (both its
implementations have it, 3.11 to 3.14); without it, :func:`wake` completes the future as usual.
"""

from __future__ import annotations

import asyncio
import contextvars
from typing import Any


def wake(future: asyncio.Future[Any], value: Any = None, exc: BaseException | None = None) -> None:
    """Complete ``future`` with ``value`` (or fail it with ``exc``) and run its callbacks now.
    Only from one of the loop's own callbacks, outside any task: from inside a task (which
    cannot run another one's step) they are scheduled, as completing a future schedules them."""
    # The future's own (callback, context) pairs (None when it has none). Not public API: a
    # Python whose futures do not show them gets the ordinary completion, a turn later.
    # A copy: the pure-Python future's is its own list, which remove_done_callback empties.
    callbacks: list[tuple[Any, contextvars.Context]] = list(
        getattr(future, "_callbacks", None) or ()
    )
    inline = bool(callbacks) and asyncio.current_task(future.get_loop()) is None
    if inline:
        for fn, _ in callbacks:
            future.remove_done_callback(fn)
    if exc is None:
        future.set_result(value)
    else:
        future.set_exception(exc)
    if inline:
        for fn, context in callbacks:
            context.run(fn, future)
