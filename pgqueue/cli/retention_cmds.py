"""``pgq retention``: how long history, results and dead letters are kept; one pruning pass."""

from __future__ import annotations

import json
from typing import Annotated, Any

import typer

from pgqueue.cli.common import (
    MAX_BATCH,
    DsnOption,
    JsonOption,
    command_group,
    duration,
    duration_option,
    example,
    in_range,
    open_queue,
)
from pgqueue.cli.output import OutputFormat, Printer, print_rows, printer_options
from pgqueue.db.retention import KEEP_FOREVER

retention_app = command_group(
    "Retention of job history, results and dead letters (all workers share it).",
    "pgq retention show",
)


def _show(settings: dict[str, Any], fmt: OutputFormat) -> None:
    row = dict(settings)
    if fmt is not OutputFormat.json:
        row["dead_letter_retention"] = row["dead_letter_retention"] or "until replayed"
    print_rows([row], list(row), fmt=fmt, title="retention")


@retention_app.command("show", epilog=example("pgq retention show --format json"))
@printer_options
def show(*, printer: Printer) -> None:
    """The settings every worker's ack and pruner use (the pgqueue.retention row)."""
    settings = printer.run(lambda pgq: pgq.retention.settings())
    _show(settings.as_dict(), printer.out)


@retention_app.command("set", epilog=example("pgq retention set --history 3d --dead-letters 30d"))
@printer_options
def set_(
    history: Annotated[
        float | None,
        duration_option(help="Keep job_history rows this long (0: none)."),
    ] = None,
    record_succeeded: Annotated[
        bool | None,
        typer.Option(
            "--record-succeeded/--no-record-succeeded",
            help="Record every succeeded job in job_history (a second row per ack).",
        ),
    ] = None,
    dead_letters: Annotated[
        str | None,
        typer.Option(
            metavar="DURATION|never",
            help="Purge dead letters older than this; 'never' keeps them until replayed.",
        ),
    ] = None,
    *,
    printer: Printer,
) -> None:
    """Change retention for every worker at once (settings not given stay as they are)."""
    dead: float | str | None = dead_letters
    if dead_letters is not None and dead_letters != KEEP_FOREVER:
        dead = duration(dead_letters)
    settings = printer.run(
        lambda pgq: pgq.retention.set(
            history=history, record_succeeded=record_succeeded, dead_letters=dead
        )
    )
    _show(settings.as_dict(), printer.out)


@retention_app.command("prune", epilog=example("pgq retention prune --batch-size 1000"))
def prune(
    batch_size: Annotated[
        int, typer.Option(callback=in_range(1, MAX_BATCH), help="Rows deleted per statement.")
    ] = 500,
    dsn: DsnOption = None,
    as_json: JsonOption = False,
) -> None:
    """Run one pruning pass now (workers do this every --prune-interval)."""
    with open_queue(dsn) as pgq:
        report = pgq.retention.prune(batch_size=batch_size)
    if as_json:
        typer.echo(json.dumps(report.as_dict()))
    else:
        typer.echo(
            f"pruned {report.history} history row(s), {report.dead_letters} dead letter(s), "
            f"{report.workflows} workflow(s), {report.steps} step checkpoint(s), "
            f"{report.events} event(s)"
        )
