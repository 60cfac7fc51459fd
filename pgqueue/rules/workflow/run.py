"""A workflow once written: its id, its jobs, and a way to wait for its result."""

from __future__ import annotations

import time
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from pgqueue.rules.durations import check_timeout
from pgqueue.rules.workflow.builders import Compiled, Node

if TYPE_CHECKING:
    from pgqueue.rules.app import App


@dataclass(frozen=True)
class WorkflowRun:
    """What ``enqueue()`` of a chain, group, chord or DAG returns.

    ``id`` is the workflow id (``pgq workflow show ID``); ``job_ids`` are the jobs in the order
    the workflow was built; ``run[node]`` (a DAG node or its name) is one node's job id.
    """

    app: App = field(repr=False)
    id: int
    job_ids: list[int]
    output_ids: list[int]
    list_output: bool
    names: dict[str, int] = field(default_factory=dict, repr=False)

    @classmethod
    def of(cls, app: App, workflow_id: int, job_ids: list[int], compiled: Compiled) -> WorkflowRun:
        """The run of a workflow just written: its id, its jobs' ids (in build order) and which of
        them give the workflow's result."""
        return cls(
            app,
            workflow_id,
            job_ids,
            [job_ids[i] for i in compiled.outputs],
            compiled.list_output,
            {name: job_ids[i] for name, i in compiled.names.items()},
        )

    def __getitem__(self, node: Node | str | int) -> int:
        if isinstance(node, Node):
            return self.job_ids[node.index]
        if isinstance(node, str):
            return self.names[node]
        return self.job_ids[node]

    def result(self, timeout: float | None = None) -> Any:
        """Wait for the workflow's result: the last step's (chain, chord), the list of every
        member's (group), or the list of the DAG's final nodes' results. Raises like
        ``pgq.result()`` if one of them ended dead or cancelled."""
        deadline = _deadline(timeout)
        values = [self.app.result(job_id, timeout=_left(deadline)) for job_id in self.output_ids]
        return values if self.list_output else values[0]

    async def result_async(self, timeout: float | None = None) -> Any:
        """The async twin of :meth:`result`."""
        deadline = _deadline(timeout)
        values = [
            await self.app.result_async(job_id, timeout=_left(deadline))
            for job_id in self.output_ids
        ]
        return values if self.list_output else values[0]


def _deadline(timeout: float | None) -> float | None:
    # Checked as pgq.result() checks it, before the first wait: _left() would turn a
    # negative or NaN timeout into 0.
    timeout = check_timeout(timeout)
    return None if timeout is None else time.monotonic() + timeout


def _left(deadline: float | None) -> float | None:
    return None if deadline is None else max(0.0, deadline - time.monotonic())
