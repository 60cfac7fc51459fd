"""``pgq db`` (the database pgqueue uses, and the embedded server) and ``pgq migrate``."""

from __future__ import annotations

import sys
from typing import Annotated

import typer

from pgqueue.cli.common import (
    DsnOption,
    command_group,
    err_console,
    escape,
    example,
    friendly_errors,
)
from pgqueue.db import embedded
from pgqueue.db import migrate as migrations
from pgqueue.db.embedded import resolve_dsn
from pgqueue.rules import config

db_app = command_group("The database pgqueue uses (and the embedded server).", "pgq db status")
commands = typer.Typer()  # pgq migrate


@db_app.command("url", epilog=example("pgq db url"))
def db_url(dsn: DsnOption = None) -> None:
    """Print the DSN in use (starting the embedded server if needed): psql "$(pgq db url)"."""
    with friendly_errors():
        typer.echo(resolve_dsn(dsn))


@db_app.command("stop", epilog=example("pgq db stop"))
def db_stop() -> None:
    """Stop the embedded PostgreSQL server (its data stays for next time)."""
    with friendly_errors():
        stopped = embedded.stop()
    typer.echo("embedded server stopped" if stopped else "embedded server was not running")


@db_app.command("status", epilog=example("pgq db status"))
def db_status(dsn: DsnOption = None) -> None:
    """Show where the database is and which schema version it has."""
    with friendly_errors():
        configured = config.configured_dsn(dsn)
        if configured is None:
            typer.echo(
                f"embedded server: {'running' if embedded.is_running() else 'stopped'} "
                f"(data in {embedded.data_dir()})"
            )
        url = resolve_dsn(dsn)
        current = migrations.current_revision(url)
        head = migrations.head_revision()
        typer.echo(f"schema version: {current or 'not installed'} (newest: {head})")


@commands.command(
    "migrate",
    epilog=example(
        "pgq migrate --dsn postgresql://app@db.internal/app", "pgq migrate --sql > pgqueue.sql"
    ),
)
def migrate(
    dsn: DsnOption = None,
    sql: Annotated[
        bool, typer.Option("--sql", help="Print the SQL instead of running it.")
    ] = False,
    transaction: Annotated[
        bool,
        typer.Option(
            "--transaction/--no-transaction",
            help="With --sql: wrap the SQL in BEGIN/COMMIT. --no-transaction is for pasting it"
            " into a migration that has a transaction of its own, such as an alembic revision"
            " (where pgqueue.alembic.upgrade(op) does the same without pasting).",
        ),
    ] = True,
    from_revision: Annotated[
        str | None,
        typer.Option(
            "--from",
            help="With --sql: the revision the database is at (default: pgqueue not installed).",
            metavar="REVISION",
        ),
    ] = None,
    revision: Annotated[str, typer.Option(help="Target revision.")] = "head",
) -> None:
    """Upgrade pgqueue's schema (own version table, safe to run from several processes)."""
    if not sql and (not transaction or from_revision is not None):
        raise typer.BadParameter(
            "--no-transaction and --from only apply with --sql", param_hint="--sql"
        )
    with friendly_errors():
        try:
            if sql:
                sys.stdout.write(
                    migrations.upgrade_sql(revision, from_revision, transaction=transaction)
                )
                return
            url = resolve_dsn(dsn)
            migrations.upgrade(url, revision)
            typer.echo(f"pgqueue schema at {migrations.current_revision(url)}")
        except Exception as exc:
            # One line, not alembic's and SQLAlchemy's traceback with the failed statement.
            message = migrations.describe_error(exc)
            if message is None:
                raise
            err_console.print(
                f"[red]pgq migrate failed:[/red] {escape(message)}", highlight=False, soft_wrap=True
            )
            raise typer.Exit(1) from None
