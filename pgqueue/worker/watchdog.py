"""The loop watchdog: leases that survive a blocked event loop, and a report of who blocked it.

Heartbeats run on the worker's event loop. An ``async def`` handler that blocks the loop (CPU
work, ``time.sleep``, a blocking client library) stops them for every job of the worker; past
the lease the reaper hands those jobs to another worker while they are still running here, and
they run twice. The watchdog is a thread with a connection of its own:

* the loop stamps :attr:`LoopWatchdog.last_tick` every :data:`TICK` seconds (a tiny task);
* the thread looks every ``lease / 6`` seconds; once the stamp is older than ``lease / 3`` (a
  heartbeat's interval: the loop has missed a beat), the loop is *stalled*: the thread logs once
  per stall which task and job blocked it, with the loop thread's stack, counts the stall for
  the metrics, and from then on extends the leases of every job the worker holds with one
  ``UPDATE`` (``extend_leases``: the jobs running under this worker's id whose lease has not
  expired, which includes jobs a claim returned while the loop could not look at its reply)
  each interval until the loop ticks again. The regular heartbeat resumes when the loop does;
  it alone reports lost leases and cancellations.

A process that is alive keeps its leases; a process that died (or a machine that vanished) stops
extending them and the reaper recovers its jobs as before. The thread only ever blocks on its own
PostgreSQL connection, never on the loop.
"""

from __future__ import annotations

import asyncio
import logging
import sys
import threading
import time
import traceback
from collections.abc import Callable, Iterable, Mapping
from datetime import timedelta
from types import CodeType, FrameType
from typing import Any

import psycopg

from pgqueue.db.queries import query
from pgqueue.rules.log_actions import Action, fields
from pgqueue.worker.store import TRANSIENT_ERRORS

log = logging.getLogger("pgqueue.worker.watchdog")

#: How often the loop proves it is alive.
TICK = 0.1


class LoopWatchdog:
    def __init__(
        self,
        dsn: str,
        *,
        worker_id: str,
        lease: float,
        running_async: Callable[[], Iterable[tuple[int, str]]],
        handler_codes: Mapping[CodeType, str],
        on_stall: Callable[[float], None] = lambda seconds: None,
        application_name: str | None = None,
    ) -> None:
        self.dsn = dsn
        self.worker_id = worker_id
        self.lease = lease
        self.stall_after = lease / 3
        self._running_async = running_async
        self._handler_codes = handler_codes
        self._on_stall = on_stall
        self._conn_kwargs: dict[str, Any] = {"autocommit": True}
        if application_name is not None:
            self._conn_kwargs["application_name"] = application_name
        self.last_tick = time.monotonic()
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None
        self._loop_thread_id = threading.get_ident()
        self._conn: psycopg.Connection[Any] | None = None

    # -- on the loop ------------------------------------------------------------------------

    async def watch(self) -> None:
        """Watch the loop until cancelled: the thread starts, the loop stamps its ticks, and
        the thread is stopped (off the loop: it may be writing) when this ends."""
        self.start()
        try:
            await self.tick()
        finally:
            await asyncio.to_thread(self.stop)

    async def tick(self) -> None:
        """Runs on the loop until cancelled: the stamp the thread watches."""
        while True:
            self.last_tick = time.monotonic()
            await asyncio.sleep(TICK)

    def start(self) -> None:
        self._loop_thread_id = threading.get_ident()  # started from the loop's thread
        self.last_tick = time.monotonic()
        self._thread = threading.Thread(target=self._watch, name="pgqueue-watchdog", daemon=True)
        self._thread.start()

    def stop(self) -> None:
        self._stop.set()
        if self._thread is not None:
            self._thread.join(timeout=5)

    # -- in the thread ----------------------------------------------------------------------

    def _watch(self) -> None:
        stalled_since: float | None = None
        try:
            while not self._stop.wait(self.lease / 6):
                lag = time.monotonic() - self.last_tick
                if lag < self.stall_after:
                    if stalled_since is not None:
                        self._resumed(stalled_since)
                        stalled_since = None
                    continue
                if stalled_since is None:
                    stalled_since = self.last_tick
                    self._report(lag)
                self._extend()
            if stalled_since is not None:  # the loop is running again: it asked us to stop
                self._resumed(stalled_since)
        finally:
            if self._conn is not None:
                self._conn.close()

    def _resumed(self, stalled_since: float) -> None:
        log.warning(
            "event loop running again after a stall of %.1fs",
            self.last_tick - stalled_since,
            extra=fields(Action.LOOP_RUNNING),
        )

    def _report(self, lag: float) -> None:
        frame = sys._current_frames().get(self._loop_thread_id)
        culprit = self._culprit(frame)
        stack = "".join(traceback.format_stack(frame)) if frame is not None else "(no stack)"
        log.warning(
            "event loop blocked for %.1fs by %s: an async handler is not awaiting (CPU work or "
            "a blocking call in `async def`; use a plain `def` handler, or asyncio.to_thread); "
            "the watchdog keeps this worker's leases alive meanwhile\n%s",
            lag,
            culprit,
            stack,
            extra=fields(Action.LOOP_BLOCKED),
        )
        try:
            self._on_stall(lag)
        except Exception:  # metrics must never take the watchdog down
            log.exception("stall observer failed", extra=fields(Action.LOOP_OBSERVER_FAILED))

    def _culprit(self, frame: FrameType | None) -> str:
        """The task (and job, when only one of that task runs) whose code is on the stack."""
        codes = self._handler_codes
        task = None
        while frame is not None and task is None:  # innermost handler frame first
            task = codes.get(frame.f_code)
            frame = frame.f_back
        if task is None:
            return "code outside any handler"
        jobs = [job_id for job_id, name in self._running_async() if name == task]
        if len(jobs) == 1:
            return f"task {task} (job {jobs[0]})"
        return f"task {task} (one of jobs {', '.join(map(str, sorted(jobs)))})"

    def _extend(self) -> None:
        try:
            if self._conn is None or self._conn.closed:
                self._conn = psycopg.connect(self.dsn, connect_timeout=10, **self._conn_kwargs)
            self._conn.execute(
                query("extend_leases"),
                {"worker_id": self.worker_id, "lease": timedelta(seconds=self.lease)},
            )
        except TRANSIENT_ERRORS as exc:
            log.warning(
                "watchdog could not extend leases: %s",
                str(exc).strip()[:200],
                extra=fields(Action.WATCHDOG_EXTEND_FAILED),
            )
            if self._conn is not None:
                self._conn.close()
            self._conn = None
