"""The part of :class:`~pgqueue.PgQueue` for results, workflows and retention.

A mixin so the core client module stays small; every method drives a plan from
:mod:`pgqueue.results`, :mod:`pgqueue.workflow.plan` or :mod:`pgqueue.retention`, the sync and
async twins sharing all of it.
"""

from __future__ import annotations

import asyncio
import contextlib
from datetime import timedelta
from typing import TYPE_CHECKING, Any, TypeVar

import psycopg

from pgqueue import retention as retention_plans
from pgqueue.results import Deadline, read_outcome, wait_for_result
from pgqueue.results_listener import ResultListener
from pgqueue.workflow.builders import Compiled, Workflow
from pgqueue.workflow.inspect import get_workflow, list_workflows
from pgqueue.workflow.plan import enqueue_compiled
from pgqueue.workflow.run import WorkflowRun

if TYPE_CHECKING:
    from pgqueue.db.connections import AsyncConnectionArg, ConnectionArg
    from pgqueue.db.plan import Plan

T = TypeVar("T")


class WorkflowMethods:
    if TYPE_CHECKING:
        # Provided by PgQueue.
        @property
        def dsn(self) -> str: ...

        def run(
            self, plan: Plan[T], conn: ConnectionArg | None = None, *, atomic: bool = False
        ) -> T: ...

        async def run_async(
            self, plan: Plan[T], conn: AsyncConnectionArg | None = None, *, atomic: bool = False
        ) -> T: ...

        async def _results_listener(self) -> ResultListener: ...
    # -- results -------------------------------------------------------------------------------

    def result(self, job_id: int, *, timeout: float | None = None) -> Any:
        """Wait for a job's result (its handler's return value, stored as JSON).

        Woken by NOTIFY when the job finishes. Raises :class:`~pgqueue.JobDeadError` or
        :class:`~pgqueue.JobCancelledError` if it ended that way,
        :class:`~pgqueue.ResultUnavailableError` if it does not keep its result (no
        ``result_ttl``; also once such a job succeeded and left the queue) or the result
        expired, :class:`~pgqueue.ResultTimeoutError` after ``timeout`` seconds (None: wait for
        ever), :class:`~pgqueue.JobNotFoundError` for an id pgqueue never handed out.
        """
        with psycopg.connect(self.dsn, autocommit=True) as conn:
            return self.run(wait_for_result(int(job_id), timeout), conn)

    async def result_async(self, job_id: int, *, timeout: float | None = None) -> Any:
        """The async twin of :meth:`result`. The calls on one event loop share one LISTEN
        connection (:mod:`pgqueue.results_listener`) and read through the client's pool, so
        awaiting results in many requests at once does not open a connection each."""
        job_id = int(job_id)
        deadline = Deadline(job_id, timeout)
        listener = await self._results_listener()
        with listener.watch(job_id) as woken:
            while True:
                woken.clear()  # before the read: a notification after it still counts
                finished, value = await self.run_async(read_outcome(job_id))
                if finished:
                    return value
                with contextlib.suppress(TimeoutError):
                    await asyncio.wait_for(woken.wait(), deadline.next_wait())

    # -- workflows -----------------------------------------------------------------------------

    def enqueue_workflow(
        self, workflow: Workflow, *, conn: ConnectionArg | None = None
    ) -> WorkflowRun:
        """Write a chain, group, chord or DAG atomically (in ``conn``'s transaction if given)."""
        return self.enqueue_compiled(workflow.compile(), conn=conn)

    async def enqueue_workflow_async(
        self, workflow: Workflow, *, conn: AsyncConnectionArg | None = None
    ) -> WorkflowRun:
        """The async twin of :meth:`enqueue_workflow`."""
        return await self.enqueue_compiled_async(workflow.compile(), conn=conn)

    def enqueue_compiled(
        self, compiled: Compiled, *, conn: ConnectionArg | None = None
    ) -> WorkflowRun:
        """Write a compiled workflow (``workflow.compile()``) atomically; returns its
        :class:`~pgqueue.WorkflowRun`."""
        written = self.run(enqueue_compiled(compiled), conn, atomic=True)
        return WorkflowRun.of(self, written.workflow_id, written.job_ids, compiled)

    async def enqueue_compiled_async(
        self, compiled: Compiled, *, conn: AsyncConnectionArg | None = None
    ) -> WorkflowRun:
        """The async twin of :meth:`enqueue_compiled`."""
        written = await self.run_async(enqueue_compiled(compiled), conn, atomic=True)
        return WorkflowRun.of(self, written.workflow_id, written.job_ids, compiled)

    def workflow(self, workflow_id: int) -> dict[str, Any]:
        """A workflow with its state and every job's state (the ``pgqueue.workflow_jobs``
        view); raises :class:`~pgqueue.WorkflowNotFoundError`."""
        return self.run(get_workflow(int(workflow_id)))

    def workflows(self, *, state: str | None = None, limit: int = 50) -> list[dict[str, Any]]:
        """Workflows, newest first (``pgqueue.workflow_overview``); ``state``: running,
        failing, failed or succeeded."""
        return self.run(list_workflows(state, limit))

    # -- retention -----------------------------------------------------------------------------

    def retention(self) -> retention_plans.RetentionSettings:
        """The retention settings every worker uses (the ``pgqueue.retention`` row)."""
        return self.run(retention_plans.get_settings())

    def set_retention(
        self,
        *,
        history: float | timedelta | None = None,
        record_succeeded: bool | None = None,
        dead_letters: float | timedelta | str | None = None,
    ) -> retention_plans.RetentionSettings:
        """Change retention for every worker at once. ``history``: how long job_history rows
        are kept (0: none); ``record_succeeded``: record every succeeded job;
        ``dead_letters``: purge dead letters older than this, or ``"never"``. Settings left
        as None do not change."""
        return self.run(
            retention_plans.set_settings(
                history=history, record_succeeded=record_succeeded, dead_letters=dead_letters
            ),
            atomic=True,
        )

    def prune(
        self, *, batch_size: int = retention_plans.PRUNE_BATCH
    ) -> retention_plans.PruneReport:
        """One pruning pass (what every worker's pruner does periodically)."""
        return self.run(retention_plans.prune(batch_size))
