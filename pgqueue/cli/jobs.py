"""``pgq jobs``: list live jobs, show one, search all of them (``pgq jobs search`` is in
:mod:`pgqueue.cli.search_cmd`). Each parses arguments and calls :mod:`pgqueue.db.views`."""

from __future__ import annotations

from datetime import datetime
from typing import Annotated, Any

import typer

from pgqueue.cli import search_cmd
from pgqueue.cli.common import MAX_JOB_ID, command_group, example, friendly_errors, in_range
from pgqueue.cli.output import (
    OutputFormat,
    Reader,
    cell,
    console,
    dump_json,
    print_fields,
    print_rows,
    reader_options,
)
from pgqueue.client import PgQueue
from pgqueue.db import durable, search
from pgqueue.errors import PgQueueError
from pgqueue.rules.job_specs import MAX_ROWS

jobs_app = command_group(
    "Jobs: list live ones, search all of them (live, finished, dead), inspect one.",
    "pgq jobs list --state running",
)


@reader_options
def jobs_list(
    queue: Annotated[str | None, typer.Option("--queue", "-q", help="Only this queue.")] = None,
    state: Annotated[
        str | None, typer.Option("--state", help="ready, scheduled or running.")
    ] = None,
    task: Annotated[str | None, typer.Option("--task", help="Only this task.")] = None,
    tag: search_cmd.TagOption = None,
    meta: search_cmd.MetaOption = None,
    limit: Annotated[
        int, typer.Option(callback=in_range(1, MAX_ROWS), help="At most this many rows.")
    ] = 50,
    *,
    reader: Reader,
) -> None:
    """List live jobs (waiting and running), oldest first."""
    from pgqueue.db import views

    contains = search.parse_args_filter(meta or ())
    rows = reader.read(
        lambda pgq: views.jobs(
            pgq, queue=queue, state=state, task=task, tags=tag, meta=contains, limit=limit
        ),
    )
    hidden = {"max_attempts", "created_at", "worker_id"}  # in --json and `pgq jobs show`
    print_rows(
        rows,
        [c for c in views.JOB_COLUMNS if c not in hidden],
        fmt=reader.out,
        title="jobs",
        narrow_drop={"priority", "lease_left", "tags", "last_error"},
    )


@reader_options
def jobs_show(
    job_id: Annotated[int, typer.Argument(callback=in_range(1, MAX_JOB_ID), help="Job id.")],
    *,
    reader: Reader,
) -> None:
    """Everything about one job (live, dead-lettered or finished): its errors, its workflow
    neighbours, its durable steps and the actions its state allows."""
    out = reader.out
    job = reader.read(lambda pgq: _detail(pgq, job_id))
    if job is None:
        with friendly_errors():
            raise PgQueueError(f"job {job_id} not found (never existed, or succeeded)")
    if out is OutputFormat.json:
        dump_json(job)
        return
    errors = job.get("errors") or []
    fields = [
        (key, cell(_time(key, value)))
        for key, value in job.items()
        if key not in ("errors", "workflow", "actions", "steps", "parked")
    ]
    if job["parked"] is not None:
        fields.append(("parked", _parked(job["parked"])))
    fields += [("errors", str(len(errors))), ("actions", ", ".join(job["actions"]) or "none")]
    print_fields(fields, fmt=out, title=f"job {job_id}")
    if out is OutputFormat.plain:
        return
    workflow = job["workflow"]
    if workflow is not None:
        console.rule(
            f"workflow {workflow['id']}" + (f" ({workflow['name']})" if workflow["name"] else "")
        )
        for label, key in (("waits for", "parents"), ("then runs", "dependents")):
            shown = [f"{n['id']} {n['task']} ({n['state']})" for n in workflow[key]]
            console.print(
                f"{label}: {', '.join(shown) or 'nothing'}", highlight=False, markup=False
            )
    if job["steps"]:
        console.rule(f"steps ({len(job['steps'])})")
        print_rows(job["steps"], STEP_COLUMNS, fmt=out, narrow_drop={"kind", "finished_at"})
    for error in errors:
        if error.get("replayed"):
            replayed = _time("at", error.get("replayed_at"))
            console.rule(
                "replayed from the dead letters"
                + (f" at {cell(replayed)}" if replayed else "")
                + ": attempts count again from 1",
                style="blue",
            )
        at = _time("at", error.get("at"))
        console.rule(
            f"attempt {error.get('attempt', '?')}: {error.get('error', '')}"
            + (f" at {cell(at)}" if at else "")
        )
        console.print(error.get("message", ""), highlight=False, markup=False)
        if error.get("traceback"):
            console.print(error["traceback"], highlight=False, markup=False)


#: The columns of a job's steps in ``pgq jobs show`` (``--json`` has every field of
#: ``pgqueue.job_step_status``).
STEP_COLUMNS = (
    "seq",
    "name",
    "kind",
    "state",
    "attempts",
    "finished_at",
    "duration",
    "result_size",
    "error",
)


def _detail(pgq: PgQueue, job_id: int) -> dict[str, Any] | None:
    """The job (views.job_detail) with its durable steps and what it is parked on."""
    return durable.job_detail(pgq, job_id)


def _parked(parked: dict[str, Any]) -> str:
    """A parked job's line: "sleeping until <time>", "waiting for event 'x' until <time>"."""
    until = cell(parked["until"])
    if parked["kind"] == "sleep":
        return f"sleeping until {until}"
    return f"waiting for event {parked['event']!r} until {until}"


def _time(field: str, value: object) -> object:
    """A time field of the job's JSON (an ISO string) as a datetime, printed like every
    other time; anything else as it is."""
    if isinstance(value, str) and (field.endswith("_at") or field in ("at", "keep_until")):
        try:
            return datetime.fromisoformat(value)
        except ValueError:
            return value
    return value


jobs_app.command(
    "list", epilog=example("pgq jobs list --queue emails --state scheduled --limit 20")
)(jobs_list)
jobs_app.command("show", epilog=example("pgq jobs show 1042"))(jobs_show)
jobs_app.command(
    "search",
    epilog=example(
        "pgq jobs search --task billing.charge --state dead --error timeout --since 2d",
        "pgq jobs search --queue emails --args customer=42 --limit 20 --json",
    ),
)(search_cmd.jobs_search)
