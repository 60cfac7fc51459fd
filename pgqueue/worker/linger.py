"""When a fetcher that ran short of work keeps polling instead of waiting for a NOTIFY.

A worker whose claim comes back short registers in ``pgqueue.idle_workers`` and waits for a
NOTIFY: producers notify while such a row exists. But PostgreSQL lets one notifying transaction
commit at a time (a database-wide lock held from its pre-commit through its commit's WAL flush),
so while several producers enqueue one job per transaction at a steady rate, they queue for
that lock and fall far behind the rate they were asked for; and workers that keep up with them
are registered between every two jobs, so producers keep notifying.

So a worker that sees work arriving fast from several producers lingers: it stays unregistered
and claims again on a short poll interval, and producers stop notifying once no worker is
registered. Work arrives fast when a claim comes back full (a backlog), or when the last
:attr:`Linger.notify_count` notifications for the worker's queues came at
:attr:`Linger.notify_rate` a second or more and from more than one backend (every listening
worker receives every notification, so this sees the notifying commits of all producers). One
producer never waits for another's notifying commit, so a single producer keeps the NOTIFY
path at any rate, and so does a trickle from many (their commits seldom overlap); there a NOTIFY
wakes a worker sooner than a poll would find the job.

While lingering, the interval is :attr:`Linger.first` after a claim that found jobs and doubles
after each one that found none, up to :attr:`Linger.cap`. When no claim of this worker found a
job for :attr:`Linger.window` seconds, the lingering ends and the worker registers as before
(with the handshake of migration 0008), so once a queue goes quiet a job wakes a worker by
NOTIFY again.

The settings are class attributes: tests change them on the class.
"""

from __future__ import annotations

import time
from collections import deque
from collections.abc import Callable


class Linger:
    #: Seconds to the next claim after one that found jobs...
    first = 0.001
    #: ... doubling after each that found none, up to this.
    cap = 0.016
    #: Lingering ends when no claim found a job for this many seconds.
    window = 1.0
    #: Notifications a second (from more than one backend) that start lingering...
    notify_rate = 100.0
    #: ... over the last this many notifications.
    notify_count = 20

    def __init__(self, clock: Callable[[], float] = time.monotonic) -> None:
        self._clock = clock
        #: (arrived, sending backend's pid) of the last notifications.
        self._notified: deque[tuple[float, int]] = deque(maxlen=self.notify_count)
        #: When a claim last found jobs, while lingering (None: not lingering).
        self._found_at: float | None = None
        self._interval = self.first

    @property
    def active(self) -> bool:
        """Lingering: claim again after :attr:`interval`, do not register for notifications."""
        if self._found_at is not None and self._clock() - self._found_at >= self.window:
            self._found_at = None
        return self._found_at is not None

    @property
    def interval(self) -> float:
        """Seconds until the next claim while lingering."""
        return self._interval

    def notified(self, pid: int) -> None:
        """A notification for one of the worker's queues arrived, sent by backend ``pid``."""
        now = self._clock()
        self._notified.append((now, pid))
        if (
            len(self._notified) == self._notified.maxlen
            and now - self._notified[0][0] <= self.notify_count / self.notify_rate
            and any(other != pid for _, other in self._notified)
        ):
            self._start(now)

    def claimed(self, jobs: int, *, full: bool) -> None:
        """A claim that no limit held back came back with ``jobs`` jobs; ``full``: it filled
        every free place."""
        if full:
            self._start(self._clock())
        elif not self.active:
            return
        elif jobs:
            self._found_at = self._clock()
            self._interval = self.first
        else:
            self._interval = min(self.cap, self._interval * 2)

    def _start(self, now: float) -> None:
        if not self.active:
            self._interval = self.first
        self._found_at = now
