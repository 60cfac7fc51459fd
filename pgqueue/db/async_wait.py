"""Waiting on the event loop for a pooled async connection's answer, without a timer per wait.

psycopg drives every statement as a generator that says what the socket must become (readable,
writable) before it can go on, and ``AsyncConnection.wait`` waits for that on the event loop.
Its wait arms a timer (``call_later``, cancelled when the answer comes) beside the socket's
reader, at every wait: a wake-up every 0.1 s that only a blocking ``select`` needs (to let
Ctrl-C in; the event loop gets signals on its own). On a single enqueue the timer, the
readiness poll before it and their bookkeeping in the loop were about 30 us of a call's CPU,
a sixth of the async call's whole cost and what made it slower than the sync one.

:class:`LeanWaits` waits for a readable socket with the reader alone (one future, one
``add_reader``). Everything else goes to psycopg's own wait, resumed
where the lean one stopped (:class:`_Resumed`): a wait with a timeout, a socket that must
become writable (a large statement or COPY filling the socket's buffer), and an interruption
(a cancelled task, Ctrl-C), for which psycopg cancels the statement on the server before the
interruption goes on, as it always does.

The socket stays registered with the loop from one wait to the next (:meth:`LeanWaits._watch`):
adding and removing the reader per statement (two ``epoll_ctl`` and the loop's bookkeeping
of a registration) was about 20 us of an async single enqueue's CPU. A registration left
behind after its connection closed would be a hazard: a new connection given the same
descriptor number would never be watched (the loop believes it already is) and its first
statement would wait forever. So the watch is taken away (:meth:`LeanWaits._unwatch`) before
anything else touches the socket or ends it: before a wait handed to psycopg (whose own
reader replaces ours, and whose cancellation may close the connection), after a wait failed
(the connection may be broken, and a pool drops a broken connection without closing it),
in :meth:`LeanWaits.close` (every pool's way of ending a connection: its close, a failed
check, ``max_lifetime``, a drain), and when the socket becomes readable while nothing waits
on it (a notice, or the server closing an idle connection: the loop would otherwise call
back at every turn). While watched, the loop holds the connection (the reader's callback is
one of its methods), so it is never closed by garbage collection with its descriptor still
registered; a loop that closes takes its registrations with it.

The reader's callback reads the answer in the loop's turn that saw it, and wakes the waiting
task in that same turn (:func:`pgqueue.db.same_turn.wake`): a future completed the ordinary way
ran the task one turn later, a second ``epoll_wait`` and round of the loop's bookkeeping per
statement (a statement answered now costs the loop one turn, as the blocking driver one
``poll``).
"""

from __future__ import annotations

import asyncio
from collections.abc import Generator
from typing import Any, TypeVar

import psycopg
from psycopg.waiting import Ready, Wait

from pgqueue.db import same_turn

RV = TypeVar("RV")

# psycopg's own wait's interval (seconds), for the waits handed to it.
_INTERVAL = 0.1


