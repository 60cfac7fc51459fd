"""Waiting for room in a bounded queue (``wait_if_full``), the same for sync and async writes.

A full queue refuses a write without touching the caller's transaction (the statement that
finds it full runs in a savepoint there), so waiting for room is a plain retry of the whole
write, with a pause in between during which the pooled connection is given back::

    room = Room(seconds)
    while True:
        with room.attempt():
            return write()
        time.sleep(room.pause())  # or await asyncio.sleep(room.pause())
"""

from __future__ import annotations

import time
from types import TracebackType

from pgqueue.errors import QueueFullError
from pgqueue.rules.options import to_timedelta

_LONGEST_PAUSE = 1.0


class Room:
    """The attempts of one write: how long to pause after each refusal, until when."""

    __slots__ = ("_deadline", "_pause", "_refused")

    def __init__(self, seconds: float | None) -> None:
        if seconds is not None:
            # A job's option was checked already; enqueue_many's argument is checked here, as
            # the option is, before the first attempt (NaN would never run out).
            seconds = to_timedelta(seconds, "wait_if_full").total_seconds()
        self._deadline = time.monotonic() + (seconds or 0.0)
        self._pause = 0.01  # doubled before each pause: 20 ms, 40 ms, ... up to 1 s
        self._refused: QueueFullError | None = None

    def attempt(self) -> Room:
        """A context for one attempt: a :class:`~pgqueue.QueueFullError` in it is kept for
        :meth:`pause` (any other error goes through)."""
        self._refused = None
        return self

    def __enter__(self) -> None:
        return None

    def __exit__(
        self, kind: type[BaseException] | None, error: BaseException | None, _: TracebackType | None
    ) -> bool:
        if isinstance(error, QueueFullError):
            self._refused = error
            return True
        return False

    def pause(self) -> float:
        """Seconds to wait before the next attempt; raises the last refusal once the time
        given is up."""
        refused = self._refused
        assert refused is not None, "pause() follows an attempt the queue refused"
        remaining = self._deadline - time.monotonic()
        if remaining <= 0:
            raise refused
        self._pause = min(self._pause * 2, _LONGEST_PAUSE)
        return min(self._pause, remaining)
