"""``pgq cron``: cron schedules (``pgqueue.schedules``) and pg_cron integration.

``list``/``pause``/``resume``/``delete`` manage the periodic jobs workers enqueue;
``install-reaper``/``uninstall-reaper`` schedule ``pgqueue.reap()`` inside PostgreSQL with pg_cron.
"""

from __future__ import annotations

import json
from dataclasses import asdict
from typing import Annotated

import typer

from pgqueue.cli.common import (
    DsnOption,
    JsonOption,
    example,
    friendly_errors,
    print_rows,
    with_app,
)
from pgqueue.db import pg_cron
from pgqueue.db.embedded import resolve_dsn

cron_app = typer.Typer(
    help="Cron schedules (list, pause, resume, delete) and the pg_cron reaper.",
    epilog=example("pgq cron list"),
    no_args_is_help=True,
)

_COLUMNS = ["name", "cron", "timezone", "task", "missed", "paused", "next_tick", "ticks_enqueued"]


@cron_app.command("list", epilog=example("pgq cron list --json"))
def list_schedules(dsn: DsnOption = None, as_json: JsonOption = False) -> None:
    """Every schedule: expression, next and last tick, ticks enqueued and skipped."""
    rows = with_app(dsn, lambda pgq: pgq.cron.schedules())
    print_rows(rows, _COLUMNS, as_json=as_json, title="schedules")


def _change(name: str, dsn: str | None, action: str) -> None:
    # pgq.cron's methods are named after the commands: pause, resume, delete.
    done = with_app(dsn, lambda pgq: getattr(pgq.cron, action)(name))
    if not done:
        typer.echo(f"no schedule named {name!r}", err=True)
        raise typer.Exit(1)
    typer.echo(f"schedule {name!r} {action}d")


@cron_app.command("pause", epilog=example("pgq cron pause nightly-report"))
def pause(
    name: Annotated[str, typer.Argument(help="Schedule name.")], dsn: DsnOption = None
) -> None:
    """Stop enqueueing a schedule's ticks."""
    _change(name, dsn, "pause")


@cron_app.command("resume", epilog=example("pgq cron resume nightly-report"))
def resume(
    name: Annotated[str, typer.Argument(help="Schedule name.")], dsn: DsnOption = None
) -> None:
    """Resume a schedule at its next tick from now (ticks while paused are not caught up)."""
    _change(name, dsn, "resume")


@cron_app.command("delete", epilog=example("pgq cron delete nightly-report"))
def delete(
    name: Annotated[str, typer.Argument(help="Schedule name.")], dsn: DsnOption = None
) -> None:
    """Delete a schedule (a worker whose code declares it with @periodic writes it again)."""
    _change(name, dsn, "delete")


NameOpt = Annotated[
    str | None,
    typer.Option("--name", help="pg_cron job name (default: pgqueue-reaper-<database>)."),
]


@cron_app.command(
    "install-reaper", epilog=example("pgq cron install-reaper --schedule '10 seconds'")
)
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
        job = pg_cron.install_reaper(resolve_dsn(dsn), schedule, name)
    if as_json:
        typer.echo(json.dumps(asdict(job)))
    else:
        typer.echo(
            f"pg_cron job {job.name!r} (id {job.id}) runs {job.command!r} in database "
            f"{job.database!r} on schedule {job.schedule!r}"
        )


@cron_app.command("uninstall-reaper", epilog=example("pgq cron uninstall-reaper"))
def uninstall_reaper(name: NameOpt = None, dsn: DsnOption = None) -> None:
    """Remove the reaper's pg_cron job."""
    with friendly_errors():
        removed = pg_cron.uninstall_reaper(resolve_dsn(dsn), name)
    typer.echo("pg_cron job removed" if removed else "no such pg_cron job")
