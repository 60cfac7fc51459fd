"""``pgq enqueue``: a job from the shell, with an option for every job option."""

from __future__ import annotations

import json
from typing import Annotated, Any

import typer

from pgqueue.cli.common import DsnOption, JsonOption, example, friendly_errors
from pgqueue.cli.job_options import job_options, with_job_options
from pgqueue.client import PgQueue
from pgqueue.client.names import unknown_task
from pgqueue.errors import InvalidJobError, UnknownTaskError

commands = typer.Typer()


@commands.command(
    "enqueue",
    epilog=example(
        """pgq enqueue emails.send --args '{"to": "a@example.com"}' --delay 5m --result-ttl 1h """
        """--meta '{"tenant": "acme"}' --tag welcome""",
        """pgq enqueue index.doc --args '{"doc": 7}' --unique --on-conflict replace --delay 2s""",
    ),
)
def enqueue(
    task: Annotated[str, typer.Argument(help="Task name, as registered by the worker.")],
    *,
    args: Annotated[str, typer.Option("--args", help="Task arguments as a JSON object.")] = "{}",
    # Here: an option for every job option (pgqueue/cli/job_options.py, from their declarations).
    allow_unknown: Annotated[
        bool,
        typer.Option(
            "--allow-unknown",
            help="Accept a task name no worker has declared yet (its workers deploy later).",
        ),
    ] = False,
    dsn: DsnOption = None,
    as_json: JsonOption = False,
    **options: Any,
) -> None:
    """Enqueue a job from the shell; prints its id. The task name must be one a worker has
    declared (else: the closest names, and exit 1)."""
    with friendly_errors():
        try:
            payload = json.loads(args)
        except json.JSONDecodeError as exc:
            raise InvalidJobError(f"--args is not valid JSON: {exc}") from None
        if not isinstance(payload, dict):
            raise InvalidJobError('--args must be a JSON object, e.g. \'{"to": "a@example.com"}\'')
        chosen = job_options(options)
        pgq = PgQueue(dsn)
        try:
            job_id = pgq.enqueue(task, payload, **chosen, allow_unknown=allow_unknown)
        except UnknownTaskError as exc:
            if not exc.task:
                raise
            message = unknown_task(exc.task, exc.close, opt_out="--allow-unknown")
            raise UnknownTaskError(message, task=exc.task, close=exc.close) from None
        finally:
            pgq.close()
    if as_json:
        typer.echo(
            json.dumps({"id": int(job_id), "created": job_id.created, "replaced": job_id.replaced})
        )
    elif job_id.created:
        typer.echo(str(int(job_id)))
    else:
        what = "replaced the pending job's arguments" if job_id.replaced else "existing job"
        typer.echo(f"{int(job_id)} ({what})")


with_job_options(enqueue)
