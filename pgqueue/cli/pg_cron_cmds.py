"""``pgq pg-cron``: the reaper scheduled inside PostgreSQL by pg_cron (no worker needed).

pg_cron is the PostgreSQL extension; ``pgq cron`` is pgqueue's own cron schedules. The two
reaper commands used to live under ``pgq cron``: those spellings still work, hidden and marked
deprecated (:func:`add_deprecated_spellings`).
"""

from __future__ import annotations

import functools
import json
from collections.abc import Callable
from dataclasses import asdict
from typing import Annotated, Any

import typer

from pgqueue.cli.common import DsnOption, JsonOption, command_group, example, friendly_errors
from pgqueue.db import pg_cron
from pgqueue.db.embedded import resolve_dsn

pg_cron_app = command_group(
    "pg_cron: run the reaper inside PostgreSQL (install-reaper, uninstall-reaper).",
    "pgq pg-cron install-reaper",
)
NameOpt = Annotated[
    str | None,
    typer.Option("--name", help="pg_cron job name (default: pgqueue-reaper-<database>)."),
]
ScheduleOpt = Annotated[
    str | None,
    typer.Option(
        help="pg_cron schedule (default: '5 seconds' on pg_cron 1.5+, else every minute)."
    ),
]


@pg_cron_app.command(
    "install-reaper", epilog=example("pgq pg-cron install-reaper --schedule '10 seconds'")
)
def install_reaper(
    schedule: ScheduleOpt = None,
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


@pg_cron_app.command("uninstall-reaper", epilog=example("pgq pg-cron uninstall-reaper"))
def uninstall_reaper(name: NameOpt = None, dsn: DsnOption = None) -> None:
    """Remove the reaper's pg_cron job."""
    with friendly_errors():
        removed = pg_cron.uninstall_reaper(resolve_dsn(dsn), name)
    typer.echo("pg_cron job removed" if removed else "no such pg_cron job")


def add_deprecated_spellings(cron_app: typer.Typer) -> None:
    """``pgq cron install-reaper`` / ``uninstall-reaper``: the same commands, hidden from the
    help, saying their new names on stderr when run (scripts written for them keep working)."""
    for name, command in (
        ("install-reaper", install_reaper),
        ("uninstall-reaper", uninstall_reaper),
    ):
        cron_app.command(name, hidden=True)(_old_spelling(name, command))


def _old_spelling(name: str, command: Callable[..., None]) -> Callable[..., None]:
    @functools.wraps(command)
    def old_spelling(*args: Any, **kwargs: Any) -> None:
        typer.echo(f"pgq cron {name} is deprecated: use pgq pg-cron {name}", err=True)
        command(*args, **kwargs)

    return old_spelling
