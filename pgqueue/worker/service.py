"""The one shape every worker service has: a name, a logger, ``run_once()``, a supervised loop.

The loop runs ``run_once()`` every ``interval()`` seconds (jittered, so a fleet of workers does
not synchronise), can be woken early, and survives failures: a database error is retried with
the backoff of the :class:`Outage` the service shares with the others on the same database
(each problem warned about once per outage, and all retry at once when one gets through); any
other exception is logged with its traceback and the service is restarted after a backoff of
its own. The worker never exits because one service failed. The supervisor
(:mod:`pgqueue.worker.supervisor`) starts and stops the services.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import random
import time
from collections.abc import Callable

from pgqueue.rules.log_actions import Action, Seconds, fields
from pgqueue.worker.observer import WorkerObserver
from pgqueue.worker.store import TRANSIENT_ERRORS


def one_line(exc: BaseException) -> str:
    return " ".join(str(exc).split())


class RetryDelay:
    """Exponential backoff with full jitter for reconnect attempts (0.1 s up to ``cap``)."""

    def __init__(self, base: float = 0.1, cap: float = 5.0) -> None:
        self.base = base
        self.cap = cap
        self.failures = 0

    def next(self) -> float:
        self.failures += 1
        return random.uniform(self.base, min(self.cap, self.base * 2**self.failures))

    def reset(self) -> None:
        self.failures = 0

    def bound(self) -> float:
        """The longest delay the next :meth:`next` could draw (before it counts one more)."""
        return float(min(self.cap, self.base * 2 ** (self.failures + 1)))


class Outage:
    """What the services sharing one database know of it being down: one backoff for all.

    Every service finding the database gone warned, and each backed off on its own: the one
    that happened to sleep longest noticed the server back up to five seconds after the first.
    Now each problem (a refused connect, a connection cut mid-statement) is warned about once
    per outage, by the first service that met it, with a reminder each minute; the backoff
    grows with the failures of the service that met the outage first (as fast as one
    service's would, not once per service); and the first service through (the listener, the
    moment it reconnects) says the database is reachable again and wakes every service still
    backing off.
    """

    def __init__(self, explain: Callable[[BaseException], str] = one_line) -> None:
        #: Explains a database error in one line (a pool's explain: a pool timeout then names
        #: the connection failure behind it).
        self.explain = explain
        self.delay = RetryDelay()
        self.failing: dict[Service, None] = {}  # in the order they met the outage
        #: The problems warned about in this outage, and when: each service meets the outage
        #: its own way (a refused connect, a connection cut mid-statement), and one warning
        #: per problem is enough.
        self._warned: dict[str, float] = {}

    @property
    def down(self) -> bool:
        return bool(self.failing)

    def failed(self, service: Service, exc: BaseException) -> float:
        """``service`` met a database error: how long it waits before trying again."""
        self.failing.setdefault(service)
        if next(iter(self.failing)) is service:
            delay = self.delay.next()
        else:
            delay = random.uniform(self.delay.base, self.delay.bound() / 2)
        problem = self.explain(exc)[:300]
        # One warning per outage and problem (a reminder each minute), not one per try and
        # service: a server refusing connections for minutes must not flood the log.
        now = time.monotonic()
        warned_at = self._warned.get(problem)
        repeat = warned_at is not None and now - warned_at < 60.0
        if not repeat:
            self._warned[problem] = now
        service.log.log(
            logging.DEBUG if repeat else logging.WARNING,
            "database unavailable",
            extra=fields(
                Action.SERVICE_DB_UNAVAILABLE,
                service=service.name,
                retry_in=Seconds(delay),
                error=problem,
            ),
        )
        return delay

    def succeeded(self, service: Service) -> None:
        """``service`` got through: the first one after an outage ends it for all."""
        if service not in self.failing:
            return
        del self.failing[service]
        if self._warned:
            service.log.info(
                "database reachable again",
                extra=fields(Action.SERVICE_DB_BACK, service=service.name),
            )
            self._warned.clear()
            self.delay.reset()
            for other in self.failing:
                other.wake()  # try again now rather than at the end of a long backoff


class Service:
    name = "service"
    jitter = 0.1  # fraction of the interval to randomise
    observer: WorkerObserver = WorkerObserver()  # the supervisor sets the worker's

    def __init__(self) -> None:
        self.log = logging.getLogger(f"pgqueue.worker.{self.name}")
        self.stopping = asyncio.Event()
        self.wakeup = asyncio.Event()
        #: Shared with the services on the same database (the supervisor sets it).
        self.outage = Outage()
        self.crash_delay = RetryDelay()  # after a bug, not an outage: this service's own
        self.db_errors = 0
        self._sleeping: asyncio.Future[None] | None = None  # what sleep() waits for
        #: Set when the first run_once() returned or raised (see :func:`after_first_run`).
        self.ran_once = asyncio.Event()

    def interval(self) -> float:
        """Seconds between runs (a wake() ends the wait early)."""
        return 1.0

    async def run_once(self) -> None:
        raise NotImplementedError

    def wake(self) -> None:
        self.wakeup.set()
        if self._sleeping is not None and not self._sleeping.done():
            self._sleeping.set_result(None)

    def stop(self) -> None:
        self.stopping.set()
        self.wake()

    async def sleep(self, seconds: float) -> None:
        """Sleep up to ``seconds``; return early on wake() or stop()."""
        if self.wakeup.is_set() or self.stopping.is_set():
            self.wakeup.clear()
            return
        # One future that wake() or a timer completes: the service runs on the loop's next
        # iteration. (wait_for over Event.wait took three: a wake-up's hops add to latency.)
        loop = asyncio.get_running_loop()
        self._sleeping = waiter = loop.create_future()
        timer = loop.call_later(max(0.0, seconds), _finish, waiter)
        try:
            await waiter
        finally:
            timer.cancel()
            self._sleeping = None
        self.wakeup.clear()

    async def run(self) -> None:
        while not self.stopping.is_set():
            try:
                try:
                    await self.run_once()
                finally:
                    self.ran_once.set()
            except TRANSIENT_ERRORS as exc:
                self.db_errors += 1
                self.observer.db_error(self.name)
                await self.sleep(self.outage.failed(self, exc))
                continue
            except Exception:
                delay = self.crash_delay.next()
                self.log.exception(
                    "service crashed; restarting",
                    extra=fields(
                        Action.SERVICE_CRASHED, service=self.name, retry_in=Seconds(delay)
                    ),
                )
                await self.sleep(delay)
                continue
            self.outage.succeeded(self)
            self.crash_delay.reset()
            await self.sleep(jittered(self.interval(), self.jitter))


#: The longest a service started :func:`after_first_run` of another waits for it.
FIRST_RUN_WAIT = 1.0


async def after_first_run(first: Service, cap: float = FIRST_RUN_WAIT) -> None:
    """Return once ``first`` has run once (or after ``cap`` seconds, so a first run that hangs
    holds nothing back for long). At start-up the housekeeping (heartbeats, the reaper, the
    pruner, the scheduler, the listener's connection) waits for the fetcher's first claim, so
    none of its statements queues for the pool's one connection ahead of that claim."""
    with contextlib.suppress(TimeoutError):
        await asyncio.wait_for(first.ran_once.wait(), cap)


def _finish(waiter: asyncio.Future[None]) -> None:
    if not waiter.done():
        waiter.set_result(None)


def jittered(seconds: float, spread: float = 0.1) -> float:
    """``seconds`` +/- ``spread`` (10 %), so workers started together drift apart."""
    return seconds * random.uniform(1 - spread, 1 + spread)
