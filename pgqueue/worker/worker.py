"""A worker process: wires the services and owns the job state machine.

Job states (``pgqueue.jobs.state``; finished jobs leave the table)::

    scheduled --(run_at <= now)--> ready --claim--> running --ack-----------> (deleted)
        ^                            ^                 |  \\--cancel requested-> job_history
        |                            |                 |                         (cancelled)
        +---- error, attempts left / Retry ------------+
        |                            |                 +--Fail / no attempts--> dead_letters
        |                            +---- release ----+   (graceful shutdown,     |
        +---- reaper: lease expired, attempts left ----+    attempt not burned)   replay
                                                      \\--lease expired, no        |
                                                          attempts -> dead_letters  v
                                                                                  ready

Every transition out of ``running`` is a statement fenced by ``lease_token``: only the holder
of the current claim can make it, so a worker that lost its lease (stalled, partitioned,
reaped) changes nothing. All times come from the database clock.

Services (each a :class:`~pgqueue.worker.service.Service` in its own module): fetcher (claims),
executor (runs handlers), completer (writes outcomes in batches), heartbeater (extends leases),
listener (LISTEN for wake-ups and cancels), reaper (recovers expired leases).

Shutdown: the first SIGTERM/SIGINT stops claiming and lets running jobs finish for up to
``shutdown_grace``; jobs still running then are handed back (``ready``, attempt not burned) and
the worker exits 0. A second signal exits at once (the reaper recovers those jobs later).
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import os
import signal
import socket
import threading
import uuid
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from pgqueue._version import __version__
from pgqueue.config import configured_dsn, resolve_dsn
from pgqueue.errors import ConfigurationError
from pgqueue.payload import check_name
from pgqueue.worker.completer import Completer
from pgqueue.worker.db import TRANSIENT_ERRORS, WorkerDB, application_name
from pgqueue.worker.executor import Executor
from pgqueue.worker.fetcher import Fetcher
from pgqueue.worker.heartbeater import Heartbeater
from pgqueue.worker.listener import Listener
from pgqueue.worker.observer import Observers, WorkerObserver, WorkerStats
from pgqueue.worker.reaper import Reaper
from pgqueue.worker.service import RetryDelay, Service

if TYPE_CHECKING:
    from pgqueue.client import PgQueue

log = logging.getLogger("pgqueue.worker")

# Shutdown's final writes (outcomes, releases) get this long to reach the database.
_FINAL_WRITE_TIMEOUT = 10.0


@dataclass
class WorkerSettings:
    """Everything ``pgq work`` can set. Durations are in seconds."""

    queues: list[str] = field(default_factory=lambda: ["default"])
    concurrency: int = 10
    lease: float = 30.0
    poll_interval: float = 5.0
    shutdown_grace: float = 30.0
    burst: bool = False
    reaper_interval: float | None = 5.0  # None: this worker does not run the reaper
    listen: bool = True
    listen_dsn: str | None = None
    prepare: bool = True  # server-side prepared statements (off behind old PgBouncers)

    def validate(self) -> None:
        if not self.queues:
            raise ConfigurationError("a worker needs at least one queue")
        for queue in self.queues:
            check_name(queue, "queue name")
        if self.concurrency < 1:
            raise ConfigurationError(f"concurrency must be at least 1, got {self.concurrency}")
        if self.lease < 0.5:
            raise ConfigurationError(f"lease must be at least 0.5s, got {self.lease}s")
        if self.poll_interval <= 0:
            raise ConfigurationError("poll interval must be positive")
        if self.shutdown_grace < 0:
            raise ConfigurationError("shutdown grace must not be negative")
        if self.reaper_interval is not None and self.reaper_interval <= 0:
            raise ConfigurationError("reaper interval must be positive")


class Worker:
    def __init__(
        self,
        app: PgQueue,
        settings: WorkerSettings | None = None,
        dsn: str | None = None,
        observers: list[WorkerObserver] | None = None,
    ) -> None:
        self.app = app
        self.settings = settings or WorkerSettings()
        self.settings.validate()
        if not app.tasks:
            raise ConfigurationError("no tasks are registered on this PgQueue: nothing to run")
        self._dsn = configured_dsn(dsn)
        self.id = str(uuid.uuid4())
        self.stats = WorkerStats()
        self.observer = Observers([self.stats, *(observers or [])])
        self._stop = threading.Event()  # thread-safe: set from signal handlers or other threads
        self._stop_async: asyncio.Event | None = None
        self._loop: asyncio.AbstractEventLoop | None = None
        self._signals = 0
        self.executor: Executor | None = None
        self.threads_finished = True

    # -- control -----------------------------------------------------------------------------

    def request_stop(self) -> None:
        """Begin a graceful shutdown (safe from any thread)."""
        self._stop.set()
        loop, event = self._loop, self._stop_async
        if loop is not None and event is not None:
            loop.call_soon_threadsafe(event.set)

    def _on_signal(self, signum: int) -> None:
        self._signals += 1
        if self._signals > 1:
            log.warning("second signal: exiting at once signal=%s", signal.Signals(signum).name)
            logging.shutdown()
            os._exit(1)
        log.info(
            "signal received: draining signal=%s grace=%ss running=%s",
            signal.Signals(signum).name,
            self.settings.shutdown_grace,
            len(self.executor.running) if self.executor else 0,
        )
        self.request_stop()

    def run_sync(self) -> None:
        asyncio.run(self.run())

    # -- lifecycle ---------------------------------------------------------------------------

    async def run(self, *, handle_signals: bool = True) -> None:
        self._loop = asyncio.get_running_loop()
        self._stop_async = asyncio.Event()
        if self._stop.is_set():
            self._stop_async.set()
        if handle_signals:
            for signum in (signal.SIGTERM, signal.SIGINT):
                self._loop.add_signal_handler(signum, self._on_signal, signum)
        settings = self.settings
        dsn = self._dsn if self._dsn is not None else await asyncio.to_thread(resolve_dsn, None)
        db = WorkerDB(
            dsn,
            size=4,
            prepare=settings.prepare,
            application_name=application_name(dsn, "worker", self.id),
        )
        await db.open()
        completer = Completer(db)
        executor = self.executor = Executor(
            self.app.tasks, settings.concurrency, self.id, completer.submit
        )
        fetcher = Fetcher(
            db,
            executor,
            completer,
            worker_id=self.id,
            queues=settings.queues,
            task_names=sorted(self.app.tasks),
            lease=settings.lease,
            poll_interval=settings.poll_interval,
            burst=settings.burst,
            on_burst_done=self.request_stop,
        )
        services: list[Service] = [
            completer,
            Heartbeater(
                db, executor, completer, self.stats, worker_id=self.id, lease=settings.lease
            ),
        ]
        if settings.listen:
            services.append(
                Listener(
                    settings.listen_dsn or dsn,
                    settings.queues,
                    on_jobs=fetcher.wake,
                    on_cancel=self._cancel_requested,
                    application_name=application_name(
                        settings.listen_dsn or dsn, "listener", self.id
                    ),
                )
            )
        else:
            log.warning(
                "LISTEN disabled: picking up jobs by polling every %ss", settings.poll_interval
            )
        if settings.reaper_interval is not None:
            services.append(Reaper(db, every=settings.reaper_interval))
        for service in (fetcher, *services):
            service.observer = self.observer
        tasks: list[asyncio.Task[None]] = []
        try:
            if not await self._register(db):
                return
            log.info(
                "worker started worker_id=%s queues=%s concurrency=%s lease=%ss tasks=%s pid=%s",
                self.id,
                ",".join(settings.queues),
                settings.concurrency,
                settings.lease,
                len(self.app.tasks),
                os.getpid(),
            )
            tasks = [asyncio.create_task(s.run(), name=f"pgqueue-{s.name}") for s in services]
            fetch_task = asyncio.create_task(fetcher.run(), name="pgqueue-fetcher")
            await self._stop_async.wait()
            fetcher.stop()
            fetch_task.cancel()
            await asyncio.gather(fetch_task, return_exceptions=True)
            await self._drain(db, executor, completer)
        finally:
            for service in services:
                service.stop()
            for task in tasks:
                task.cancel()
            await asyncio.gather(*tasks, return_exceptions=True)
            await self._deregister(db)
            await db.close()
            self.threads_finished = executor.shutdown_threads()
            if handle_signals:
                for signum in (signal.SIGTERM, signal.SIGINT):
                    self._loop.remove_signal_handler(signum)
        log.info(
            "worker stopped worker_id=%s succeeded=%s retried=%s dead=%s cancelled=%s "
            "leases_lost=%s",
            self.id,
            self.stats.succeeded,
            self.stats.retried,
            self.stats.dead,
            self.stats.cancelled,
            self.stats.lost,
        )

    def _cancel_requested(self, job_id: int) -> None:
        if self.executor is not None and self.executor.stop_job(job_id, "cancelled"):
            log.info("cancel requested; stopping handler job_id=%s", job_id)

    async def _register(self, db: WorkerDB) -> bool:
        """Register in pgqueue.workers, waiting out a database that is not up yet."""
        delay = RetryDelay(cap=10.0)
        params: dict[str, Any] = {
            "worker_id": self.id,
            "host": socket.gethostname(),
            "pid": os.getpid(),
            "queues": self.settings.queues,
            "concurrency": self.settings.concurrency,
            "version": __version__,
        }
        while not self._stop.is_set():
            try:
                await db.fetch("register_worker", params, timeout=10)
                return True
            except TRANSIENT_ERRORS as exc:
                wait = delay.next()
                log.warning(
                    "database unavailable at start-up error=%r retry_in=%.1fs",
                    str(exc).strip()[:200],
                    wait,
                )
                assert self._stop_async is not None
                with contextlib.suppress(TimeoutError):
                    await asyncio.wait_for(self._stop_async.wait(), wait)
        return False

    async def _deregister(self, db: WorkerDB) -> None:
        try:
            await db.fetch(
                "deregister_worker", {"worker_id": self.id, **self.stats.as_params()}, timeout=2
            )
        except TRANSIENT_ERRORS:
            log.warning("could not mark the worker stopped; the reaper will prune its row")

    async def _drain(self, db: WorkerDB, executor: Executor, completer: Completer) -> None:
        """Graceful shutdown: wait for running jobs, then hand back what did not finish."""
        grace = self.settings.shutdown_grace
        if executor.running:
            log.info("draining running=%s grace=%ss", len(executor.running), grace)
        finished = await executor.wait_idle(grace)
        unfinished = [] if finished else executor.stop_all("shutdown")
        if unfinished:
            # Let cancelled async handlers unwind; sync threads keep running but are released.
            await executor.wait_idle(min(1.0, grace) or 0.1)
        await self._final_write(completer.run_once, "outcomes")
        held = [(r.job.id, r.job.lease_token) for r in unfinished]
        if held:
            rows: list[Any] = []

            async def release() -> None:
                rows.extend(
                    await db.fetch(
                        "release_jobs",
                        {"ids": [i for i, _ in held], "tokens": [t for _, t in held]},
                    )
                )

            await self._final_write(release, "released jobs")
            log.info(
                "released unfinished jobs count=%s ids=%s",
                len(rows),
                ",".join(str(r[0]) for r in rows),
            )

    async def _final_write(self, write: Any, what: str) -> None:
        loop = asyncio.get_running_loop()
        deadline = loop.time() + _FINAL_WRITE_TIMEOUT
        delay = RetryDelay(cap=1.0)
        while True:
            try:
                await write()
                return
            except TRANSIENT_ERRORS as exc:
                if loop.time() > deadline:
                    log.error(
                        "could not write %s before exiting (leases will expire and the "
                        "reaper will recover the jobs) error=%r",
                        what,
                        str(exc)[:200],
                    )
                    return
                await asyncio.sleep(delay.next())
