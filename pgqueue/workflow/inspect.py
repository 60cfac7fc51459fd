"""Read-only views of workflows (``pgqueue.workflow_overview`` and ``pgqueue.workflow_jobs``),
shared by the Python API, the CLI and anything else that shows them."""

from __future__ import annotations

from typing import Any

from pgqueue.db.plan import Plan, Query
from pgqueue.enqueue import check_limit
from pgqueue.errors import InvalidJobError, WorkflowNotFoundError

WORKFLOW_COLUMNS = (
    "id",
    "name",
    "state",
    "jobs",
    "waiting",
    "ready",
    "running",
    "succeeded",
    "cancelled",
    "dead",
    "created_at",
    "last_finished_at",
)
MEMBER_COLUMNS = (
    "id",
    "role",
    "name",
    "task",
    "queue",
    "state",
    "parents",
    "dependents",
    "attempts",
    "result",
    "last_error",
    "created_at",
    "finished_at",
)
STATES = ("running", "failing", "failed", "succeeded")


def list_workflows(state: str | None = None, limit: int = 50) -> Plan[list[dict[str, Any]]]:
    # Checked here, not in the plan's body: bad arguments are refused before any connection.
    if state is not None and state not in STATES:
        raise InvalidJobError(f"workflow state must be one of {', '.join(STATES)}, got {state!r}")
    return _list_workflows(state, check_limit(limit))


def _list_workflows(state: str | None, limit: int) -> Plan[list[dict[str, Any]]]:
    rows = yield Query("list_workflows", {"state": state, "limit": limit})
    return [dict(zip(WORKFLOW_COLUMNS, row, strict=True)) for row in rows]


def get_workflow(workflow_id: int) -> Plan[dict[str, Any]]:
    """One workflow with every member job (``jobs``, in id order) and its on_failure step."""
    rows = yield Query("get_workflow", {"workflow_id": workflow_id})
    if not rows:
        raise WorkflowNotFoundError(f"workflow {workflow_id} not found (unknown, or pruned)")
    wid, name, state, created_at, last_finished_at, on_failure, on_failure_job = rows[0]
    members = yield Query("workflow_members", {"workflow_id": workflow_id})
    return {
        "id": wid,
        "name": name,
        "state": state,
        "created_at": created_at,
        "last_finished_at": last_finished_at,
        "on_failure": None
        if on_failure is None
        else {"task": on_failure, "job_id": on_failure_job, "fired": on_failure_job is not None},
        "jobs": [dict(zip(MEMBER_COLUMNS, row, strict=True)) for row in members],
    }
