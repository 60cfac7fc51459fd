"""``pgq maintain``: the workers' maintenance service on its own, as the tables' owner."""

from __future__ import annotations

import asyncio
from typing import Annotated

import typer

from pgqueue.cli.common import DsnOption, duration_option, example, friendly_errors
from pgqueue.cli.worker_cmds import LogFormat, LogLevel
from pgqueue.client import PgQueue
from pgqueue.handler import logs
from pgqueue.rules import maintenance as rules
from pgqueue.rules.maintenance import Thresholds
from pgqueue.worker import maintainer as service
from pgqueue.worker.maintainer import Maintainer, maintain_forever, maintain_once


def maintain(
    interval: Annotated[float, duration_option(help="Time between passes.")] = service.EVERY,
    once: Annotated[bool, typer.Option(help="One pass: print what it did and exit.")] = False,
    bloat_factor: Annotated[
        float,
        typer.Option(
            min=1.1, help="Rebuild what takes more than this many times its estimated size."
        ),
    ] = rules.BLOAT_FACTOR,
    min_bytes: Annotated[
        int, typer.Option(min=0, metavar="BYTES", help="...and at least this many bytes more.")
    ] = rules.MIN_BYTES,
    held_after: Annotated[
        float,
        duration_option(help="Do nothing while a snapshot older than this holds the horizon."),
    ] = service.HELD_AFTER,
    lock_timeout: Annotated[
        float,
        duration_option(help="Give a step up when it would wait longer than this for a lock."),
    ] = service.LOCK_TIMEOUT,
    dsn: DsnOption = None,
    log_level: LogLevel = None,
    log_format: LogFormat = None,
) -> None:
    """VACUUM (INDEX_CLEANUP ON) and REINDEX CONCURRENTLY what a held snapshot bloated, once
    the snapshot has ended (one session per database: safe beside workers). Run it as the
    owner of pgqueue's tables when the workers log in as a role that is not (pgq roles)."""
    if interval <= 0 or lock_timeout <= 0:
        name = "--interval" if interval <= 0 else "--lock-timeout"
        raise typer.BadParameter("must be positive", param_hint=name)
    logs.configure(log_level or "INFO", log_format or "text")
    with friendly_errors():
        pgq = PgQueue(dsn)  # resolves the DSN as every command does (an embedded server too)
        try:
            maintainer = Maintainer(
                pgq.dsn,
                every=interval,
                held_after=held_after,
                lock_timeout=lock_timeout,
                thresholds=Thresholds(bloat_factor, min_bytes),
                application_name=service.own_application_name(pgq.dsn),
                wait_first=False,
            )
            if once:
                for line in asyncio.run(maintain_once(pgq.dsn, maintainer)).lines():
                    typer.echo(line)
            else:
                asyncio.run(maintain_forever(pgq.dsn, maintainer))
        finally:
            pgq.close()


commands = typer.Typer()
commands.command("maintain", epilog=example("pgq maintain --dsn postgresql://owner@db/app --once"))(
    maintain
)
