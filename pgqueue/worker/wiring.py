"""How a worker's parts are put together: the one place that says who talks to whom.

Every channel between two parts is set here, by name: the executor hands outcomes to the
completer (``submit``); the completer wakes the fetcher when outcomes free a limit's room
(``on_written``) and tells the releaser when a breaker opens (``on_breaker_open``); the listener
wakes the fetcher (``on_jobs``), asks the executor to stop a cancelled job (``on_cancel``) and,
once listening, wakes the heartbeater (``on_listening``: cancels sent before the LISTEN took);
the heartbeater sees what the executor and completer hold through ``Holdings`` and stops
handlers whose lease was lost; the fetcher hands claimed jobs to the executor. One claim
ledger is shared by the fetcher (which records its claims), the completer and the
heartbeater. The supervisor starts them in the order added here (the fetcher last, once
everything that takes its jobs runs) and stops them in reverse. The housekeeping (heartbeats,
the reaper, the pruner, the scheduler) runs once the fetcher's first claim is
done: before it, their statements would queue for the pool's one connection ahead of that
claim, and their connections be opened while it waits. The listener is the exception: it takes
nothing from the pool, and starts at once.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Coroutine
from dataclasses import dataclass
from types import CodeType
from typing import TYPE_CHECKING, Any

from pgqueue.db.liveness import dead_peer_checked
from pgqueue.rules.log_actions import Action, Seconds, fields
from pgqueue.worker.autoscaler import Autoscaler
from pgqueue.worker.claim_ledger import ClaimLedger
from pgqueue.worker.completer import Completer
from pgqueue.worker.counts import JobCounts
from pgqueue.worker.executor import Executor
from pgqueue.worker.fetcher import Fetcher
from pgqueue.worker.heartbeater import Heartbeater
from pgqueue.worker.holdings import Holdings
from pgqueue.worker.leases import LeaseClock
from pgqueue.worker.listener import Listener
from pgqueue.worker.maintainer import Maintainer
from pgqueue.worker.observer import WorkerObserver, WorkerStats
from pgqueue.worker.pruner import Pruner
from pgqueue.worker.reaper import Reaper
from pgqueue.worker.releaser import Releaser
from pgqueue.worker.scheduler import Scheduler
from pgqueue.worker.service import Outage
from pgqueue.worker.store import WorkerDB, application_name
from pgqueue.worker.supervisor import Supervisor
from pgqueue.worker.transactions import WorkerTransactions
from pgqueue.worker.watchdog import LoopWatchdog

if TYPE_CHECKING:
    from pgqueue.client import PgQueue
    from pgqueue.worker.settings import WorkerSettings

log = logging.getLogger("pgqueue.worker")


@dataclass
class WorkerParts:
    store: WorkerDB
    transactions: WorkerTransactions
    executor: Executor
    completer: Completer
    heartbeater: Heartbeater
    fetcher: Fetcher
    releaser: Releaser
    supervisor: Supervisor


def assemble(
    app: PgQueue,
    settings: WorkerSettings,
    *,
    dsn: str,
    worker_id: str,
    stats: WorkerStats,
    counts: JobCounts,
    observer: WorkerObserver,
    on_burst_done: Callable[[], None],
) -> WorkerParts:
    """Build a worker's parts and connect them; nothing runs until ``supervisor.start()``
    (the store's pool is not open yet either)."""
    name = application_name(dsn, "worker", worker_id)
    # The listener's and the maintainer's connection: direct (--listen-dsn past a transaction
    # pooler), and like every other noticing a server gone silent (pgqueue.db.liveness).
    direct = dead_peer_checked(settings.listen_dsn) if settings.listen_dsn else dsn
    store = WorkerDB(dsn, size=4, prepare=settings.prepare, application_name=name)
    # What the heartbeater knows of the leases, for the completer (see worker/leases.py).
    leases = LeaseClock(settings.lease)
    # What the worker knows of its claims: recorded by the fetcher, asked by the completer
    # before it writes and by the heartbeater before it extends (see worker/claim_ledger.py).
    ledger = ClaimLedger()
    completer = Completer(
        store,
        frozenset(n for n, t in app.tasks.items() if t.circuit_breaker is not None),
        leases,
        ledger,
    )
    transactions = WorkerTransactions(
        dsn,
        size=settings.transaction_connections or settings.concurrency,
        prepare=settings.prepare,
        application_name=name,
        max_result_bytes=app.max_payload_bytes,
        wake=lambda job: [job.queue] if ledger.wakes(job.id, job.lease_token) else None,
        unsettled=lambda job: ledger.claim_unsettled(job.id, job.lease_token),
    )
    executor = Executor(
        app.tasks,
        settings.min_concurrency or settings.concurrency,
        worker_id,
        completer.submit,
        max_concurrency=settings.concurrency,
        prefetch=settings.prefetch,
        children=settings.child_settings(app),
        transactions=transactions,
    )
    releaser = Releaser(store, executor, completer)
    completer.on_breaker_open = releaser.breaker_opened
    fetcher = Fetcher(
        store,
        executor,
        completer,
        ledger=ledger,
        worker_id=worker_id,
        queues=settings.queues,
        task_names=sorted(app.tasks),
        lease=settings.lease,
        poll_interval=settings.poll_interval,
        burst=settings.burst,
        on_burst_done=on_burst_done,
    )
    # Outcomes written wake a fetcher held back by a limit (see Fetcher.outcomes_written).
    completer.on_written = fetcher.outcomes_written
    completer.on_parked = fetcher.wake
    heartbeater = Heartbeater(
        store,
        Holdings(executor, completer, ledger),
        stats,
        worker_id=worker_id,
        lease=settings.lease,
        counts=counts,
        leases=leases,
    )
    supervisor = Supervisor(observer)
    database = Outage(store.explain)
    supervisor.add(completer, database)
    # The worker's row was written at registration: the first beat can wait for the claim.
    supervisor.add(heartbeater, database, after=fetcher)
    if settings.listen:
        listen_dsn = direct
        listener = Listener(
            listen_dsn,
            settings.queues,
            on_jobs=fetcher.notified,
            on_cancel=lambda job_id: _cancel_requested(executor, job_id),
            # A cancel sent before the LISTEN took (at start, during a reconnect) found no
            # listener: a heartbeat at once reads every held job's cancel_requested.
            on_listening=heartbeater.beat_all_now,
            application_name=application_name(listen_dsn, "listener", worker_id),
        )
        fetcher.listening = lambda: listener.connected
        # Its own connection (maybe to another server, past a pooler): an outage of its own.
        # Started with the fetcher, not after its first claim: it takes nothing from the pool,
        # and a cancel sent once a job is claimed must find the LISTEN already there (else
        # only the next heartbeat, a third of a lease later, would see it).
        supervisor.add(listener, Outage() if settings.listen_dsn else database)
    else:
        log.warning(
            "LISTEN disabled: picking up jobs by polling",
            extra=fields(Action.LISTENER_POLLING, poll_interval=Seconds(settings.poll_interval)),
        )
    if settings.reaper_interval is not None:
        supervisor.add(Reaper(store, every=settings.reaper_interval), database, after=fetcher)
    if settings.prune_interval is not None:
        supervisor.add(Pruner(store, every=settings.prune_interval), database, after=fetcher)
    if settings.maintenance_interval is not None:
        # VACUUM and REINDEX on a connection of its own, direct (a session lock elects one
        # maintainer per database: it must not go through a transaction pooler).
        maintainer = Maintainer(
            direct,
            every=settings.maintenance_interval,
            application_name=application_name(direct, "maintenance", worker_id),
        )
        supervisor.add(maintainer, Outage() if settings.listen_dsn else database, after=fetcher)
    if settings.scheduler:
        scheduler = Scheduler(store, max_interval=settings.scheduler_interval)
        supervisor.add(scheduler, database, after=fetcher)
    if settings.min_concurrency is not None and settings.min_concurrency < settings.concurrency:
        autoscaler = Autoscaler(
            executor,
            fetcher,
            minimum=settings.min_concurrency,
            maximum=settings.concurrency,
            cooldown=settings.scale_cooldown,
        )
        supervisor.add(autoscaler, database)
    supervisor.add_loop("watchdog", _watchdog(app, settings, dsn, worker_id, executor, observer))
    supervisor.add(fetcher, database)
    return WorkerParts(
        store, transactions, executor, completer, heartbeater, fetcher, releaser, supervisor
    )


def _cancel_requested(executor: Executor, job_id: int) -> None:
    if executor.stop_job(job_id, "cancelled"):
        log.info(
            "cancel requested; stopping handler",
            extra=fields(Action.JOB_CANCEL_REQUESTED, job_id=job_id),
        )


def _watchdog(
    app: PgQueue,
    settings: WorkerSettings,
    dsn: str,
    worker_id: str,
    executor: Executor,
    observer: WorkerObserver,
) -> Callable[[], Coroutine[Any, Any, None]]:
    # The code of every async handler: what the watchdog looks for on a stalled stack.
    handler_codes: dict[CodeType, str] = {
        code: name
        for name, task in app.tasks.items()
        if task.is_async and (code := getattr(task.func, "__code__", None)) is not None
    }
    watchdog = LoopWatchdog(
        dsn,
        worker_id=worker_id,
        lease=settings.lease,
        running_async=lambda: [
            (job_id, running.job.task)
            for (job_id, _), running in executor.running.items()
            if app.tasks[running.job.task].is_async
        ],
        handler_codes=handler_codes,
        on_stall=observer.loop_stalled,
        # It writes for this worker: its connection says so, as the pool's do.
        application_name=application_name(dsn, "worker", worker_id),
    )
    return watchdog.watch
