"""A worker process: its lifecycle, and the services that drive the job state machine.

The job states and the state machine (which statement moves a job from where to where) are
written out in :mod:`pgqueue.rules.vocabulary`, where the states are declared.

Services (each a :class:`~pgqueue.worker.service.Service` in its own module): fetcher (claims),
executor (runs handlers), completer (writes outcomes in batches), heartbeater (extends leases),
listener (LISTEN for wake-ups and cancels), reaper (recovers expired leases), pruner
(retention), scheduler (cron ticks), autoscaler (slots between ``--concurrency MIN:MAX``);
built and connected in :mod:`pgqueue.worker.wiring`, started and stopped by the
:mod:`pgqueue.worker.supervisor`, reaching the database only through the
:class:`~pgqueue.worker.store.WorkerStore`.

Workflow jobs start ``waiting`` (not in any claim index) and become ``ready`` in the statement
that records their last parent's success; a parent ending dead or cancelled cancels them (see
:mod:`pgqueue.rules.workflow`).

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
from typing import TYPE_CHECKING, Any

from pgqueue._version import __version__
from pgqueue.db.declarations import declarations
from pgqueue.db.embedded import resolve_dsn
from pgqueue.db.liveness import dead_peer_checked
from pgqueue.db.startup import check_database_async
from pgqueue.errors import ConfigurationError, DatabaseUnavailableError
from pgqueue.handler import logs
from pgqueue.handler.batch import BatchTask
from pgqueue.handler.job_transaction import bind_host
from pgqueue.rules.config import configured_dsn
from pgqueue.rules.log_actions import Action, Seconds, fields
from pgqueue.worker.counts import JobCounts
from pgqueue.worker.executor import Executor
from pgqueue.worker.observer import Observers, WorkerObserver, WorkerStats
from pgqueue.worker.service import RetryDelay, after_first_run
from pgqueue.worker.settings import WorkerSettings
from pgqueue.worker.store import TRANSIENT_ERRORS, WorkerStore
from pgqueue.worker.wiring import assemble

if TYPE_CHECKING:
    from pgqueue.client import PgQueue


log = logging.getLogger("pgqueue.worker")
# At start-up: a server down or refusing connections is waited for (a rejected DSN is not).
_WAITED_OUT: tuple[type[BaseException], ...] = (DatabaseUnavailableError, *TRANSIENT_ERRORS)


def _check_batch_waits(app: PgQueue, lease: float) -> None:
    """A batch's jobs are claimed while it waits for more: that wait must be well under the
    lease (at most half of it), or jobs would sit claimed here longer than a lease."""
    for task in app.tasks.values():
        if isinstance(task, BatchTask) and task.batch_wait > lease / 2:
            raise ConfigurationError(
                f"batch task {task.name!r}: batch_wait {task.batch_wait:g}s must be at most half "
                f"the lease ({lease:g}s): lower batch_wait, or raise the lease (--lease)"
            )


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
        if not self.settings.queues:
            self.settings.queues = app.declared_queues()
        _check_batch_waits(app, self.settings.lease)
        self._dsn = configured_dsn(dsn)
        self.id = str(uuid.uuid4())
        self.stats = WorkerStats()
        self.counts = JobCounts()
        self.observer = Observers([self.stats, self.counts, *(observers or [])])
        self._stop = threading.Event()  # thread-safe: set from signal handlers or other threads
        self._stop_async: asyncio.Event | None = None
        self._loop: asyncio.AbstractEventLoop | None = None
        self._signals = 0
        self.executor: Executor | None = None
        self.threads_finished = True
        self._background: set[asyncio.Task[None]] = set()

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
            log.warning(
                "second signal: exiting at once",
                extra=fields(Action.WORKER_SECOND_SIGNAL, signal=signal.Signals(signum).name),
            )
            # Flush what can be flushed, but "at once" wins over a log output that blocks.
            flusher = threading.Thread(target=logging.shutdown, daemon=True)
            flusher.start()
            flusher.join(timeout=1.0)
            os._exit(1)
        log.info(
            "signal received: draining",
            extra=fields(
                Action.WORKER_SIGNAL,
                signal=signal.Signals(signum).name,
                grace=Seconds(self.settings.shutdown_grace),
                running=len(self.executor.running) if self.executor else 0,
            ),
        )
        self.request_stop()

    def _log_started(self) -> None:
        """Say the worker started and which tasks run here, and warn about declared tasks that
        cannot (their queue is not one this worker serves), which would otherwise wait without
        a word."""
        settings = self.settings
        log.info(
            "worker started",
            extra=fields(
                Action.WORKER_STARTED,
                worker_id=self.id,
                queues=",".join(settings.queues),
                concurrency=settings.concurrency,
                lease=Seconds(settings.lease),
                tasks=len(self.app.tasks),
                pid=os.getpid(),
            ),
        )
        served = set(self.settings.queues)
        by_queue: dict[str, list[str]] = {}
        for task in self.app.tasks.values():
            by_queue.setdefault(task.queue, []).append(task.name)
        for queue in self.settings.queues:
            names = sorted(by_queue.get(queue, ()))
            log.info(
                "serving",
                extra=fields(
                    Action.WORKER_SERVING, queue=queue, tasks=",".join(names) or "(none declared)"
                ),
            )
        missed = sorted(
            f"{name} (queue {queue})"
            for queue, names in by_queue.items()
            if queue not in served
            for name in names
        )
        if missed:
            log.warning(
                "tasks declared for queues this worker does not serve will not run here: %s; "
                "add their queues to --queue, or run a worker for them",
                ", ".join(missed),
                extra=fields(Action.WORKER_QUEUES_UNSERVED),
            )

    def run_sync(self) -> None:
        asyncio.run(self.run())

    # -- lifecycle ---------------------------------------------------------------------------

    async def run(self, *, handle_signals: bool = True) -> None:
        logs.bind(worker_id=self.id)  # every record logged by this worker says which it is
        self._loop = asyncio.get_running_loop()
        self._stop_async = asyncio.Event()
        if self._stop.is_set():
            self._stop_async.set()
        if handle_signals:
            for signum in (signal.SIGTERM, signal.SIGINT):
                self._loop.add_signal_handler(signum, self._on_signal, signum)
        dsn = self._dsn if self._dsn is not None else await asyncio.to_thread(resolve_dsn, None)
        # Every connection of the worker notices a server gone silent (pgqueue.db.liveness).
        dsn = dead_peer_checked(dsn)
        parts = assemble(
            self.app,
            self.settings,
            dsn=dsn,
            worker_id=self.id,
            stats=self.stats,
            counts=self.counts,
            observer=self.observer,
            on_burst_done=self.request_stop,
        )
        self.executor = parts.executor
        # Before any part starts: their tasks (and the handler threads) inherit it.
        bind_host(parts.transactions)
        await parts.store.open()
        registered = False
        try:
            registered = await self._register(parts.store, dsn)
            if not registered:
                return
            await self._sync_declarations(parts.store)
            self._log_started()
            parts.supervisor.start()
            # A hint, not worth delaying the first claim for (see after_first_run).
            await after_first_run(parts.fetcher)
            await self._warn_unserved(parts.store)
            await self._stop_async.wait()
            await parts.supervisor.stop(parts.fetcher)  # no more claims
            await parts.releaser.drain(self.settings.shutdown_grace)
        finally:
            await parts.supervisor.stop()
            if registered:
                await parts.heartbeater.flush()
                await self._deregister(parts.store)
            await parts.transactions.close()
            await parts.store.close()
            self.threads_finished = parts.executor.shutdown_threads()
            if handle_signals:
                for signum in (signal.SIGTERM, signal.SIGINT):
                    self._loop.remove_signal_handler(signum)
        log.info(
            "worker stopped",
            extra=fields(
                Action.WORKER_STOPPED,
                worker_id=self.id,
                succeeded=self.stats.succeeded,
                retried=self.stats.retried,
                dead=self.stats.dead,
                cancelled=self.stats.cancelled,
                leases_lost=self.stats.lost,
            ),
        )

    async def _warn_unserved(self, store: WorkerStore) -> None:
        """Warn about jobs that wait for tasks no running worker runs (this one registered
        first): they would wait for ever, in a queue that looks served."""
        try:
            rows = await store.fetch("unserved_tasks", {"limit": 20}, timeout=10)
        except TRANSIENT_ERRORS:
            return  # a hint at start-up: not worth more than the try
        if rows:
            log.warning(
                "jobs wait for tasks that no running worker runs: %s; start a worker whose app "
                "registers them (in a Django project, manage.py pgq work without an APP runs "
                "every installed app's tasks)",
                ", ".join(f"{task} (queue {queue}, {jobs} jobs)" for queue, task, jobs, _ in rows),
                extra=fields(Action.WORKER_TASKS_UNRUN),
            )

    async def _register(self, store: WorkerStore, dsn: str) -> bool:
        """Check the database (:mod:`pgqueue.db.startup`) and register in pgqueue.workers,
        waiting out a database that is not up yet. A DSN the server rejects for good, or a
        schema at the wrong revision, ends start-up with its error."""
        delay = RetryDelay(cap=10.0)
        params: dict[str, Any] = {
            "worker_id": self.id,
            "host": socket.gethostname(),
            "pid": os.getpid(),
            "queues": self.settings.queues,
            "concurrency": self.settings.concurrency,
            "version": __version__,
            "tasks": sorted(self.app.tasks),
        }
        while not self._stop.is_set():
            try:
                await check_database_async(dsn)
                await store.fetch("register_worker", params, timeout=10)
                return True
            except _WAITED_OUT as exc:
                wait = delay.next()
                log.log(
                    # One warning (a reminder each ten tries), not one per try.
                    logging.WARNING if delay.failures % 10 == 1 else logging.DEBUG,
                    "database unavailable at start-up",
                    extra=fields(
                        Action.WORKER_DB_UNAVAILABLE,
                        retry_in=Seconds(wait),
                        error=store.explain(exc)[:300],
                    ),
                )
                assert self._stop_async is not None
                with contextlib.suppress(TimeoutError):
                    await asyncio.wait_for(self._stop_async.wait(), wait)
        return False

    async def _sync_declarations(self, store: WorkerStore) -> None:
        """Write the code's task limits, breakers and schedules (see PgQueue.sync_declarations).
        A failure is logged: the worker still runs with what the database already has."""
        try:
            await store.drive(declarations(self.app), atomic=True, timeout=10)
        except TRANSIENT_ERRORS as exc:
            log.warning(
                "could not write task declarations",
                extra=fields(Action.WORKER_DECLARATIONS_FAILED, error=str(exc)[:200]),
            )

    async def _deregister(self, store: WorkerStore) -> None:
        try:
            await store.fetch(
                "deregister_worker", {"worker_id": self.id, **self.stats.as_params()}, timeout=2
            )
        except TRANSIENT_ERRORS:
            log.warning(
                "could not mark the worker stopped; the reaper will prune its row",
                extra=fields(Action.WORKER_STOP_UNMARKED),
            )
