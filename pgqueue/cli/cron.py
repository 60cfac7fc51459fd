"""``pgq cron``: cron schedules (``pgqueue.schedules``): the periodic jobs workers enqueue.

``list``/``pause``/``resume``/``delete``. (pg_cron, the PostgreSQL extension, has its own
group: ``pgq pg-cron``, pgqueue/cli/pg_cron_cmds.py; ``pgq cron install-reaper`` and
``uninstall-reaper`` are its deprecated spellings, kept working and hidden.)
"""

from __future__ import annotations

from typing import Annotated, Any

import typer

from pgqueue.cli.common import DsnOption, command_group, example, with_app
from pgqueue.cli.listing import list_command
from pgqueue.cli.pg_cron_cmds import add_deprecated_spellings
from pgqueue.client import PgQueue

cron_app = command_group("Cron schedules: list, pause, resume, delete.", "pgq cron list")

_COLUMNS = ["name", "cron", "timezone", "task", "missed", "paused", "next_tick", "ticks_enqueued"]


@list_command(cron_app, columns=_COLUMNS, title="schedules", shown_by="pgq cron list --json")
def list_schedules(pgq: PgQueue) -> list[dict[str, Any]]:
    """Every schedule: expression, next and last tick, ticks enqueued and skipped."""
    return pgq.cron.schedules()


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


add_deprecated_spellings(cron_app)
