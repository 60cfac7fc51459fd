"""Job and queue commands: ``pgq cancel``, ``pgq pause``, ``pgq resume``."""

from __future__ import annotations

from typing import Annotated

import typer

from pgqueue.cli.common import MAX_JOB_ID, DsnOption, example, in_range, open_queue, with_app

commands = typer.Typer()

_MESSAGES = {
    "cancelled": "job {id} cancelled",
    "cancelling": "job {id} is running: its worker was told to stop it",
    "not_found": "job {id} not found (unknown, already finished, or dead-lettered)",
}


def cancel(
    job_ids: Annotated[
        list[int], typer.Argument(callback=in_range(1, MAX_JOB_ID), help="Job id(s).")
    ],
    dsn: DsnOption = None,
) -> None:
    """Cancel jobs: waiting ones at once, running ones via their worker."""
    missing = 0
    with open_queue(dsn) as pgq:
        for job_id in job_ids:
            result = pgq.cancel(job_id)
            missing += result == "not_found"
            typer.echo(_MESSAGES[result].format(id=job_id))
    if missing:
        raise typer.Exit(1)


def pause(
    queue: Annotated[str, typer.Argument(help="Queue to pause.")], dsn: DsnOption = None
) -> None:
    """Stop workers claiming from QUEUE (enqueue still works; running jobs finish)."""
    _set_paused(queue, dsn, paused=True)


def resume(
    queue: Annotated[str, typer.Argument(help="Queue to resume.")], dsn: DsnOption = None
) -> None:
    """Let workers claim from QUEUE again."""
    _set_paused(queue, dsn, paused=False)


def _set_paused(queue: str, dsn: str | None, *, paused: bool) -> None:
    with_app(dsn, lambda pgq: (pgq.flow.pause_queue if paused else pgq.flow.resume_queue)(queue))
    typer.echo(f"queue {queue!r} {'paused' if paused else 'resumed'}")


commands.command("cancel", epilog=example("pgq cancel 1042 1043"))(cancel)
commands.command("pause", epilog=example("pgq pause emails"))(pause)
commands.command("resume", epilog=example("pgq resume emails"))(resume)
