"""``pgq workflow``: list workflows and show one as a tree of jobs with their states."""

from __future__ import annotations

import json
import sys
from typing import TYPE_CHECKING, Annotated, Any

import typer

from pgqueue.cli.common import (
    MAX_JOB_ID,
    DsnOption,
    JsonOption,
    command_group,
    example,
    in_range,
    open_queue,
)
from pgqueue.cli.output import Printer, console, print_rows, printer_options
from pgqueue.db.workflow_views import WORKFLOW_COLUMNS
from pgqueue.rules.job_specs import MAX_ROWS

if TYPE_CHECKING:
    from rich.tree import Tree

workflow_app = command_group(
    "Workflows: chains, groups, chords and DAGs.", "pgq workflow list --state failing"
)

COLORS = {
    "succeeded": "green",
    "running": "cyan",
    "ready": "blue",
    "scheduled": "blue",
    "waiting": "yellow",
    "dead": "red",
    "cancelled": "magenta",
    "failed": "red",
    "failing": "red",
    "unknown": "dim",
}


@workflow_app.command("list", epilog=example("pgq workflow list --state failed --limit 10"))
@printer_options
def list_(
    state: Annotated[
        str | None,
        typer.Option(help="Only workflows in this state: running, failing, failed, succeeded."),
    ] = None,
    limit: Annotated[
        int, typer.Option(callback=in_range(1, MAX_ROWS), help="At most this many, newest first.")
    ] = 50,
    *,
    printer: Printer,
) -> None:
    """Workflows with their state and job counts (the pgqueue.workflow_overview view)."""
    rows = printer.run(lambda pgq: pgq.workflows(state=state, limit=limit))
    print_rows(
        rows,
        [c for c in WORKFLOW_COLUMNS if c != "last_finished_at"],
        fmt=printer.out,
        title="workflows",
    )


@workflow_app.command("show", epilog=example("pgq workflow show 17"))
def show(
    workflow_id: Annotated[
        int, typer.Argument(callback=in_range(1, MAX_JOB_ID), help="Workflow id.", metavar="ID")
    ],
    dsn: DsnOption = None,
    as_json: JsonOption = False,
) -> None:
    """The workflow's graph with every job's state (a job with several parents is drawn under
    the first and referenced under the others)."""
    from pgqueue.db import views

    with open_queue(dsn) as pgq:
        workflow = pgq.workflow(workflow_id)
    if as_json:
        sys.stdout.write(json.dumps(workflow, default=views.json_default, indent=2) + "\n")
        return
    console.print(render(workflow))


def render(workflow: dict[str, Any]) -> Tree:
    """The workflow as a rich tree: roots are jobs without parents in the workflow."""
    from rich.tree import Tree

    jobs = {job["id"]: job for job in workflow["jobs"]}
    title = f"workflow {workflow['id']}"
    if workflow["name"]:
        title += f" {workflow['name']!r}"
    tree = Tree(f"[bold]{title}[/bold]  {_state(workflow['state'])}  ({len(jobs)} jobs)")
    drawn: set[int] = set()

    def add(parent: Tree, job: dict[str, Any]) -> None:
        if job["id"] in drawn:
            parent.add(f"[dim]#{job['id']} {job['task']} (see above)[/dim]")
            return
        drawn.add(job["id"])
        branch = parent.add(_label(job, jobs))
        for child in job["dependents"] or []:
            if child in jobs:
                add(branch, jobs[child])

    for job in jobs.values():
        if not any(p in jobs for p in job["parents"] or []):
            add(tree, job)
    on_failure = workflow["on_failure"]
    if on_failure and not on_failure["fired"]:
        tree.add(f"[dim]on failure: {on_failure['task']} (not needed so far)[/dim]")
    return tree


def _label(job: dict[str, Any], jobs: dict[int, dict[str, Any]]) -> str:
    label = f"{_state(job['state'])} #{job['id']} {job['task']}"
    if job["name"]:
        label += f" [bold]{job['name']}[/bold]"
    if job["role"] == "on_failure":
        label = "[bold]on failure:[/bold] " + label
    outside = [p for p in job["parents"] or [] if p not in jobs]
    if outside:
        label += f" [dim](after job {', '.join(f'#{p}' for p in outside)})[/dim]"
    if job["attempts"]:
        label += f" [dim]attempts={job['attempts']}[/dim]"
    if job["state"] == "succeeded" and job["result"] is not None:
        label += f" [dim]-> {_short(json.dumps(job['result']))}[/dim]"
    if job["state"] in ("dead", "cancelled") and job["last_error"]:
        label += f" [dim]{_short(job['last_error'])}[/dim]"
    return label


def _state(state: str) -> str:
    return f"[{COLORS.get(state, 'white')}]{state}[/]"


def _short(text: str, limit: int = 60) -> str:
    text = text.replace("[", "\\[")
    return text if len(text) <= limit else text[: limit - 1] + "…"
