"""``pgq jobs``: list live jobs, show one, search all of them (``pgq jobs search`` is in
:mod:`pgqueue.cli.search_cmd`). Each parses arguments and calls :mod:`pgqueue.db.views`."""

from __future__ import annotations

import json
from typing import Annotated

import typer
from rich.table import Table

from pgqueue.cli import search_cmd
from pgqueue.cli.common import (
    MAX_JOB_ID,
    DsnOption,
    JsonOption,
    ReadDsnOption,
    console,
    dump_json,
    example,
    friendly_errors,
    in_range,
    print_rows,
    with_reader,
)
from pgqueue.db import search, views
from pgqueue.errors import PgQueueError
from pgqueue.rules.job_specs import MAX_ROWS

jobs_app = typer.Typer(
    help="Jobs: list live ones, search all of them (live, finished, dead), inspect one.",
    epilog=example("pgq jobs list --state running"),
    no_args_is_help=True,
)


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
    dsn: DsnOption = None,
    read_dsn: ReadDsnOption = None,
    as_json: JsonOption = False,
) -> None:
    """List live jobs (waiting and running), oldest first."""
    contains = search.parse_args_filter(meta or ())
    rows = with_reader(
        dsn,
        read_dsn,
        lambda pgq: views.jobs(
            pgq, queue=queue, state=state, task=task, tags=tag, meta=contains, limit=limit
        ),
    )
    hidden = {"max_attempts", "created_at", "worker_id"}  # in --json and `pgq jobs show`
    print_rows(
        rows,
        [c for c in views.JOB_COLUMNS if c not in hidden],
        as_json=as_json,
        title="jobs",
    )


def jobs_show(
    job_id: Annotated[int, typer.Argument(callback=in_range(1, MAX_JOB_ID), help="Job id.")],
    dsn: DsnOption = None,
    read_dsn: ReadDsnOption = None,
    as_json: JsonOption = False,
) -> None:
    """Everything about one job (live, dead-lettered or finished): its errors, its workflow
    neighbours and the actions its state allows."""
    job = with_reader(dsn, read_dsn, lambda pgq: views.job_detail(pgq, job_id))
    if job is None:
        with friendly_errors():
            raise PgQueueError(f"job {job_id} not found (never existed, or succeeded)")
    if as_json:
        dump_json(job)
        return
    table = Table(title=f"job {job_id}", show_header=False)
    table.add_column("field", style="bold")
    table.add_column("value")
    errors = job.get("errors") or []
    for key, value in job.items():
        if key not in ("errors", "workflow", "actions"):
            table.add_row(key, json.dumps(value) if isinstance(value, dict | list) else str(value))
    table.add_row("errors", str(len(errors)))
    table.add_row("actions", ", ".join(job["actions"]) or "none")
    console.print(table)
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
    for error in errors:
        console.rule(f"attempt {error.get('attempt', '?')}: {error.get('error', '')}")
        console.print(error.get("message", ""), highlight=False, markup=False)
        if error.get("traceback"):
            console.print(error["traceback"], highlight=False, markup=False)


def register(app: typer.Typer) -> None:
    """Add ``pgq jobs`` to the ``pgq`` app."""
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
    app.add_typer(jobs_app, name="jobs")
