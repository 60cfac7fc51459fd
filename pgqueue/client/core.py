"""``PgQueue``: the application's handle on the queue: the task registry, enqueue, workflows,
results, progress and cancel; the operators' side is in its parts (``pgq.flow``, ``pgq.cron``,
``pgq.admin``, ``pgq.retention``: one module each beside this one).

Sync and async methods drive the same plans (:mod:`pgqueue.db.plan`), so they share every query
and every line of result handling. With ``conn=`` a method runs in the caller's connection and
transaction and never commits; without it, it takes a pooled connection and commits.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import (
    AsyncIterator,
    Callable,
    Collection,
    Iterable,
    Iterator,
    Mapping,
)
from contextlib import asynccontextmanager, contextmanager, nullcontext
from functools import cached_property, partial
from typing import TYPE_CHECKING, Any, Literal, TypeVar, cast, overload

import psycopg
from psycopg_pool import AsyncConnectionPool, ConnectionPool

from pgqueue.client.events import EventMethods
from pgqueue.client.group_commit import GroupCommit
from pgqueue.client.job_methods import JobMethods
from pgqueue.client.names import TaskNames, check_arguments, registered_in_process
from pgqueue.client.pools import AsyncConnection, Connection, Pools
from pgqueue.client.room import Room
from pgqueue.client.templates import CallTemplates, validated
from pgqueue.client.workflows import WorkflowMethods
from pgqueue.db import plan as plans
from pgqueue.db.connections import AsyncConnectionArg, ConnectionArg
from pgqueue.db.declarations import declarations
from pgqueue.db.enqueue_plans import enqueue_many, enqueue_one
from pgqueue.errors import ConfigurationError, UnknownTaskError
from pgqueue.handler.batch import A, BatchTask, Item
from pgqueue.rules import config, tracing
from pgqueue.rules.gc_pause import gc_paused
from pgqueue.rules.job_specs import JobId, JobSpec, spec_template, with_args
from pgqueue.rules.options import BATCH_OPTION_NAMES, BatchTaskOptions, JobOptions, TaskOptions
from pgqueue.rules.payload import check_name
from pgqueue.rules.schedules import PeriodicOptions, Schedule, ScheduleTiming
from pgqueue.rules.tasks import JobCall, P, R, Task, check_unique_by_names

if TYPE_CHECKING:
    from typing import Unpack

    from pgqueue.client.admin import Admin
    from pgqueue.client.cron import CronSchedules
    from pgqueue.client.flow_control import FlowControl
    from pgqueue.client.retention import Retention

T = TypeVar("T")
# A single job is written with the garbage collector on (a context made once: it is reusable).
_COLLECTING = nullcontext()


class PgQueue(EventMethods, WorkflowMethods, JobMethods):
    """A queue living in one PostgreSQL database.

    ``dsn`` follows the usual resolution: the argument, else ``PGQUEUE_DSN``, else
    ``DATABASE_URL``, else the embedded server (started on first use); a callable returning
    a DSN is called when the queue first connects. ``prepare=False``
    turns server-side prepared statements off (behind PgBouncer < 1.21 in transaction mode).
    ``check_task_names=False`` accepts any task name at enqueue (see :meth:`enqueue`).
    ``group_commit`` (on by default): single enqueues without ``conn=`` that threads (or tasks
    on one event loop) make while the client's previous commit is in flight are written
    together, in one transaction, each call returning its own id once that committed; a call
    that finds nothing in flight commits at once, alone (:mod:`pgqueue.client.group_commit`).

    The client holds the task registry and what an application does with its jobs (enqueue,
    publish, workflows, results, progress, cancel); the operators' side lives in its parts,
    each an attribute: :attr:`flow`, :attr:`cron`, :attr:`admin`, :attr:`retention`.
    """

    def __init__(
        self,
        dsn: str | Callable[[], str] | None = None,
        *,
        max_payload_bytes: int = config.DEFAULT_MAX_PAYLOAD_BYTES,
        pool_size: int = 10,
        prepare: bool = True,
        pool: ConnectionPool | AsyncConnectionPool | None = None,
        check_task_names: bool = True,
        group_commit: bool = True,
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
        #: queues served besides the tasks' own (see :meth:`declare_queues`)
        self.extra_queues: list[str] = []
        # The names enqueue accepts (pgqueue.client.names): registered, or declared by workers.
        self._names = TaskNames(self.tasks, check=check_task_names)
        # Concurrent single enqueues without conn= written together (pgqueue.client.group_commit).
        self._group_commit = GroupCommit(self._pools, enabled=group_commit)

    # -- the parts (each module is imported on first use: enqueueing needs none of them) ----

    @cached_property
    def flow(self) -> FlowControl:
        """Flow control: queue settings, task limits, pausing queues, circuit breakers."""
        from pgqueue.client.flow_control import FlowControl

        return FlowControl(self)

    @cached_property
    def cron(self) -> CronSchedules:
        """Cron schedules made at run time (``@pgq.periodic`` declares them in code)."""
        from pgqueue.client.cron import CronSchedules

        return CronSchedules(self)

    @cached_property
    def admin(self) -> Admin:
        """Operators' actions: dead letters (list, replay) and the reaper."""
        from pgqueue.client.admin import Admin

        return Admin(self)

    @cached_property
    def retention(self) -> Retention:
        """How long finished jobs, results and dead letters are kept, and pruning."""
        from pgqueue.client.retention import Retention

        return Retention(self)

    # -- configuration ---------------------------------------------------------------------

    @property
    def dsn(self) -> str:
        """The DSN in use (starts the embedded server when none is configured)."""
        return self._pools.dsn

    @property
    def group_commit(self) -> bool:
        """Whether concurrent enqueues without ``conn=`` are written together (see
        :class:`PgQueue`)."""
        return self._group_commit.enabled

    @property
    def pool_size(self) -> int:
        """The most connections each of the client's own pools opens."""
        return self._pools.size

    @overload
    def task(self, func: Callable[P, R], /) -> Task[P, R]: ...

    # batch_size given: the function takes the list of its jobs (pgqueue.handler.batch).
    @overload
    def task(
        self,
        func: None = None,
        /,
        *,
        name: str | None = None,
        **options: Unpack[BatchTaskOptions],
    ) -> Callable[[Callable[[list[Item[A]]], R]], BatchTask[A, R]]: ...

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
        **options: Any,
    ) -> Any:
        """Register a function as a task: ``@pgq.task`` or ``@pgq.task(queue=..., ...)``.

        ``name`` defaults to ``module.qualname``; ``pass_context`` passes a
        :class:`~pgqueue.JobContext` as the first argument. The options
        (:class:`~pgqueue.rules.options.TaskOptions`): the defaults of the task's jobs (``queue``,
        ``priority``, ``max_attempts``, ``result_ttl``: keep each job's return value that long,
        see :meth:`result`); ``timeout`` (seconds) bounds one attempt; ``backoff`` maps the
        attempt number (and optionally the exception) to the retry delay (default: full-jitter
        exponential, 1 s base, 1 h cap); ``retry_on`` / ``no_retry_on`` choose which exceptions
        are retried (default: every ``Exception``; ``no_retry_on`` wins).

        Flow control, enforced across all workers: ``concurrency_limit`` (jobs of this task
        running at once), ``rate_limit`` (``"20/s"`` or a :class:`~pgqueue.RateLimit`),
        ``circuit_breaker`` (a :class:`~pgqueue.CircuitBreaker`); per key (a job's
        ``concurrency_key``, or the argument ``limit_by`` names, e.g. ``"customer_id"``):
        ``key_limit`` (running jobs per key; default 1, with ``limit_by`` none) and
        ``key_rate_limit`` (starts per second per key). ``on`` subscribes the task to events
        (see :meth:`publish`).

        ``batch_size`` (and ``batch_wait``, :class:`~pgqueue.rules.options.BatchOptions`) make a
        batch task (:class:`~pgqueue.BatchTask`): the function takes a list of
        :class:`~pgqueue.Item`, up to ``batch_size`` jobs per call, each keeping its own
        outcome.
        """

        def register(function: Callable[..., Any]) -> Task[..., Any]:
            if BATCH_OPTION_NAMES.isdisjoint(options):
                return self._register(
                    Task(self, function, name=name, pass_context=pass_context, **options)
                )
            return self._register(
                BatchTask(self, function, name=name, pass_context=pass_context, **options)
            )

        return register(func) if func is not None else register

    def _register(self, task: Task[P, R]) -> Task[P, R]:
        existing = self.tasks.get(task.name)
        if existing is not None and existing.func is not task.func:
            raise ConfigurationError(f"a different task is already named {task.name!r}")
        self.tasks[task.name] = task
        registered_in_process(task.name)
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
        (:class:`~pgqueue.rules.schedules.PeriodicOptions`) are the schedule's timing (``tz``;
        ``missed``, the policy for ticks missed while no worker ran: ``"skip"`` or
        ``"catch_up"``, see :mod:`pgqueue.rules.schedules`; ``grace``; ``max_catch_up``) and the
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
                meta=task.defaults["meta"],
                tags=task.defaults["tags"],
                **timing,
            )
            self.schedules[schedule.name] = schedule
            return task

        return register

    def declared_queues(self) -> list[str]:
        """The queues this app's tasks run on and those :meth:`declare_queues` added (what
        ``pgq work`` serves without ``--queue``), in order of first declaration;
        ``["default"]`` when none is declared."""
        names = [*(task.queue for task in self.tasks.values()), *self.extra_queues]
        return list(dict.fromkeys(names)) or ["default"]

    def declare_queues(self, *names: str) -> None:
        """Have workers serve these queues too (without ``--queue``): for jobs enqueued with
        ``queue=...`` to a queue that no task declares as its own."""
        for name in names:
            check_name(name, "queue name")
            if name not in self.extra_queues:
                self.extra_queues.append(name)

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
        # The migration tooling loads when asked for: producers never need it.
        from pgqueue.db.migrate import upgrade

        upgrade(self.dsn)

    async def migrate_async(self) -> None:
        """The async twin of :meth:`migrate` (alembic has no async API: the same upgrade runs
        in a thread, so the event loop goes on meanwhile)."""
        await asyncio.to_thread(self.migrate)

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

    def close(self) -> None:
        """Close the client's connection pools (sync; async pools need :meth:`aclose`). A pool
        passed in (``pool=``) is left open. A closed client's next call opens them again."""
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
        if registered is not None and (type(args) is dict or isinstance(args, Mapping)):
            check_arguments(registered, args)
        if registered is not None and args and registered.binder.codec.typed:
            args = registered.binder.codec.encode(args)  # typed values checked and encoded
        if options or not isinstance(name, str):
            template = spec_template(name, options, defaults=defaults)
        else:
            template = self._templates.get(name, registered, defaults)
        spec = with_args(template, args or {}, self.max_payload_bytes)
        if registered is not None and options.get("unique_by"):
            check_unique_by_names(registered, spec.unique_by)
        limit_by = registered.limit_by if registered is not None else None
        if limit_by is not None and spec.concurrency_key is None:
            spec.concurrency_key = limit_by.of(args or {})
        return spec

    @cached_property
    def _templates(self) -> CallTemplates:
        """The validated jobs of calls without options, per task name: the name and the
        task's defaults are validated once, not at every single enqueue (about half of a
        call's validation)."""
        return CallTemplates()

    def enqueue(
        self,
        task: str | Task[..., Any],
        args: Mapping[str, Any] | None = None,
        *,
        conn: ConnectionArg | None = None,
        allow_unknown: bool = False,
        **options: Unpack[JobOptions],
    ) -> JobId:
        """Enqueue by task name with an args object (no need to import the task's code); the
        options are a call's (:class:`~pgqueue.rules.options.JobOptions`: ``queue``, ``delay``,
        ``idempotency_key``, ...).

        The name must be one this process registered or a worker declared, else
        :class:`~pgqueue.UnknownTaskError` (naming the closest known names); the args of a task
        this process registered must name its parameters (:class:`~pgqueue.InvalidJobError`).
        ``allow_unknown=True`` takes a name nobody declared yet (a task deployed later)."""
        spec = self.spec(task, args, options)
        return self.enqueue_spec(spec, conn=conn, allow_unknown=allow_unknown)

    async def enqueue_async(
        self,
        task: str | Task[..., Any],
        args: Mapping[str, Any] | None = None,
        *,
        conn: AsyncConnectionArg | None = None,
        allow_unknown: bool = False,
        **options: Unpack[JobOptions],
    ) -> JobId:
        """The async twin of :meth:`enqueue`; ``conn`` is an async connection or session."""
        spec = self.spec(task, args, options)
        return await self.enqueue_spec_async(spec, conn=conn, allow_unknown=allow_unknown)

    def enqueue_spec(
        self, spec: JobSpec, conn: object | None = None, *, allow_unknown: bool = False
    ) -> JobId:
        """Write one validated job (:meth:`spec`), waiting for room in a bounded queue up to its
        ``wait_if_full``; returns its id. Inside a trace, the job's metadata records it
        (:mod:`pgqueue.rules.tracing`). Its task name is checked as :meth:`enqueue` says."""
        if not allow_unknown and spec.task not in self._names.registered:  # (a dict lookup)
            self.require_tasks((spec.task,))
        sending = tracing.sending((spec,))
        if sending is not None:
            with sending:
                return sending.sent(self._enqueue_spec(sending.stamp(spec), conn))
        return self._enqueue_spec(spec, conn)

    def _enqueue_spec(self, spec: JobSpec, conn: object | None) -> JobId:
        if conn is None and self._group_commit.takes(spec):
            return self._group_commit.enqueue(spec)
        return self._write(
            partial(enqueue_one, spec), conn, atomic=spec.needs_transaction, wait=spec.wait_if_full
        )

    async def enqueue_spec_async(
        self, spec: JobSpec, conn: object | None = None, *, allow_unknown: bool = False
    ) -> JobId:
        """The async twin of :meth:`enqueue_spec`."""
        if not allow_unknown and spec.task not in self._names.registered:  # (a dict lookup)
            await self.require_tasks_async((spec.task,))
        sending = tracing.sending((spec,))
        if sending is not None:
            with sending:
                return sending.sent(await self._enqueue_spec_async(sending.stamp(spec), conn))
        return await self._enqueue_spec_async(spec, conn)

    async def _enqueue_spec_async(self, spec: JobSpec, conn: object | None) -> JobId:
        if conn is None and self._group_commit.takes(spec):
            return await self._group_commit.enqueue_async(spec)
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
        ``wait_if_full`` seconds for room. Every task name is checked as :meth:`enqueue`
        says, before anything is written."""
        specs = validated(jobs)
        self.require_tasks({spec.task for spec in specs})
        sending = tracing.sending(specs)
        if sending is None:
            return self._write(
                partial(enqueue_many, specs), conn, atomic=True, wait=wait_if_full, bulk=True
            )
        with sending:
            plan = partial(enqueue_many, sending.stamp_all(specs))
            return self._write(plan, conn, atomic=True, wait=wait_if_full, bulk=True)

    async def enqueue_many_async(
        self,
        jobs: Iterable[JobCall | JobSpec],
        *,
        conn: AsyncConnectionArg | None = None,
        wait_if_full: float | None = None,
    ) -> list[JobId]:
        """The async twin of :meth:`enqueue_many`."""
        specs = validated(jobs)
        await self.require_tasks_async({spec.task for spec in specs})
        sending = tracing.sending(specs)
        if sending is None:
            return await self._write_async(
                partial(enqueue_many, specs), conn, atomic=True, wait=wait_if_full, bulk=True
            )
        with sending:
            plan = partial(enqueue_many, sending.stamp_all(specs))
            return await self._write_async(plan, conn, atomic=True, wait=wait_if_full, bulk=True)

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
        while the jobs are written (:mod:`pgqueue.rules.gc_pause`), not while waiting."""
        room = Room(wait)
        while True:
            with room.attempt(), gc_paused() if bulk else _COLLECTING:
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
            with room.attempt(), gc_paused() if bulk else _COLLECTING:
                return await self.run_async(plan(), conn, atomic=atomic)
            await asyncio.sleep(room.pause())

    def require_tasks(self, names: Collection[str]) -> None:
        """Raise :class:`~pgqueue.UnknownTaskError` for a name neither registered in this
        process nor declared by a worker (:mod:`pgqueue.client.names`): set lookups, and on a
        miss one query (at most once a second) on a pooled connection of the client's, never
        ``conn=``."""
        if self._names.missing(names) and self._names.stale():
            try:
                self.run(self._names.refresh())
            except psycopg.errors.InsufficientPrivilege as exc:
                self._names.unreadable(exc)
            self._names.raise_unknown(names)

    async def require_tasks_async(self, names: Collection[str]) -> None:
        """The async twin of :meth:`require_tasks`."""
        if self._names.missing(names) and self._names.stale():
            try:
                await self.run_async(self._names.refresh())
            except psycopg.errors.InsufficientPrivilege as exc:
                self._names.unreadable(exc)
            self._names.raise_unknown(names)
