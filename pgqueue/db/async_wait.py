"""Waiting on the event loop for a pooled async connection's answer, without a timer per wait.

psycopg drives every statement as a generator that says what the socket must become (readable,
writable) before it can go on, and ``AsyncConnection.wait`` waits for that on the event loop.
Its wait arms a timer (``call_later``, cancelled when the answer comes) beside the socket's
reader, at every wait: a wake-up every 0.1 s that only a blocking ``select`` needs (to let
Ctrl-C in; the event loop gets signals on its own). On a single enqueue the timer, the
readiness poll before it and their bookkeeping in the loop were about 30 us of a call's CPU,
a sixth of the async call's whole cost and what made it slower than the sync one.

:class:`LeanWaits` waits for a readable socket with the reader alone (one future, one
``add_reader`` and ``remove_reader``). Everything else goes to psycopg's own wait, resumed
where the lean one stopped (:class:`_Resumed`): a wait with a timeout, a socket that must
become writable (a large statement or COPY filling the socket's buffer), and an interruption
(a cancelled task, Ctrl-C), for which psycopg cancels the statement on the server before the
interruption goes on, as it always does.
"""

from __future__ import annotations

import asyncio
from collections.abc import Generator
from typing import Any, TypeVar

import psycopg
from psycopg.waiting import Ready, Wait

RV = TypeVar("RV")

# psycopg's own wait's interval (seconds), for the waits handed to it.
_INTERVAL = 0.1


class LeanWaits(psycopg.AsyncConnection[Any]):
    """An async connection whose waits for an answer are the event loop's reader alone (see
    the module docstring)."""

    async def wait(
        self,
        gen: Generator[Wait, Any, RV],
        interval: float = _INTERVAL,
        timeout: float | None = None,
    ) -> RV:
        if timeout is not None:
            return await super().wait(gen, interval, timeout)
        try:
            state = next(gen)
        except StopIteration as done:
            return done.value  # type: ignore[no-any-return]
        if state != Wait.R:
            return await super().wait(_Resumed(gen, state), interval)
        loop = asyncio.get_running_loop()
        fileno = self.pgconn.socket
        try:
            while state == Wait.R:
                readable = loop.create_future()
                loop.add_reader(fileno, _wake, readable)
                try:
                    await readable
                finally:
                    loop.remove_reader(fileno)
                state = gen.send(Ready.R)
        except StopIteration as done:
            return done.value  # type: ignore[no-any-return]
        except (asyncio.CancelledError, KeyboardInterrupt) as interrupted:
            # psycopg's handler: the statement is cancelled on the server, its answer read.
            return await super().wait(_Resumed(gen, state, interrupted), interval)
        except OSError as exc:  # as psycopg says it
            raise psycopg.OperationalError("connection socket closed") from exc
        return await super().wait(_Resumed(gen, state), interval)


def _wake(readable: asyncio.Future[None]) -> None:
    if not readable.done():  # (the reader may fire again before its waiter runs)
        readable.set_result(None)


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
