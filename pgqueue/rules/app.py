"""What a task, a batch task and a workflow use of the client that made them: :class:`App`.

A protocol (:class:`~pgqueue.PgQueue` is one), so the rules name the client's methods they call
without importing the client, a layer above them.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any, Protocol

if TYPE_CHECKING:
    from pgqueue.db.connections import AsyncConnectionArg, ConnectionArg
    from pgqueue.rules.job_specs import JobId, JobSpec
    from pgqueue.rules.workflow.builders import Compiled
    from pgqueue.rules.workflow.run import WorkflowRun


class App(Protocol):
    """The client a task belongs to: where its jobs are written and their results read."""

    @property
    def max_payload_bytes(self) -> int: ...

    def enqueue_spec(self, spec: JobSpec, conn: object | None = None) -> JobId: ...

    async def enqueue_spec_async(self, spec: JobSpec, conn: object | None = None) -> JobId: ...

    def enqueue_compiled(
        self, compiled: Compiled, *, conn: ConnectionArg | None = None
    ) -> WorkflowRun: ...

    async def enqueue_compiled_async(
        self, compiled: Compiled, *, conn: AsyncConnectionArg | None = None
    ) -> WorkflowRun: ...

    def result(self, job_id: int, *, timeout: float | None = None) -> Any: ...

    async def result_async(self, job_id: int, *, timeout: float | None = None) -> Any: ...