class LeanWaits(psycopg.AsyncConnection[Any]):
    """An async connection whose waits for an answer are the event loop's reader alone,
    registered once for many statements (see the module docstring)."""

    # The loop watching the socket (None: not watched) and the descriptor it watches; the
    # statement's generator the reader drives and the future its task awaits (None between
    # waits).
    _watcher: asyncio.AbstractEventLoop | None = None
    _watched: int = -1
    _gen: Generator[Wait, Any, Any] | None = None
    _waits: Wait = Wait.R
    _waiter: asyncio.Future[tuple[Wait | None, Any]] | None = None

    async def wait(
        self,
        gen: Generator[Wait, Any, RV],
        interval: float = _INTERVAL,
        timeout: float | None = None,
    ) -> RV:
        if timeout is not None:
            self._unwatch()
            return await super().wait(gen, interval, timeout)
        try:
            state = next(gen)
        except StopIteration as done:
            return done.value  # type: ignore[no-any-return]
        if state != Wait.R:
            self._unwatch()
            return await super().wait(_Resumed(gen, state), interval)
        loop = asyncio.get_running_loop()
        if self._watcher is not loop:
            self._watch(loop)
        self._gen, self._waits = gen, Wait.R
        self._waiter = waiter = loop.create_future()
        try:
            answered, value = await waiter
        except (asyncio.CancelledError, KeyboardInterrupt) as interrupted:
            waits = self._waits if self._gen is gen else _unfinished(waiter)
            if waits is None:  # the statement ended first: nothing to cancel
                if self.broken:
                    self._unwatch()
                raise
            # psycopg's handler: the statement is cancelled on the server, its answer read.
            self._gen = None
            self._unwatch()
            return await super().wait(_Resumed(gen, waits, interrupted), interval)
        except BaseException:
            self._unwatch()  # the connection may be broken: its pool may drop it unclosed
            raise
        finally:
            self._waiter = None
            if self._gen is gen:
                self._gen = None
        if answered is None:
            return value  # type: ignore[no-any-return]
        self._unwatch()
        return await super().wait(_Resumed(gen, answered), interval)

    async def close(self) -> None:
        self._unwatch()
        await super().close()

    def _watch(self, loop: asyncio.AbstractEventLoop) -> None:
        """Register the socket with ``loop`` until :meth:`_unwatch`."""
        self._unwatch()
        fileno = self.pgconn.socket
        loop.add_reader(fileno, self._readable)
        self._watcher, self._watched = loop, fileno

    def _unwatch(self) -> None:
        loop, self._watcher = self._watcher, None
        if loop is not None and not loop.is_closed():
            loop.remove_reader(self._watched)

    def _readable(self) -> None:
        """The socket has something to read: the statement's generator reads it here, in the
        loop's turn that saw it (read later, by the waiting task, the same bytes would still
        be on the socket at the loop's next look and call this again for nothing); its task
        is woken when the generator is done or needs something other than a readable socket."""
        gen, waiter = self._gen, self._waiter
        if gen is None or waiter is None or waiter.done():
            if waiter is None:
                # Nothing waits: whatever arrived is read by the next statement, which
                # watches again (the loop would otherwise call back at every turn until then).
                self._unwatch()
            return
        # (The generator's own code may cancel the waiting task, and with it ``waiter``.)
        error: BaseException | None = None
        try:
            state = gen.send(Ready.R)
        except StopIteration as done:
            outcome: tuple[Wait | None, Any] = (None, done.value)
        except OSError as exc:  # as psycopg says it
            outcome, error = (None, None), psycopg.OperationalError("connection socket closed")
            error.__cause__ = exc
        except Exception as exc:
            outcome, error = (None, None), exc
        else:
            if state == Wait.R:
                return
            self._waits = state  # for the task, if it was cancelled meanwhile
            if waiter.done():
                return
            outcome = (state, None)
        self._gen = None
        if not waiter.done():
            # The task's next step runs now, in this turn of the loop (out of the handlers
            # above: it must not see their exception as the one being handled).
            same_turn.wake(waiter, outcome, error)


def _unfinished(waiter: asyncio.Future[tuple[Wait | None, Any]]) -> Wait | None:
    """What a statement the reader drove but did not finish waits for (its task interrupted
    before it took it over), or None: it ended (answered, failed or never woken)."""
    if not waiter.done() or waiter.cancelled() or waiter.exception() is not None:
        return None
    state: Wait | None = waiter.result()[0]
    return state


class _Resumed(Generator[Wait, Any, RV]):
    """A statement's generator that a lean wait already drove, handed to psycopg's own wait:
    its first step raises the interruption the lean wait met, if any, and then says again
    what the generator waits for; the next steps are the generator's."""

    __slots__ = ("_gen", "_interrupted", "_state")

    def __init__(
        self,
        gen: Generator[Wait, Any, RV],
        state: Wait,
        interrupted: BaseException | None = None,
    ) -> None:
        self._gen = gen
        self._state: Wait | None = state
        self._interrupted = interrupted

    def __next__(self) -> Wait:
        interrupted = self._interrupted
        if interrupted is not None:
            self._interrupted = None
            raise interrupted
        state = self._state
        if state is not None:
            self._state = None
            return state
        return next(self._gen)

    def send(self, value: Any) -> Wait:
        self._state = None
        return self._gen.send(value)

    def throw(self, *args: Any) -> Wait:
        return self._gen.throw(*args)

    def close(self) -> None:
        self._gen.close()
