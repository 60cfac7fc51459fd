"""``PgQueue``: the application's handle on the queue (task registry, enqueue, inspection).

Sync and async methods drive the same plans (:mod:`pgqueue.db.plan`), so they share every query
and every line of result handling. With ``conn=`` a method runs in the caller's connection and
transaction and never commits; without it, it takes a pooled connection and commits.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import AsyncIterator, Callable, Iterable, Iterator, Mapping
from contextlib import asynccontextmanager, contextmanager, nullcontext
from functools import partial
from typing import TYPE_CHECKING, Any, Literal, TypeVar, cast, overload

from psycopg_pool import AsyncConnectionPool, ConnectionPool

from pgqueue import admin, config
from pgqueue.client.cron import CronSchedules
from pgqueue.client.flow import FlowControl
from pgqueue.client.pools import AsyncConnection, Connection, Pools
from pgqueue.client.room import Room
from pgqueue.client.workflows import WorkflowMethods
from pgqueue.db import plan as plans
from pgqueue.db.connections import AsyncConnectionArg, ConnectionArg
from pgqueue.db.migrate import upgrade
from pgqueue.declarations import declarations
from pgqueue.enqueue import JobId, JobSpec, enqueue_many, enqueue_one, make_spec
from pgqueue.errors import ConfigurationError, InvalidJobError, UnknownTaskError
from pgqueue.gc_pause import gc_paused
from pgqueue.options import JobOptions, TaskOptions
from pgqueue.payload import check_name
from pgqueue.progress import Progress
from pgqueue.results_listener import ResultListener
from pgqueue.schedules import PeriodicOptions, Schedule, ScheduleTiming
from pgqueue.tasks import JobCall, P, R, Task

if TYPE_CHECKING:
    from typing import Unpack

T = TypeVar("T")


class PgQueue(WorkflowMethods):
    """A queue living in one PostgreSQL database.

    ``dsn`` follows the usual resolution: the argument, else ``PGQUEUE_DSN``, else
    ``DATABASE_URL``, else the embedded server (started on first use). ``prepare=False``
    turns server-side prepared statements off (behind PgBouncer < 1.21 in transaction mode).

    The client holds the task registry and what an application does with its jobs (enqueue,
    publish, workflows, results, progress, cancel); the operators' side lives in its parts,
    each an attribute: :attr:`flow`, :attr:`cron`.
    """

    flow: FlowControl
    """Flow control: queue settings, task limits, pausing queues, circuit breakers."""
    cron: CronSchedules
    """Cron schedules made at run time (``@pgq.periodic`` declares them in code)."""

    def __init__(
        self,
        dsn: str | None = None,
        *,
        max_payload_bytes: int = config.DEFAULT_MAX_PAYLOAD_BYTES,
        pool_size: int = 10,
        prepare: bool = True,
        pool: ConnectionPool | AsyncConnectionPool | None = None,
    ) -> None:
        if max_payload_bytes <= 0:
            raise ConfigurationError("max_payload_bytes must be positive")
        self._pools = Pools(dsn, pool_size=pool_size, prepare=prepare, pool=pool)
        self.max_payload_bytes = max_payload_bytes
        self.tasks: dict[str, Task[..., Any]] = {}
        #: event name -> tasks subscribed with ``@pgq.task(on=...)`` (see :meth:`publish`)
        self.subscriptions: dict[str, list[Task[..., Any]]] = {}
        #: schedules declared with ``@pgq.periodic``; workers write them at start-up
        self.schedules: dict[str, Schedule] = {}
        self.flow = FlowControl(self)
        self.cron = CronSchedules(self)

    # -- configuration ---------------------------------------------------------------------

    @property
    def dsn(self) -> str:
        """The DSN in use (starts the embedded server when none is configured)."""
        return self._pools.dsn

    @property
    def pool_size(self) -> int:
        """The most connections each of the client's own pools opens."""
        return self._pools.size

    @overload
    def task(self, func: Callable[P, R], /) -> Task[P, R]: ...

    @overload
    def task(
        self,
        func: None = None,
        /,
        *,
        name: str | None = None,
        pass_context: Literal[False] = False,
        **options: Unpack[TaskOptions],
    ) -> Callable[[Callable[P, R]], Task[P, R]]: ...

    # pass_context=True: the function's first parameter is the JobContext, which the worker
    # passes and enqueue does not, so its signature says nothing about enqueue's arguments.
    @overload
    def task(
        self,
        func: None = None,
        /,
        *,
        name: str | None = None,
        pass_context: bool,
        **options: Unpack[TaskOptions],
    ) -> Callable[[Callable[..., R]], Task[..., R]]: ...

    def task(
        self,
        func: Callable[P, R] | None = None,
        /,
        *,
        name: str | None = None,
        pass_context: bool = False,
        **options: Unpack[TaskOptions],
    ) -> Task[P, R] | Callable[[Callable[P, R]], Task[P, R]]:
        """Register a function as a task: ``@pgq.task`` or ``@pgq.task(queue=..., ...)``.

        ``name`` defaults to ``module.qualname``; ``pass_context`` passes a
        :class:`~pgqueue.JobContext` as the first argument. The options
        (:class:`~pgqueue.options.TaskOptions`): the defaults of the task's jobs (``queue``,
        ``priority``, ``max_attempts``, ``result_ttl``: keep each job's return value that long,
        see :meth:`result`); ``timeout`` (seconds) bounds one attempt; ``backoff`` maps the
        attempt number (and optionally the exception) to the retry delay (default: full-jitter
        exponential, 1 s base, 1 h cap); ``retry_on`` / ``no_retry_on`` choose which exceptions
        are retried (default: every ``Exception``; ``no_retry_on`` wins).

        Flow control, enforced across all workers: ``concurrency_limit`` (jobs of this task
        running at once), ``key_limit`` (running jobs per ``concurrency_key``, default 1),
        ``rate_limit`` (``"20/s"`` or a :class:`~pgqueue.RateLimit`), ``circuit_breaker``
        (a :class:`~pgqueue.CircuitBreaker`). ``on`` subscribes the task to events (see
        :meth:`publish`).
        """

        def register(function: Callable[P, R]) -> Task[P, R]:
            return self._register(
                Task(self, function, name=name, pass_context=pass_context, **options)
            )

        return register(func) if func is not None else register

    def _register(self, task: Task[P, R]) -> Task[P, R]:
        existing = self.tasks.get(task.name)
        if existing is not None and existing.func is not task.func:
            raise ConfigurationError(f"a different task is already named {task.name!r}")
        self.tasks[task.name] = task
        for event in task.events:
            subscribers = self.subscriptions.setdefault(event, [])
            if all(t.name != task.name for t in subscribers):
                subscribers.append(task)
        return task

    def periodic(
        self,
        cron_expression: str,
        *,
        name: str | None = None,
        args: Mapping[str, Any] | None = None,
        pass_context: bool = False,
        **options: Unpack[PeriodicOptions],
    ) -> Callable[[Callable[P, R]], Task[P, R]]:
        """Register a task that runs on a cron schedule: ``@pgq.periodic("*/5 * * * *")``.

        The schedule (named ``name``, default the task's name) is a row in
        ``pgqueue.schedules``, written by every worker at start-up; each tick is enqueued
        exactly once however many workers run. The options
        (:class:`~pgqueue.schedules.PeriodicOptions`) are the schedule's timing (``tz``;
        ``missed``, the policy for ticks missed while no worker ran: ``"skip"`` or
        ``"catch_up"``, see :mod:`pgqueue.schedules`; ``grace``; ``max_catch_up``) and the
        task's options (queue, priority, max_attempts, ...).
        """
        timing: dict[str, Any] = {
            k: v for k, v in options.items() if k in ScheduleTiming.__optional_keys__
        }
        task_options = cast("TaskOptions", {k: v for k, v in options.items() if k not in timing})

        def register(function: Callable[P, R]) -> Task[P, R]:
            task = self._register(Task(self, function, pass_context=pass_context, **task_options))
            schedule = Schedule(
                name=name or task.name,
                cron=cron_expression,
                task=task.name,
                args=dict(args or {}),
                queue=task.queue,
                priority=task.defaults["priority"],
                max_attempts=task.defaults["max_attempts"],
                **timing,
            )
            self.schedules[schedule.name] = schedule
            return task

        return register

    def declared_queues(self) -> list[str]:
        """The queues this app's tasks run on (what ``pgq work`` serves without ``--queue``),
        in order of first declaration; ``["default"]`` when no task is declared."""
        return list(dict.fromkeys(task.queue for task in self.tasks.values())) or ["default"]

    def get_task(self, name: str) -> Task[..., Any]:
        """The registered task called ``name``; raises :class:`~pgqueue.UnknownTaskError` if there
        is none."""
        try:
            return self.tasks[name]
        except KeyError:
            raise UnknownTaskError(f"no task named {name!r} is registered") from None

    def sync_declarations(self, conn: ConnectionArg | None = None) -> None:
        """Write what the code declares (task limits, breakers, ``@periodic`` schedules) to
        the database. Workers do this at start-up."""
        self.run(declarations(self), conn, atomic=True)

    async def sync_declarations_async(self, conn: AsyncConnectionArg | None = None) -> None:
        """The async twin of :meth:`sync_declarations`."""
        await self.run_async(declarations(self), conn, atomic=True)

    def migrate(self) -> None:
        """Upgrade the database schema to the newest version (same as ``pgq migrate``)."""
        upgrade(self.dsn)

    # -- connections -----------------------------------------------------------------------

    @contextmanager
    def connection(self, conn: object | None = None) -> Iterator[Connection]:
        """The psycopg connection behind ``conn`` (see :mod:`pgqueue.db.connections` for what
        is accepted), or a pooled autocommit connection (each statement commits)."""
        with self._pools.connection(conn) as c:
            yield c

    @asynccontextmanager
    async def connection_async(self, conn: object | None = None) -> AsyncIterator[AsyncConnection]:
        """The async twin of :meth:`connection`."""
        async with self._pools.connection_async(conn) as c:
            yield c

    def run(self, plan: plans.Plan[T], conn: object | None = None, *, atomic: bool = False) -> T:
        """Drive a plan on the caller's ``conn`` or a pooled connection.

        On the caller's connection pgqueue never begins or commits a transaction: statements
        join the caller's, and an ``atomic`` plan (several statements that must be all or
        nothing) runs in a savepoint inside it, so an error (a full queue, a bad parent)
        leaves the caller's transaction as it was, neither committed nor aborted. On a pooled
        connection an ``atomic`` plan gets a transaction of its own.
        """
        return self._pools.run(plan, conn, atomic=atomic)

    async def run_async(
        self, plan: plans.Plan[T], conn: object | None = None, *, atomic: bool = False
    ) -> T:
        """The async twin of :meth:`run`."""
        return await self._pools.run_async(plan, conn, atomic=atomic)

    async def _results_listener(self) -> ResultListener:
        return await self._pools.results_listener()

    def close(self) -> None:
        """Close the client's connection pools (sync; async pools need :meth:`aclose`). A pool
        the application passed in (``pool=``) is left open: it is the application's."""
        self._pools.close()

    async def aclose(self) -> None:
        """Close the client's pools and this loop's results listener (``async with pgq:``)."""
        await self._pools.aclose()

    def __enter__(self) -> PgQueue:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    async def __aenter__(self) -> PgQueue:
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.aclose()

    # -- enqueue ---------------------------------------------------------------------------

    def spec(
        self, task: str | Task[..., Any], args: Mapping[str, Any] | None, options: Mapping[str, Any]
    ) -> JobSpec:
        """Validate a job given by task name (or Task) and an args object."""
        # A task's defaults (queue, priority, max_attempts) apply when it is passed as a Task
        # or registered here under that name; a bare name of a task defined elsewhere gets the
        # global defaults unless the call says otherwise.
        name = task.name if isinstance(task, Task) else task
        registered = (
            task
            if isinstance(task, Task)
            else (self.tasks.get(name) if isinstance(name, str) else None)
        )
        defaults = registered.defaults if registered is not None else {}
        return make_spec(
            name, args or {}, options, defaults=defaults, payload_limit=self.max_payload_bytes
        )

    def enqueue(
        self,
        task: str | Task[..., Any],
        args: Mapping[str, Any] | None = None,
        *,
        conn: ConnectionArg | None = None,
        **options: Unpack[JobOptions],
    ) -> JobId:
        """Enqueue by task name with an args object (no need to import the task's code); the
        options are a call's (:class:`~pgqueue.options.JobOptions`: ``queue``, ``delay``,
        ``idempotency_key``, ...)."""
        return self.enqueue_spec(self.spec(task, args, options), conn=conn)

    async def enqueue_async(
        self,
        task: str | Task[..., Any],
        args: Mapping[str, Any] | None = None,
        *,
        conn: AsyncConnectionArg | None = None,
        **options: Unpack[JobOptions],
    ) -> JobId:
        """The async twin of :meth:`enqueue`; ``conn`` is an async connection or session."""
        return await self.enqueue_spec_async(self.spec(task, args, options), conn=conn)

    def enqueue_spec(self, spec: JobSpec, conn: object | None = None) -> JobId:
        """Write one validated job (:meth:`spec`), waiting for room in a bounded queue up to its
        ``wait_if_full``; returns its id."""
        return self._write(
            partial(enqueue_one, spec), conn, atomic=spec.needs_transaction, wait=spec.wait_if_full
        )

    async def enqueue_spec_async(self, spec: JobSpec, conn: object | None = None) -> JobId:
        """The async twin of :meth:`enqueue_spec`."""
        return await self._write_async(
            partial(enqueue_one, spec), conn, atomic=spec.needs_transaction, wait=spec.wait_if_full
        )

    def enqueue_many(
        self,
        jobs: Iterable[JobCall | JobSpec],
        *,
        conn: ConnectionArg | None = None,
        wait_if_full: float | None = None,
    ) -> list[JobId]:
        """Enqueue many jobs atomically in a few statements (COPY); ids in input order.

        A batch that would overflow a bounded queue (``max_depth``) raises
        :class:`~pgqueue.QueueFullError` before writing anything, or waits up to
        ``wait_if_full`` seconds for room."""
        plan = partial(enqueue_many, _specs(jobs))
        return self._write(plan, conn, atomic=True, wait=wait_if_full, bulk=True)

    async def enqueue_many_async(
        self,
        jobs: Iterable[JobCall | JobSpec],
        *,
        conn: AsyncConnectionArg | None = None,
        wait_if_full: float | None = None,
    ) -> list[JobId]:
        """The async twin of :meth:`enqueue_many`."""
        plan = partial(enqueue_many, _specs(jobs))
        return await self._write_async(plan, conn, atomic=True, wait=wait_if_full, bulk=True)

    def publish(
        self,
        event: str,
        payload: Mapping[str, Any] | None = None,
        *,
        conn: ConnectionArg | None = None,
    ) -> list[JobId]:
        """Enqueue one job for every task subscribed to ``event`` (``@pgq.task(on=event)``),
        with ``payload`` as its arguments, in one transaction (the caller's with ``conn``).
        Every subscriber's arguments are checked before anything is written. Returns the job
        ids in subscription order ([] when nothing subscribes)."""
        specs = self._event_specs(event, payload)
        return self.enqueue_many(specs, conn=conn) if specs else []

    async def publish_async(
        self,
        event: str,
        payload: Mapping[str, Any] | None = None,
        *,
        conn: AsyncConnectionArg | None = None,
    ) -> list[JobId]:
        """The async twin of :meth:`publish`."""
        specs = self._event_specs(event, payload)
        return await self.enqueue_many_async(specs, conn=conn) if specs else []

    def _event_specs(self, event: str, payload: Mapping[str, Any] | None) -> list[JobSpec]:
        check_name(event, "event name")
        if payload is not None and not isinstance(payload, Mapping):
            raise InvalidJobError(
                f"an event payload must be a JSON object (a mapping), got {type(payload).__name__}"
            )
        return [task.s(**dict(payload or {})).spec() for task in self.subscriptions.get(event, [])]

    def _write(
        self,
        plan: Callable[[], plans.Plan[T]],
        conn: object | None,
        *,
        atomic: bool,
        wait: float | None,
        bulk: bool = False,
    ) -> T:
        """Run a write, again after a pause while a bounded queue refuses it, for ``wait``
        seconds at most (:mod:`pgqueue.client.room`). ``bulk``: the garbage collector is paused
        while the jobs are written (:mod:`pgqueue.gc_pause`), not while waiting."""
        room = Room(wait)
        while True:
            with room.attempt(), gc_paused() if bulk else nullcontext():
                return self.run(plan(), conn, atomic=atomic)
            time.sleep(room.pause())

    async def _write_async(
        self,
        plan: Callable[[], plans.Plan[T]],
        conn: object | None,
        *,
        atomic: bool,
        wait: float | None,
        bulk: bool = False,
    ) -> T:
        """The async twin of :meth:`_write`."""
        room = Room(wait)
        while True:
            with room.attempt(), gc_paused() if bulk else nullcontext():
                return await self.run_async(plan(), conn, atomic=atomic)
            await asyncio.sleep(room.pause())

    # -- operator actions --------------------------------------------------------------------

    def cancel(self, job_id: int, *, conn: ConnectionArg | None = None) -> admin.CancelResult:
        """Cancel a job: 'cancelled' (it was waiting and is gone), 'cancelling' (it is running;
        its worker stops the handler and records it cancelled), or 'not_found'."""
        return self.run(admin.cancel(job_id), conn)

    async def cancel_async(
        self, job_id: int, *, conn: AsyncConnectionArg | None = None
    ) -> admin.CancelResult:
        """The async twin of :meth:`cancel`."""
        return await self.run_async(admin.cancel(job_id), conn)

    def progress(self, job_id: int, *, conn: ConnectionArg | None = None) -> Progress | None:
        """What the running job last reported with ``ctx.progress(...)`` (a fraction or a
        dict), as written by its worker's latest heartbeat; None while it has reported nothing
        in this attempt, or when it is not running (waiting, or finished: ask
        :meth:`result`)."""
        return cast("Progress | None", self.run(admin.job_progress(job_id), conn))

    async def progress_async(
        self, job_id: int, *, conn: AsyncConnectionArg | None = None
    ) -> Progress | None:
        """The async twin of :meth:`progress`."""
        return cast("Progress | None", await self.run_async(admin.job_progress(job_id), conn))

    def dead_letters(self, *, limit: int = 100, **filters: Any) -> list[dict[str, Any]]:
        """Dead letters, newest first. Filters: ids, task, queue, error (substring of the last
        error), since, until (timezone-aware datetimes, on the time the job died)."""
        return self.run(admin.list_dead_letters(_filter(filters), limit))

    def replay_dead_letters(
        self,
        *,
        batch_size: int = 500,
        dry_run: bool = False,
        conn: ConnectionArg | None = None,
        **filters: Any,
    ) -> int:
        """Move matching dead letters back to the queue with fresh attempts, in batches of
        ``batch_size`` (one transaction each unless ``conn`` is given). Returns how many were
        (or, with ``dry_run``, would be) replayed."""
        where = _filter(filters)
        if batch_size < 1:
            raise InvalidJobError("batch_size must be at least 1")
        if dry_run:
            return self.run(admin.count_dead_letters(where), conn)
        total = 0
        while True:
            moved = self.run(admin.replay_batch(where, batch_size), conn)
            total += len(moved)
            if len(moved) < batch_size:
                return total

    def reap(self, max_jobs: int = 1000) -> int:
        """Run the reaper once (what `pgq reaper` and pg_cron do); returns jobs recovered."""
        return self.run(admin.reap(max_jobs))


def _filter(filters: dict[str, Any]) -> admin.DeadLetterFilter:
    if "ids" in filters and filters["ids"] is not None:
        filters = {**filters, "ids": tuple(int(i) for i in filters["ids"])}
    try:
        return admin.DeadLetterFilter(**filters)
    except TypeError:
        known = ", ".join(admin.DeadLetterFilter.__dataclass_fields__)
        raise InvalidJobError(
            f"unknown dead-letter filter in {sorted(filters)} (known: {known})"
        ) from None


def _specs(jobs: Iterable[JobCall | JobSpec]) -> list[JobSpec]:
    # Validate every job before the first write, so bad input leaves nothing half-written;
    # each distinct (task, options) is validated once.
    templates: dict[Any, JobSpec] = {}
    with gc_paused():
        return [job if isinstance(job, JobSpec) else job.spec(templates=templates) for job in jobs]
