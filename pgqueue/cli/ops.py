"""Operator commands: ``pgq status``, ``pgq jobs list/show``, ``pgq workers``, ``pgq retry``,
``pgq purge``. Each parses arguments and calls :mod:`pgqueue.inspect` or :mod:`pgqueue.ops`."""

from __future__ import annotations

import json
import sys
from typing import Annotated, Any

import typer
from rich.table import Table

from pgqueue import inspect, ops, search
from pgqueue.cli import search_cmd
from pgqueue.cli.common import (
    MAX_JOB_ID,
    DsnOption,
    JsonOption,
    ReadDsnOption,
    console,
    example,
    friendly_errors,
    in_range,
    open_queue,
    print_rows,
    with_app,
    with_reader,
)
from pgqueue.client import PgQueue
from pgqueue.job_specs import MAX_ROWS

jobs_app = typer.Typer(
    help="Jobs: list live ones, search all of them (live, finished, dead), inspect one.",
    epilog=example("pgq jobs list --state running"),
    no_args_is_help=True,
)


def status(
    dsn: DsnOption = None, read_dsn: ReadDsnOption = None, as_json: JsonOption = False
) -> None:
    """Queues at a glance: depth, oldest ready job, throughput, paused; workers alive."""

    def read(pgq: PgQueue) -> dict[str, Any]:
        workers = inspect.workers(pgq)
        return {
            "queues": inspect.queue_stats(pgq),
            "workers": {
                "running": sum(w["status"] == "running" for w in workers),
                "lost": sum(w["status"] == "lost" for w in workers),
                "jobs_held": sum(w["jobs_held"] for w in workers),
                "slots": sum(w["concurrency"] for w in workers if w["status"] == "running"),
            },
        }

    data = with_reader(dsn, read_dsn, read)
    if as_json:
        _dump(data)
        return
    print_rows(data["queues"], inspect.QUEUE_STATS_COLUMNS, as_json=False, title="queues")
    w = data["workers"]
    console.print(
        f"workers: {w['running']} running ({w['jobs_held']}/{w['slots']} slots busy)"
        + (f", [red]{w['lost']} lost[/red]" if w["lost"] else ""),
        highlight=False,
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
        lambda pgq: inspect.jobs(
            pgq, queue=queue, state=state, task=task, tags=tag, meta=contains, limit=limit
        ),
    )
    hidden = {"max_attempts", "created_at", "worker_id"}  # in --json and `pgq jobs show`
    print_rows(
        rows,
        [c for c in inspect.JOB_COLUMNS if c not in hidden],
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
    job = with_reader(dsn, read_dsn, lambda pgq: inspect.job_detail(pgq, job_id))
    if job is None:
        with friendly_errors():
            from pgqueue.errors import PgQueueError

            raise PgQueueError(f"job {job_id} not found (never existed, or succeeded)")
    if as_json:
        _dump(job)
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


def workers(
    all_: Annotated[bool, typer.Option("--all", help="Include stopped workers.")] = False,
    dsn: DsnOption = None,
    read_dsn: ReadDsnOption = None,
    as_json: JsonOption = False,
) -> None:
    """Worker processes: host, pid, queues, started, last seen, jobs held, totals."""
    rows = with_reader(dsn, read_dsn, lambda pgq: inspect.workers(pgq, include_stopped=all_))
    hidden = {
        "concurrency",
        "version",
        "stopped_at",
        "jobs_retried",
        "jobs_cancelled",
        "leases_lost",
    }
    print_rows(
        rows,
        [c for c in inspect.WORKER_COLUMNS if c not in hidden],
        as_json=as_json,
        title="workers",
        formatters={"id": lambda v: str(v)[:8], "queues": ",".join},
    )


def retry(
    job_ids: Annotated[
        list[int], typer.Argument(callback=in_range(1, MAX_JOB_ID), help="Job id(s).")
    ],
    dsn: DsnOption = None,
    as_json: JsonOption = False,
) -> None:
    """Run jobs again now: waiting ones become ready at once, dead letters are replayed."""
    result = with_app(dsn, lambda pgq: ops.retry(pgq, job_ids))
    skipped = sorted(set(job_ids) - set(result.made_ready) - set(result.replayed))
    if as_json:
        _dump({"ready": result.made_ready, "replayed": result.replayed, "skipped": skipped})
    else:
        for job_id in result.made_ready:
            typer.echo(f"job {job_id} is ready to run now")
        for job_id in result.replayed:
            typer.echo(f"job {job_id} replayed from the dead letters")
        for job_id in skipped:
            typer.echo(f"job {job_id} not retried (running, unknown or finished)")
    if skipped:
        raise typer.Exit(1)


def purge(
    queue: Annotated[str | None, typer.Option("--queue", "-q", help="Only this queue.")] = None,
    task: Annotated[str | None, typer.Option("--task", help="Only this task.")] = None,
    dead: Annotated[
        bool, typer.Option("--dead", help="Purge dead letters instead of waiting jobs.")
    ] = False,
    all_: Annotated[bool, typer.Option("--all", help="Purge in every queue.")] = False,
    yes: Annotated[bool, typer.Option("--yes", "-y", help="Do not ask for confirmation.")] = False,
    dry_run: Annotated[bool, typer.Option(help="Only count what would be deleted.")] = False,
    dsn: DsnOption = None,
    as_json: JsonOption = False,
) -> None:
    """Delete waiting jobs (or, with --dead, dead letters). Asks first unless --yes."""
    what = "dead letter(s)" if dead else "waiting job(s)"
    where = ", ".join(
        part for part in (queue and f"queue {queue!r}", task and f"task {task!r}") if part
    )
    with open_queue(dsn) as pgq:
        count = ops.purge(pgq, queue=queue, task=task, dead=dead, everything=all_, dry_run=True)
        if dry_run or count == 0:
            _report(as_json, 0, count, f"would delete {count} {what}")
            return
        if not yes:
            # No answer (no terminal, end of input) counts as no.
            typer.confirm(
                f"Delete {count} {what}{' in ' + where if where else ' in every queue'}?",
                abort=True,
            )
        deleted = ops.purge(pgq, queue=queue, task=task, dead=dead, everything=all_)
    _report(as_json, deleted, None, f"deleted {deleted} {what}")


def _report(as_json: bool, deleted: int, would: int | None, text: str) -> None:
    if as_json:
        _dump({"deleted": deleted, "would_delete": would})
    else:
        typer.echo(text)


def _dump(data: Any) -> None:
    sys.stdout.write(json.dumps(data, default=inspect.json_default, indent=2) + "\n")


def register(app: typer.Typer) -> None:
    """Add the operator commands to the ``pgq`` app."""
    app.command("status", epilog=example("pgq status --json"))(status)
    app.command("workers", epilog=example("pgq workers --all"))(workers)
    app.command("retry", epilog=example("pgq retry 1042 1043"))(retry)
    app.command("purge", epilog=example("pgq purge --queue emails --task emails.send --dry-run"))(
        purge
    )
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
