"""``pgq roles``: print (or apply) the SQL for least-privilege producer, worker and admin roles."""

from __future__ import annotations

import sys
from typing import Annotated

import typer

from pgqueue.cli.common import DsnOption, example, friendly_errors
from pgqueue.db import roles
from pgqueue.db.embedded import resolve_dsn

commands = typer.Typer()


def roles_command(
    producer: Annotated[
        str, typer.Option(help="Producer role (enqueue only).")
    ] = roles.RoleNames.producer,
    worker: Annotated[
        str, typer.Option(help="Worker role (claim, heartbeat, complete, reap).")
    ] = roles.RoleNames.worker,
    admin: Annotated[
        str, typer.Option(help="Admin role (cancel, replay, pause; everything but DDL).")
    ] = roles.RoleNames.admin,
    login: Annotated[
        bool, typer.Option(help="Create LOGIN roles (else group roles to grant to your logins).")
    ] = True,
    apply: Annotated[
        bool, typer.Option("--apply", help="Run the SQL (as the schema owner) instead of printing.")
    ] = False,
    dsn: DsnOption = None,
) -> None:
    """Print the SQL creating least-privilege roles; rerun it after every `pgq migrate`."""
    with friendly_errors():
        names = roles.RoleNames(producer=producer, worker=worker, admin=admin)
        if not apply:
            sys.stdout.write(roles.script(names, login=login))
            return
        roles.apply(resolve_dsn(dsn), names, login=login)
    typer.echo(f"roles ready: producer={producer} worker={worker} admin={admin}")


commands.command(
    "roles", epilog=example("pgq roles --apply --dsn postgresql://owner@db.internal/app")
)(roles_command)
