"""``pgq cron``: the cron schedules (``pgqueue.schedules``).

The group is generic: other schedule-related commands (e.g. installing a pg_cron job) belong
here too.
"""

from __future__ import annotations

from typing import Annotated

import typer

from pgqueue.cli.common import DsnOption, JsonOption, print_rows, with_app

cron_app = typer.Typer(help="Cron schedules: list, pause, resume, delete.", no_args_is_help=True)

_COLUMNS = ["name", "cron", "timezone", "task", "missed", "paused", "next_tick", "ticks_enqueued"]


@cron_app.command("list")
def list_schedules(dsn: DsnOption = None, as_json: JsonOption = False) -> None:
    """Every schedule: expression, next and last tick, ticks enqueued and skipped."""
    rows = with_app(dsn, lambda pgq: pgq.list_schedules())
    print_rows(rows, _COLUMNS, as_json=as_json, title="schedules")


def _change(name: str, dsn: str | None, action: str) -> None:
    methods = {"pause": "pause_schedule", "resume": "resume_schedule", "delete": "unschedule"}
    done = with_app(dsn, lambda pgq: getattr(pgq, methods[action])(name))
    if not done:
        typer.echo(f"no schedule named {name!r}", err=True)
        raise typer.Exit(1)
    typer.echo(f"schedule {name!r} {action}d")


@cron_app.command("pause")
def pause(
    name: Annotated[str, typer.Argument(help="Schedule name.")], dsn: DsnOption = None
) -> None:
    """Stop enqueueing a schedule's ticks."""
    _change(name, dsn, "pause")


@cron_app.command("resume")
def resume(
    name: Annotated[str, typer.Argument(help="Schedule name.")], dsn: DsnOption = None
) -> None:
    """Resume a schedule at its next tick from now (ticks while paused are not caught up)."""
    _change(name, dsn, "resume")


@cron_app.command("delete")
def delete(
    name: Annotated[str, typer.Argument(help="Schedule name.")], dsn: DsnOption = None
) -> None:
    """Delete a schedule (a worker whose code declares it with @periodic writes it again)."""
    _change(name, dsn, "delete")
