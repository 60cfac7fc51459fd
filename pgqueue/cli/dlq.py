"""``pgq dlq``: inspect and replay dead letters."""

from __future__ import annotations

import json
from datetime import datetime
from typing import Annotated, Any

import typer

from pgqueue.cli.common import (
    MAX_BATCH,
    MAX_JOB_ID,
    DsnOption,
    JsonOption,
    command_group,
    example,
    friendly_errors,
    in_range,
    with_app,
)
from pgqueue.cli.output import OutputFormat, Printer, console, print_rows, printer_options
from pgqueue.errors import InvalidJobError
from pgqueue.rules.job_specs import MAX_ROWS

dlq_app = command_group(
    "Dead letters: jobs that failed for good.", "pgq dlq list --task emails.send"
)

TaskOpt = Annotated[str | None, typer.Option("--task", help="Only this task.")]
QueueOpt = Annotated[str | None, typer.Option("--queue", help="Only this queue.")]
ErrorOpt = Annotated[str | None, typer.Option("--error", help="Last error contains this text.")]
SinceOpt = Annotated[
    datetime | None, typer.Option("--since", help="Died at or after (ISO 8601; UTC if no offset).")
]
UntilOpt = Annotated[datetime | None, typer.Option("--until", help="Died before.")]


def _filters(
    task: str | None,
    queue: str | None,
    error: str | None,
    since: datetime | None,
    until: datetime | None,
    ids: list[int] | None = None,
) -> dict[str, Any]:
    from datetime import UTC

    def aware(value: datetime | None) -> datetime | None:
        return value.replace(tzinfo=UTC) if value and value.tzinfo is None else value

    return {
        "task": task,
        "queue": queue,
        "error": error,
        "since": aware(since),
        "until": aware(until),
        "ids": ids or None,
    }


@dlq_app.command(
    "list", epilog=example("pgq dlq list --queue emails --since 2026-01-31 --traceback")
)
@printer_options
def list_(
    task: TaskOpt = None,
    queue: QueueOpt = None,
    error: ErrorOpt = None,
    since: SinceOpt = None,
    until: UntilOpt = None,
    limit: Annotated[
        int, typer.Option(callback=in_range(1, MAX_ROWS), help="At most this many rows.")
    ] = 50,
    traceback: Annotated[bool, typer.Option(help="Show the last traceback.")] = False,
    *,
    printer: Printer,
) -> None:
    """List dead letters, newest first."""
    out = printer.out
    filters = _filters(task, queue, error, since, until)
    rows = printer.run(lambda pgq: pgq.admin.dead_letters(limit=limit, **filters))
    if out is OutputFormat.json:
        print_rows(rows, [], fmt=out)
        return
    for row in rows:
        last = row["errors"][-1] if row["errors"] else {}
        row["last_error"] = f"{last.get('error', '')}: {row['last_error'] or ''}"
    print_rows(
        rows,
        ["id", "queue", "task", "attempts", "reason", "last_error", "dead_at"],
        fmt=out,
        title="dead letters",
        narrow_drop={"attempts", "reason"},
    )
    if traceback and out is OutputFormat.table:
        # Tracebacks do not fit in a table: print each one in full below it.
        for row in rows:
            last = row["errors"][-1] if row["errors"] else {}
            console.rule(f"job {row['id']} ({row['task']}), attempt {last.get('attempt', '?')}")
            console.print(last.get("traceback") or "(no traceback)", highlight=False, markup=False)


@dlq_app.command(
    "replay", epilog=example("pgq dlq replay --task emails.send --error TimeoutError --dry-run")
)
def replay(
    ids: Annotated[
        list[int] | None,
        typer.Option("--id", callback=in_range(1, MAX_JOB_ID), help="Only these ids (repeat)."),
    ] = None,
    task: TaskOpt = None,
    queue: QueueOpt = None,
    error: ErrorOpt = None,
    since: SinceOpt = None,
    until: UntilOpt = None,
    batch_size: Annotated[
        int, typer.Option(callback=in_range(1, MAX_BATCH), help="Jobs moved per transaction.")
    ] = 500,
    dry_run: Annotated[bool, typer.Option(help="Only count what would be replayed.")] = False,
    all_: Annotated[bool, typer.Option("--all", help="Replay every dead letter.")] = False,
    dsn: DsnOption = None,
    as_json: JsonOption = False,
) -> None:
    """Put dead letters back in their queue with fresh attempts."""
    filters = _filters(task, queue, error, since, until, ids)
    with friendly_errors():
        if not all_ and not any(v is not None for v in filters.values()):
            raise InvalidJobError(
                "say which dead letters to replay (--id, --task, --queue, "
                "--error, --since, --until), or pass --all"
            )
    count = with_app(
        dsn,
        lambda pgq: pgq.admin.replay_dead_letters(
            batch_size=batch_size, dry_run=dry_run, **filters
        ),
    )
    if as_json:
        typer.echo(
            json.dumps(
                {"replayed": 0 if dry_run else count, "would_replay": count if dry_run else None}
            )
        )
    elif dry_run:
        typer.echo(f"would replay {count} dead letter(s)")
    else:
        typer.echo(f"replayed {count} dead letter(s)")
