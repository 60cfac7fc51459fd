"""Read-only views of workflows (``pgqueue.workflow_overview`` and ``pgqueue.workflow_jobs``),
shared by the Python API, the CLI and anything else that shows them."""

from __future__ import annotations

from datetime import datetime
from typing import Any, NamedTuple

from psycopg.rows import class_row

from pgqueue.db.plan import Plan, fetch_all, fetch_first
from pgqueue.errors import InvalidJobError, WorkflowNotFoundError
from pgqueue.rules.job_specs import check_row_limit
from pgqueue.rules.vocabulary import WORKFLOW_STATES


class WorkflowRow(NamedTuple):
    """A row of ``pgqueue.workflow_overview``, as ``pgq workflow list`` shows it."""

    id: int
    name: str | None
    state: str
    jobs: int
    waiting: int
    ready: int
    running: int
    succeeded: int
    cancelled: int
    dead: int
    created_at: datetime
    last_finished_at: datetime | None


class MemberRow(NamedTuple):
    """A member job of a workflow (``pgqueue.workflow_jobs``)."""

    id: int
    role: str
    name: str | None
    task: str | None
    queue: str | None
    state: str
    parents: list[int]
    dependents: list[int]
    attempts: int | None
    result: Any
    last_error: str | None
    created_at: datetime | None
    finished_at: datetime | None


class _Workflow(NamedTuple):
    id: int
    name: str | None
    state: str
    created_at: datetime
    last_finished_at: datetime | None
    on_failure_task: str | None
    on_failure_job: int | None


WORKFLOW_COLUMNS = WorkflowRow._fields
MEMBER_COLUMNS = MemberRow._fields
STATES = WORKFLOW_STATES


def list_workflows(state: str | None = None, limit: int = 50) -> Plan[list[dict[str, Any]]]:
    # Checked here, not in the plan's body: bad arguments are refused before any connection.
    if state is not None and state not in STATES:
        raise InvalidJobError(f"workflow state must be one of {', '.join(STATES)}, got {state!r}")
    return _list_workflows(state, check_row_limit(limit))


def _list_workflows(state: str | None, limit: int) -> Plan[list[dict[str, Any]]]:
    params = {"state": state, "limit": limit}
    rows = yield from fetch_all("list_workflows", params, row=class_row(WorkflowRow))
    return [row._asdict() for row in rows]


def get_workflow(workflow_id: int) -> Plan[dict[str, Any]]:
    """One workflow with every member job (``jobs``, in id order) and its on_failure step."""
    params = {"workflow_id": workflow_id}
    workflow = yield from fetch_first("get_workflow", params, row=class_row(_Workflow))
    if workflow is None:
        raise WorkflowNotFoundError(f"workflow {workflow_id} not found (unknown, or pruned)")
    members = yield from fetch_all("workflow_members", params, row=class_row(MemberRow))
    failure, job = workflow.on_failure_task, workflow.on_failure_job
    return {
        "id": workflow.id,
        "name": workflow.name,
        "state": workflow.state,
        "created_at": workflow.created_at,
        "last_finished_at": workflow.last_finished_at,
        "on_failure": None
        if failure is None
        else {"task": failure, "job_id": job, "fired": job is not None},
        "jobs": [member._asdict() for member in members],
    }
