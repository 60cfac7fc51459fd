"""Operator commands: ``pgq status``, ``pgq workers``, ``pgq retry``, ``pgq purge``, ``pgq
stats``. Each parses arguments and calls :mod:`pgqueue.db.views` or :mod:`pgqueue.db.ops`."""

from __future__ import annotations

from datetime import timedelta
from typing import Annotated, Any

import typer

from pgqueue.cli.common import (
    MAX_JOB_ID,
    DsnOption,
    JsonOption,
    duration_option,
    escape,
    example,
    in_range,
    open_queue,
    with_app,
)
from pgqueue.cli.output import (
    OutputFormat,
    Reader,
    console,
    dump_json,
    print_rows,
    reader_options,
    timestamp,
)
from pgqueue.client import PgQueue
from pgqueue.db import horizon, ops

# `pgq status` lists the workers that stopped this recently (the last few of them).
RECENTLY_STOPPED = timedelta(hours=1)
STOPPED_SHOWN = 5

# Queue depth columns a narrow terminal does without (`pgq stats --format json` has them all).
QUEUE_NARROW_DROP = frozenset({"waiting", "succeeded_per_min", "failed_per_min"})


@reader_options
def status(
    *,
    reader: Reader,
    snapshot_warn: Annotated[
        float,
        duration_option(
            "--snapshot-warn",
            help="Warn when a snapshot or transaction older than this holds back the xmin "
            "horizon (VACUUM cannot clean pgqueue's tables behind it).",
        ),
    ] = horizon.WARN_AFTER_SECONDS,
) -> None:
    """Queues at a glance: depth, oldest ready job, throughput, paused; workers alive, and
    those that stopped in the last hour; the jobs table's dead tuples and size, and a warning
    naming the backend (pid, application_name, state, age) that holds back the xmin horizon
    when its snapshot is older than --snapshot-warn."""
    from pgqueue.db import views

    def read(pgq: PgQueue) -> dict[str, Any]:
        workers = views.workers(pgq, stopped_within=RECENTLY_STOPPED)
        stopped = [w for w in workers if w["status"] == "stopped"]
        return {
            "queues": views.queue_stats(pgq),
            "workers": {
                "running": sum(w["status"] == "running" for w in workers),
                "lost": sum(w["status"] == "lost" for w in workers),
                "jobs_held": sum(w["jobs_held"] for w in workers),
                "slots": sum(w["concurrency"] for w in workers if w["status"] == "running"),
                "recently_stopped": sorted(stopped, key=lambda w: w["stopped_at"], reverse=True),
            },
            # Jobs that would wait for ever: no running worker runs their task.
            "unserved": views.unserved_tasks(pgq),
            # What holds back VACUUM (view pgqueue.horizon), and the tables' dead tuples.
            "horizon": horizon.horizon(pgq).as_dict(snapshot_warn),
        }

    out = reader.out
    data = reader.read(read)
    if out is OutputFormat.json:
        dump_json(data)
        return
    print_rows(
        data["queues"],
        views.QUEUE_STATS_COLUMNS,
        fmt=out,
        title="queues",
        narrow_drop=QUEUE_NARROW_DROP,
    )
    if out is OutputFormat.plain:
        return
    w = data["workers"]
    console.print(
        f"workers: {w['running']} running ({w['jobs_held']}/{w['slots']} slots busy)"
        + (f", [red]{w['lost']} lost[/red]" if w["lost"] else ""),
        highlight=False,
    )
    for gone in w["recently_stopped"][:STOPPED_SHOWN]:
        console.print(
            f"  stopped {timestamp(gone['stopped_at'])}: {gone['host']} pid {gone['pid']}, "
            f"{gone['jobs_succeeded']} succeeded, {gone['jobs_retried']} retried, "
            f"{gone['jobs_dead']} dead",
            highlight=False,
            markup=False,
        )
    if len(w["recently_stopped"]) > STOPPED_SHOWN:
        more = len(w["recently_stopped"]) - STOPPED_SHOWN
        console.print(f"  and {more} more stopped in the last hour (pgq workers --all)")
    for row in data["unserved"]:
        console.print(
            f"[red]unserved:[/red] {escape(row['task'])} (queue {escape(row['queue'])}): "
            f"{row['jobs']} job(s) waiting, and no running worker runs this task",
            highlight=False,
        )
    print_horizon(data["horizon"])


def print_horizon(report: dict[str, Any]) -> None:
    """The jobs table's dead tuples and sizes, and the horizon warning if there is one."""
    for table in report["tables"]:
        if table["table_name"] == "jobs":
            console.print(
                f"jobs table: {table['live_tuples']:,} live, {table['dead_tuples']:,} dead "
                f"tuples, {mebibytes(table['table_bytes'])} + "
                f"{mebibytes(table['index_bytes'])} indexes{rebuilt(table)}",
                highlight=False,
                markup=False,
            )
    for warning in (report["warning"], report["bloat_warning"]):
        if warning:
            # markup off: the application name is the holder's own text.
            console.print(f"warning: {warning}", style="red", highlight=False, markup=False)


def rebuilt(table: dict[str, Any]) -> str:
    """`` (rebuilt about 0.1 MB + 0.2 MB)``: what ``pgqueue.bloat`` estimates it would take."""
    estimates = (table["estimated_table_bytes"], table["estimated_index_bytes"])
    if None in estimates:
        return ""
    return f" (rebuilt about {mebibytes(estimates[0])} + {mebibytes(estimates[1])})"


def mebibytes(size: int) -> str:
    return f"{size / 2**20:,.1f} MB"


@reader_options
def workers(
    all_: Annotated[bool, typer.Option("--all", help="Include stopped workers.")] = False,
    *,
    reader: Reader,
) -> None:
    """Worker processes: host, pid, queues, started, last seen, jobs held, totals."""
    from pgqueue.db import views

    rows = reader.read(lambda pgq: views.workers(pgq, include_stopped=all_))
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
        fmt=reader.out,
        title="workers",
        formatters={"queues": ",".join},
        narrow_drop={"id", "jobs_succeeded", "jobs_dead"},
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


commands = typer.Typer()
commands.command("status", epilog=example("pgq status --json"))(status)
commands.command("workers", epilog=example("pgq workers --all"))(workers)
commands.command("retry", epilog=example("pgq retry 1042 1043"))(retry)
commands.command("purge", epilog=example("pgq purge --queue emails --task emails.send --dry-run"))(
    purge
)


@commands.command("stats", epilog=example("pgq stats --json"))
@reader_options
def stats(*, reader: Reader) -> None:
    """Queue depth per queue (the pgqueue.queue_stats view)."""
    from pgqueue.db.views import queue_stats

    rows = reader.read(queue_stats)
    print_rows(
        rows,
        ["queue", "waiting", "ready", "scheduled", "running", "dead", "oldest_ready_age", "paused"],
        fmt=reader.out,
        title="queues",
    )
