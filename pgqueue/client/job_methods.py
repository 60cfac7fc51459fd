"""``PgQueue``'s methods about one job after its enqueue (a base class of
:class:`~pgqueue.PgQueue`): its result, its progress, cancelling it. Sync and async drive the
same plans."""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import Coroutine
from typing import TYPE_CHECKING, Any, TypeVar, cast, overload

import psycopg

from pgqueue.db import plan as plans
from pgqueue.db.connections import AsyncConnectionArg, ConnectionArg
from pgqueue.db.results import Deadline, read_outcome, wait_for_result
from pgqueue.rules.job_specs import JobId
from pgqueue.rules.options import check_job_id
from pgqueue.rules.progress import Progress

if TYPE_CHECKING:
    from pgqueue.client.pools import Pools
    from pgqueue.db.admin import CancelResult
    from pgqueue.rules.tasks import Task

T = TypeVar("T")


class JobMethods(plans.Runner):
    """A job's :meth:`result`, :meth:`progress` and :meth:`cancel`, and their async twins."""

    if TYPE_CHECKING:  # PgQueue's (see pgqueue.client.core)
        _pools: Pools
        tasks: dict[str, Task[..., Any]]

        @property
        def dsn(self) -> str: ...

    @overload
    def result(
        self, job_id: JobId[Coroutine[Any, Any, T]], *, timeout: float | None = None
    ) -> T: ...

    @overload
    def result(self, job_id: JobId[T], *, timeout: float | None = None) -> T: ...

    @overload
    def result(self, job_id: int, *, timeout: float | None = None) -> Any: ...

    def result(self, job_id: int, *, timeout: float | None = None) -> Any:
        """Wait for a job's result (its handler's return value, stored as JSON), typed by the
        task's return annotation when this process registered the task (:mod:`pgqueue.rules.codec`:
        a ``datetime``, a dataclass, ...).

        Woken by NOTIFY when the job finishes. Raises :class:`~pgqueue.JobDeadError` or
        :class:`~pgqueue.JobCancelledError` if it ended that way,
        :class:`~pgqueue.ResultUnavailableError` if it does not keep its result (no
        ``result_ttl``; also once such a job succeeded and left the queue) or the result
        expired, :class:`~pgqueue.ResultTimeoutError` after ``timeout`` seconds (None: wait for
        ever), :class:`~pgqueue.JobNotFoundError` for an id pgqueue never handed out.

        For a type checker, the result of a ``JobId[R]`` (what ``task.enqueue(...)`` returns) is
        an ``R`` (what the coroutine returns, for an ``async def`` task); of a bare id, ``Any``.
        """
        job_id = check_job_id(job_id)  # 1.5 is refused, not read as job 1
        deadline = Deadline(job_id, timeout)  # a bad timeout is refused before any read
        # A job that has ended needs no listening connection: one read through the pool.
        finished, value = self.run(read_outcome(job_id, self._decode_result))
        if finished:
            return value
        # One still live is waited for on a connection of its own (the plan LISTENs on it,
        # which a pooled connection must not keep); it reads again after its LISTEN, so an
        # outcome committed since the read above is not missed.
        with psycopg.connect(self.dsn, autocommit=True) as conn:
            return self.run(
                wait_for_result(job_id, timeout, self._decode_result, deadline=deadline), conn
            )

    @overload
    async def result_async(
        self, job_id: JobId[Coroutine[Any, Any, T]], *, timeout: float | None = None
    ) -> T: ...

    @overload
    async def result_async(self, job_id: JobId[T], *, timeout: float | None = None) -> T: ...

    @overload
    async def result_async(self, job_id: int, *, timeout: float | None = None) -> Any: ...

    async def result_async(self, job_id: int, *, timeout: float | None = None) -> Any:
        """The async twin of :meth:`result`. The calls on one event loop share one LISTEN
        connection (:mod:`pgqueue.db.results_listener`) and read through the client's pool, so
        awaiting results in many requests at once does not open a connection each."""
        job_id = check_job_id(job_id)  # 1.5 is refused, not read as job 1
        deadline = Deadline(job_id, timeout)
        listener = await self._pools.results_listener()
        with listener.watch(job_id) as woken:
            while True:
                woken.clear()  # before the read: a notification after it still counts
                finished, value = await self.run_async(read_outcome(job_id, self._decode_result))
                if finished:
                    return value
                # Out of the suppress below: its ResultTimeoutError is a TimeoutError too.
                wait = deadline.next_wait()
                with contextlib.suppress(TimeoutError):
                    await asyncio.wait_for(woken.wait(), wait)

    def _decode_result(self, task: str, value: Any) -> Any:
        """A stored result typed by its task's return annotation, when this process registered
        the task (:mod:`pgqueue.rules.codec`); else the JSON as stored."""
        registered = self.tasks.get(task)
        return value if registered is None else registered.binder.codec.decode_result(value)

    def progress(self, job_id: int, *, conn: ConnectionArg | None = None) -> Progress | None:
        """What the running job last reported with ``ctx.progress(...)`` (a fraction or a
        dict), as written by its worker's latest heartbeat; None while it has reported nothing
        in this attempt, or when it is not running (waiting, or finished: ask
        :meth:`result`)."""
        from pgqueue.db.admin import job_progress  # the operators' queries: loaded when used

        return cast("Progress | None", self.run(job_progress(job_id), conn))

    async def progress_async(
        self, job_id: int, *, conn: AsyncConnectionArg | None = None
    ) -> Progress | None:
        """The async twin of :meth:`progress`."""
        from pgqueue.db.admin import job_progress

        return cast("Progress | None", await self.run_async(job_progress(job_id), conn))

    def cancel(self, job_id: int, *, conn: ConnectionArg | None = None) -> CancelResult:
        """Cancel a job: 'cancelled' (it was waiting and is gone), 'cancelling' (it is running;
        its worker stops the handler and records it cancelled), or 'not_found'."""
        from pgqueue.db.admin import cancel as cancel_job

        return self.run(cancel_job(job_id), conn)

    async def cancel_async(
        self, job_id: int, *, conn: AsyncConnectionArg | None = None
    ) -> CancelResult:
        """The async twin of :meth:`cancel`."""
        from pgqueue.db.admin import cancel as cancel_job

        return await self.run_async(cancel_job(job_id), conn)
