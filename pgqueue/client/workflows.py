"""``PgQueue``'s workflow methods (a base class of :class:`~pgqueue.PgQueue`): write a chain,
group, chord or DAG, and read workflows back. Sync and async drive the same plans.

The workflow modules (their plans, views and run handles) are imported by the methods that use
them: a worker, and a client that never writes a workflow, does not load them
(tests/integration/test_worker_imports.py).
"""

from __future__ import annotations

from collections.abc import Collection
from dataclasses import replace
from typing import TYPE_CHECKING, Any, TypeVar, cast

from pgqueue.db import plan as plans
from pgqueue.db.connections import AsyncConnectionArg, ConnectionArg
from pgqueue.rules import tracing

if TYPE_CHECKING:
    from pgqueue.rules.app import App
    from pgqueue.rules.workflow.builders import Compiled, Workflow
    from pgqueue.rules.workflow.run import WorkflowRun

T = TypeVar("T")


class WorkflowMethods(plans.Runner):
    """Workflows: :meth:`enqueue_workflow`, :meth:`workflow`, :meth:`workflows` and their
    async twins."""

    if TYPE_CHECKING:  # PgQueue's (see pgqueue.client.core)

        def require_tasks(self, names: Collection[str]) -> None: ...

        async def require_tasks_async(self, names: Collection[str]) -> None: ...

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
        :class:`~pgqueue.WorkflowRun`. Inside a trace, every member's metadata records it.
        Every member's task name is checked as :meth:`enqueue` says."""
        from pgqueue.db.workflow_plans import enqueue_compiled
        from pgqueue.rules.workflow.run import WorkflowRun

        self.require_tasks(_task_names(compiled))
        sending = tracing.sending([node.spec for node in compiled.nodes])
        if sending is not None:
            with sending:
                stamped = _stamped(compiled, sending)
                written = self.run(enqueue_compiled(stamped), conn, atomic=True)
                return WorkflowRun.of(_app(self), written.workflow_id, written.job_ids, stamped)
        written = self.run(enqueue_compiled(compiled), conn, atomic=True)
        return WorkflowRun.of(_app(self), written.workflow_id, written.job_ids, compiled)

    async def enqueue_compiled_async(
        self, compiled: Compiled, *, conn: AsyncConnectionArg | None = None
    ) -> WorkflowRun:
        """The async twin of :meth:`enqueue_compiled`."""
        from pgqueue.db.workflow_plans import enqueue_compiled
        from pgqueue.rules.workflow.run import WorkflowRun

        await self.require_tasks_async(_task_names(compiled))
        sending = tracing.sending([node.spec for node in compiled.nodes])
        if sending is not None:
            with sending:
                stamped = _stamped(compiled, sending)
                written = await self.run_async(enqueue_compiled(stamped), conn, atomic=True)
                return WorkflowRun.of(_app(self), written.workflow_id, written.job_ids, stamped)
        written = await self.run_async(enqueue_compiled(compiled), conn, atomic=True)
        return WorkflowRun.of(_app(self), written.workflow_id, written.job_ids, compiled)

    def workflow(self, workflow_id: int, *, conn: ConnectionArg | None = None) -> dict[str, Any]:
        """A workflow with its state and every job's state (the ``pgqueue.workflow_jobs``
        view); raises :class:`~pgqueue.WorkflowNotFoundError`."""
        from pgqueue.db.workflow_views import get_workflow

        return self.run(get_workflow(int(workflow_id)), conn)

    async def workflow_async(
        self, workflow_id: int, *, conn: AsyncConnectionArg | None = None
    ) -> dict[str, Any]:
        """The async twin of :meth:`workflow`."""
        from pgqueue.db.workflow_views import get_workflow

        return await self.run_async(get_workflow(int(workflow_id)), conn)

    def workflows(
        self, *, state: str | None = None, limit: int = 50, conn: ConnectionArg | None = None
    ) -> list[dict[str, Any]]:
        """Workflows, newest first (``pgqueue.workflow_overview``); ``state``: running,
        failing, failed or succeeded."""
        from pgqueue.db.workflow_views import list_workflows

        return self.run(list_workflows(state, limit), conn)

    async def workflows_async(
        self, *, state: str | None = None, limit: int = 50, conn: AsyncConnectionArg | None = None
    ) -> list[dict[str, Any]]:
        """The async twin of :meth:`workflows`."""
        from pgqueue.db.workflow_views import list_workflows

        return await self.run_async(list_workflows(state, limit), conn)


def _stamped(compiled: Compiled, sending: tracing.Sending) -> Compiled:
    """A copy of ``compiled`` whose members (and on_failure step) record the trace."""
    nodes = [replace(node, spec=sending.stamp(node.spec)) for node in compiled.nodes]
    step = compiled.on_failure
    on_failure = None if step is None else replace(step, spec=sending.stamp(step.spec))
    return replace(compiled, nodes=nodes, on_failure=on_failure)


def _task_names(compiled: Compiled) -> set[str]:
    names = {node.spec.task for node in compiled.nodes}
    if compiled.on_failure is not None:
        names.add(compiled.on_failure.spec.task)
    return names


def _app(methods: WorkflowMethods) -> App:
    """The PgQueue these methods belong to, as a workflow run holds it."""
    return cast("App", methods)
