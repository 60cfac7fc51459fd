"""Operator commands: ``pgq status``, ``pgq workers``, ``pgq retry``, ``pgq purge``. Each parses
arguments and calls :mod:`pgqueue.db.views` or :mod:`pgqueue.db.ops`."""

from __future__ import annotations

from typing import Annotated, Any

import typer

from pgqueue.cli.common import (
    MAX_JOB_ID,
    DsnOption,
    JsonOption,
    ReadDsnOption,
    console,
    dump_json,
    example,
    in_range,
    open_queue,
    print_rows,
    with_app,
    with_reader,
)
from pgqueue.client import PgQueue
from pgqueue.db import ops, views


def status(
    dsn: DsnOption = None, read_dsn: ReadDsnOption = None, as_json: JsonOption = False
) -> None:
    """Queues at a glance: depth, oldest ready job, throughput, paused; workers alive."""

    def read(pgq: PgQueue) -> dict[str, Any]:
        workers = views.workers(pgq)
        return {
            "queues": views.queue_stats(pgq),
            "workers": {
                "running": sum(w["status"] == "running" for w in workers),
                "lost": sum(w["status"] == "lost" for w in workers),
                "jobs_held": sum(w["jobs_held"] for w in workers),
                "slots": sum(w["concurrency"] for w in workers if w["status"] == "running"),
            },
        }

    data = with_reader(dsn, read_dsn, read)
    if as_json:
        dump_json(data)
        return
    print_rows(data["queues"], views.QUEUE_STATS_COLUMNS, as_json=False, title="queues")
    w = data["workers"]
    console.print(
        f"workers: {w['running']} running ({w['jobs_held']}/{w['slots']} slots busy)"
        + (f", [red]{w['lost']} lost[/red]" if w["lost"] else ""),
        highlight=False,
    )


def workers(
    all_: Annotated[bool, typer.Option("--all", help="Include stopped workers.")] = False,
    dsn: DsnOption = None,
    read_dsn: ReadDsnOption = None,
    as_json: JsonOption = False,
) -> None:
    """Worker processes: host, pid, queues, started, last seen, jobs held, totals."""
    rows = with_reader(dsn, read_dsn, lambda pgq: views.workers(pgq, include_stopped=all_))
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
        [c for c in views.WORKER_COLUMNS if c not in hidden],
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
        dump_json({"ready": result.made_ready, "replayed": result.replayed, "skipped": skipped})
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
        dump_json({"deleted": deleted, "would_delete": would})
    else:
        typer.echo(text)


def register(app: typer.Typer) -> None:
    """Add the operator commands to the ``pgq`` app."""
    app.command("status", epilog=example("pgq status --json"))(status)
    app.command("workers", epilog=example("pgq workers --all"))(workers)
    app.command("retry", epilog=example("pgq retry 1042 1043"))(retry)
    app.command("purge", epilog=example("pgq purge --queue emails --task emails.send --dry-run"))(
        purge
    )
