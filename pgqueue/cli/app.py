"""The ``pgq`` application: every command by name and the module it lives in (each imported
when the command is used: :mod:`pgqueue.cli.lazy`), and the root's own ``--version``."""

from __future__ import annotations

from typing import Annotated

import typer

from pgqueue._version import __version__
from pgqueue.cli.common import example
from pgqueue.cli.lazy import LazyGroup, command, group


class Pgq(LazyGroup):
    """``pgq``'s commands, in the order ``pgq --help`` lists them."""

    lazy = {
        "work": command("pgqueue.cli.worker_cmds"),
        "reaper": command("pgqueue.cli.worker_cmds"),
        "maintain": command("pgqueue.cli.maintain_cmd"),
        "cancel": command("pgqueue.cli.control"),
        "pause": command("pgqueue.cli.control"),
        "resume": command("pgqueue.cli.control"),
        "status": command("pgqueue.cli.ops"),
        "workers": command("pgqueue.cli.ops"),
        "retry": command("pgqueue.cli.ops"),
        "purge": command("pgqueue.cli.ops"),
        "dashboard": command("pgqueue.cli.dashboard_cmd"),
        "roles": command("pgqueue.cli.roles"),
        "migrate": command("pgqueue.cli.db_cmds"),
        "enqueue": command("pgqueue.cli.enqueue_cmd"),
        "stats": command("pgqueue.cli.ops"),
        "demo": command("pgqueue.cli.demo_cmd"),
        "db": group("pgqueue.cli.db_cmds", "db_app"),
        "dlq": group("pgqueue.cli.dlq", "dlq_app"),
        "cron": group("pgqueue.cli.cron", "cron_app"),
        "pg-cron": group("pgqueue.cli.pg_cron_cmds", "pg_cron_app"),
        "workflow": group("pgqueue.cli.workflow_cmds", "workflow_app"),
        "retention": group("pgqueue.cli.retention_cmds", "retention_app"),
        "events": group("pgqueue.cli.events_cmds", "events_app"),
        "queue": group("pgqueue.cli.flow_cmds", "queue_app"),
        "task": group("pgqueue.cli.flow_cmds", "task_app"),
        "breaker": group("pgqueue.cli.flow_cmds", "breaker_app"),
        "jobs": group("pgqueue.cli.jobs", "jobs_app"),
    }


app = typer.Typer(
    name="pgq",
    cls=Pgq,
    help="pgqueue: a PostgreSQL-native job queue.",
    epilog=example("pgq migrate", "pgq work myapp.tasks:pgq"),
    no_args_is_help=True,
    add_completion=False,
    pretty_exceptions_enable=False,
)


def _print_version(value: bool) -> None:
    if value:
        typer.echo(f"pgqueue {__version__}")
        raise typer.Exit()


@app.callback()
def _root(
    version: Annotated[
        bool,
        typer.Option(
            "--version",
            callback=_print_version,
            is_eager=True,
            help="Print pgqueue's version and exit.",
        ),
    ] = False,
) -> None:
    """pgqueue: a PostgreSQL-native job queue."""


def main() -> None:
    app()
