"""``pgq cron``: pg_cron integration (``install-reaper``, ``uninstall-reaper``)."""

from __future__ import annotations

import json
from dataclasses import asdict
from typing import Annotated

import typer

from pgqueue import config, pgcron
from pgqueue.cli.common import DsnOption, JsonOption, friendly_errors

cron_app = typer.Typer(help="Scheduling with pg_cron.", no_args_is_help=True)

NameOpt = Annotated[
    str | None,
    typer.Option("--name", help="pg_cron job name (default: pgqueue-reaper-<database>)."),
]


@cron_app.command("install-reaper")
def install_reaper(
    schedule: Annotated[
        str | None,
        typer.Option(
            help="pg_cron schedule (default: '5 seconds' on pg_cron 1.5+, else every minute)."
        ),
    ] = None,
    name: NameOpt = None,
    dsn: DsnOption = None,
    as_json: JsonOption = False,
) -> None:
    """Schedule pgqueue.reap() in pg_cron, so expired leases are recovered without any worker."""
    with friendly_errors():
        job = pgcron.install_reaper(config.resolve_dsn(dsn), schedule, name)
    if as_json:
        typer.echo(json.dumps(asdict(job)))
    else:
        typer.echo(
            f"pg_cron job {job.name!r} (id {job.id}) runs {job.command!r} in database "
            f"{job.database!r} on schedule {job.schedule!r}"
        )


@cron_app.command("uninstall-reaper")
def uninstall_reaper(name: NameOpt = None, dsn: DsnOption = None) -> None:
    """Remove the reaper's pg_cron job."""
    with friendly_errors():
        removed = pgcron.uninstall_reaper(config.resolve_dsn(dsn), name)
    typer.echo("pg_cron job removed" if removed else "no such pg_cron job")
