"""Writing workflows: one plan, run in one transaction (the caller's when ``conn`` is given).

Order of work: parents that already exist (``depends_on`` job ids) are looked up and locked
first, so bad input raises before anything is written; then the workflow row, the jobs (waiting
when they have parents still to succeed, otherwise ready or scheduled), their nodes, and finally
the links from existing live parents to their new dependents.

The parent of a waiting job is never left unaware of it: a live parent is locked (FOR KEY SHARE)
before the link is written, so its ack, which settles its dependents in the same statement,
waits for this transaction and then sees the link.
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from dataclasses import dataclass
from datetime import datetime, timedelta
from typing import Any, NamedTuple

from psycopg.rows import class_row
from psycopg.types.json import Jsonb

from pgqueue.db.job_rows import RESULT_TTL, due_at, input_arrays, input_row
from pgqueue.db.plan import Plan, Query, fetch_all, fetch_one, fetch_value
from pgqueue.errors import InvalidJobError, JobNotFoundError
from pgqueue.rules.job_specs import JobId, JobSpec
from pgqueue.rules.workflow.builders import Compiled, FailureStep, NodeSpec

#: How long workflow members keep their results unless the workflow or the step says.
DEFAULT_RESULT_TTL = timedelta(days=1)


@dataclass(frozen=True, slots=True)
class Written:
    workflow_id: int
    job_ids: list[int]


class _Live(NamedTuple):
    """A parent still in pgqueue.jobs (``lock_parent_jobs``)."""

    id: int
    workflow_id: int | None


class _Finished(NamedTuple):
    """A parent that left pgqueue.jobs with a record (``finished_parents``)."""

    id: int
    state: str
    result: Any
    workflow_id: int | None


class _Allocated(NamedTuple):
    now: datetime
    ids: list[int]


def enqueue_compiled(compiled: Compiled) -> Plan[Written]:
    """A chain, group, chord or DAG: always a workflow of its own."""
    return (
        yield from _write(
            compiled.nodes,
            name=compiled.name,
            on_failure=compiled.on_failure,
            result_ttl=compiled.result_ttl or DEFAULT_RESULT_TTL,
            join_parents=False,
        )
    )


def enqueue_dependents(specs: Sequence[JobSpec]) -> Plan[list[JobId]]:
    """Jobs enqueued with ``depends_on=[job ids]``: each joins the workflow of its first parent
    that has one, or a new workflow that adopts the parents."""
    nodes = [NodeSpec(spec=spec) for spec in specs]
    written = yield from _write(
        nodes, name=None, on_failure=None, result_ttl=DEFAULT_RESULT_TTL, join_parents=True
    )
    return [JobId(job_id) for job_id in written.job_ids]


def _write(
    nodes: Sequence[NodeSpec],
    *,
    name: str | None,
    on_failure: FailureStep | None,
    result_ttl: timedelta,
    join_parents: bool,
) -> Plan[Written]:
    for node in nodes:
        if node.spec.idempotency_key is not None:
            derived = " (the task's unique_by: pass unique_by=False)" if node.spec.unique_by else ""
            raise InvalidJobError(
                f"idempotency_key cannot be used for workflow jobs or with depends_on "
                f"(task {node.spec.task!r}){derived}"
            )
        if node.receive is not None and node.spec.depends_on:
            raise InvalidJobError(
                f"a workflow step that receives results cannot also depend on other jobs "
                f"(task {node.spec.task!r}, depends_on={list(node.spec.depends_on)})"
            )
    external = sorted({parent for node in nodes for parent in node.spec.depends_on})
    live: set[int] = set()
    succeeded: dict[int, Any] = {}
    parent_workflows: dict[int, int] = {}
    if external:
        rows = yield from fetch_all("lock_parent_jobs", {"ids": external}, row=class_row(_Live))
        for locked in rows:
            live.add(locked.id)
            if locked.workflow_id is not None:
                parent_workflows[locked.id] = locked.workflow_id
        gone = [job_id for job_id in external if job_id not in live]
        if gone:
            params = {"ids": gone}
            finished = yield from fetch_all("finished_parents", params, row=class_row(_Finished))
            found = {row.id: row for row in finished}
            for job_id in gone:
                if job_id not in found:
                    raise JobNotFoundError(
                        f"depends_on: job {job_id} not found (unknown, or it finished without "
                        "keeping a record; a finished job can only be depended on while its "
                        "result is kept)"
                    )
                record = found[job_id]
                if record.state != "succeeded":
                    raise InvalidJobError(
                        f"depends_on: job {job_id} already ended {record.state}, so its "
                        "dependents could never run"
                    )
                succeeded[job_id] = record.result
                if record.workflow_id is not None:
                    parent_workflows[job_id] = record.workflow_id

    joined = [parent_workflows[p] for p in external if p in parent_workflows]
    if join_parents and joined:
        workflow_id = joined[0]
    else:
        workflow_id = yield from fetch_value(
            "insert_workflow",
            {"name": name, "on_failure": _failure_json(on_failure, result_ttl)},
        )

    allocated = yield from fetch_one(
        "allocate_job_ids", {"count": len(nodes)}, row=class_row(_Allocated)
    )
    db_now, ids = allocated.now, allocated.ids
    dependents: list[list[int]] = [[] for _ in nodes]
    for index, node in enumerate(nodes):
        for parent in node.parents:
            dependents[parent].append(ids[index])
    job_rows: list[tuple[Any, ...]] = []
    node_rows: list[dict[str, Any]] = []
    edges: list[tuple[int, int]] = []  # (live existing parent, new child)
    for index, (node, job_id) in enumerate(zip(nodes, ids, strict=True)):
        spec = node.spec
        run_at = due_at(spec, db_now)
        waits = bool(node.parents) or any(p in live for p in spec.depends_on)
        state = "waiting" if waits else ("scheduled" if run_at > db_now else "ready")
        row = input_row(spec, job_id, run_at, state)
        if spec.result_ttl is None:
            # A member keeps its result for its dependents (the workflow's TTL by default).
            row = (*row[:RESULT_TTL], result_ttl, *row[RESULT_TTL + 1 :])
        job_rows.append(row)
        edges.extend((parent, job_id) for parent in spec.depends_on if parent in live)
        node_rows.append(
            {
                "job_id": job_id,
                "name": node.name,
                "parents": [ids[p] for p in node.parents] + list(spec.depends_on),
                "dependents": dependents[index],
                "receive": node.receive,
                "result_arg": node.result_arg,
                # Parents that had already succeeded count as settled from the start.
                "parent_results": {str(p): succeeded[p] for p in spec.depends_on if p in succeeded},
            }
        )
    keyed_tasks = sorted({n.spec.task for n in nodes if n.spec.concurrency_key is not None})
    if keyed_tasks:
        # As for any job with a concurrency key: its task's claims check the keys from now on.
        yield Query("mark_keyed_tasks", {"tasks": keyed_tasks})
    # pgqueue.insert_jobs ranks the members of fair queues.
    yield Query("insert_jobs", input_arrays(job_rows))
    yield Query("insert_workflow_nodes", {"workflow_id": workflow_id, "nodes": Jsonb(node_rows)})
    if edges:
        yield Query(
            "link_parents",
            {
                "parents": [parent for parent, _ in edges],
                "children": [child for _, child in edges],
                "workflow_id": workflow_id,
                "result_ttl": result_ttl,
            },
        )
    return Written(workflow_id, list(ids))


def _failure_json(step: FailureStep | None, result_ttl: timedelta) -> str | None:
    if step is None:
        return None
    spec = step.spec
    document: dict[str, Any] = {
        "task": spec.task,
        "args": json.loads(spec.args_json),
        "queue": spec.queue,
        "priority": spec.priority,
        "max_attempts": spec.max_attempts,
        "result_ttl": f"{(spec.result_ttl or result_ttl).total_seconds()} seconds",
    }
    if step.result_arg is not None:
        document["result_arg"] = step.result_arg
    if spec.meta_json is not None:
        document["meta"] = json.loads(spec.meta_json)
    if spec.tags is not None:
        document["tags"] = list(spec.tags)
    return json.dumps(document)
