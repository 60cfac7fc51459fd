"""The one shape every worker service has: a name, a logger, ``run_once()``, a supervised loop.

The loop runs ``run_once()`` every ``interval()`` seconds (jittered, so a fleet of workers does
not synchronise), can be woken early, and survives failures: a database error is logged and
retried with exponential backoff; any other exception is logged with its traceback and the
service is restarted after a backoff. The worker never exits because one service failed.
"""

from __future__ import annotations

import asyncio
import logging
import random
import time
from collections.abc import Callable

from pgqueue.worker.observer import WorkerObserver
from pgqueue.worker.store import TRANSIENT_ERRORS


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


class Service:
    name = "service"
    jitter = 0.1  # fraction of the interval to randomise
    observer: WorkerObserver = WorkerObserver()  # the worker sets its own
    #: Explains a database error in one line (the worker sets its pool's: a pool timeout
    #: then names the connection failure behind it).
    explain: Callable[[BaseException], str] = staticmethod(lambda exc: " ".join(str(exc).split()))

    def __init__(self) -> None:
        self.log = logging.getLogger(f"pgqueue.worker.{self.name}")
        self.stopping = asyncio.Event()
        self.wakeup = asyncio.Event()
        self.retry_delay = RetryDelay()
        self.db_errors = 0
        self._problem: str | None = None  # the database error last warned about
        self._warned_at = 0.0
        self._sleeping: asyncio.Future[None] | None = None  # what sleep() waits for

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
                await self.run_once()
            except TRANSIENT_ERRORS as exc:
                self.db_errors += 1
                self.observer.db_error(self.name)
                delay = self.retry_delay.next()
                problem = self.explain(exc)[:300]
                # One warning per outage and problem (a reminder each minute), not one per try:
                # a server refusing connections for minutes must not flood the log.
                now = time.monotonic()
                repeat = problem == self._problem and now - self._warned_at < 60.0
                if not repeat:
                    self._problem, self._warned_at = problem, now
                self.log.log(
                    logging.DEBUG if repeat else logging.WARNING,
                    "database unavailable service=%s error=%r retry_in=%.2fs",
                    self.name,
                    problem,
                    delay,
                )
                await self.sleep(delay)
                continue
            except Exception:
                delay = self.retry_delay.next()
                self.log.exception(
                    "service crashed; restarting service=%s retry_in=%.2fs", self.name, delay
                )
                await self.sleep(delay)
                continue
            if self.retry_delay.failures:
                self.log.info("database reachable again service=%s", self.name)
                self._problem = None
            self.retry_delay.reset()
            await self.sleep(jittered(self.interval(), self.jitter))


def _finish(waiter: asyncio.Future[None]) -> None:
    if not waiter.done():
        waiter.set_result(None)


def jittered(seconds: float, spread: float = 0.1) -> float:
    """``seconds`` +/- ``spread`` (10 %), so workers started together drift apart."""
    return seconds * random.uniform(1 - spread, 1 + spread)
