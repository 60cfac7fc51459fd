"""The ``pgq`` application: command groups are registered here, each in its own module."""

from __future__ import annotations

import json
import sys
from typing import Annotated, Any

import typer

from pgqueue._version import __version__
from pgqueue.cli import control, dashboard_cmd, jobs, maintain_cmd, ops, roles, worker_cmds
from pgqueue.cli.common import (
    DsnOption,
    JsonOption,
    command_group,
    escape,
    example,
    friendly_errors,
    in_range,
)
from pgqueue.cli.cron import cron_app
from pgqueue.cli.dlq import dlq_app
from pgqueue.cli.events_cmds import events_app
from pgqueue.cli.flow_cmds import breaker_app, queue_app, task_app
from pgqueue.cli.job_options import job_options, with_job_options
from pgqueue.cli.output import Reader, print_rows, reader_options
from pgqueue.cli.pg_cron_cmds import add_deprecated_spellings, pg_cron_app
from pgqueue.cli.retention_cmds import retention_app
from pgqueue.cli.workflow_cmds import workflow_app
from pgqueue.client import PgQueue
from pgqueue.client.names import unknown_task
from pgqueue.db import embedded
from pgqueue.db import migrate as migrations
from pgqueue.db.embedded import resolve_dsn
from pgqueue.errors import InvalidJobError, UnknownTaskError
from pgqueue.rules import config

app = typer.Typer(
    name="pgq",
    help="pgqueue: a PostgreSQL-native job queue.",
    epilog=example("pgq migrate", "pgq work myapp.tasks:pgq"),
    no_args_is_help=True,
    add_completion=False,
    pretty_exceptions_enable=False,
)
db_app = command_group("The database pgqueue uses (and the embedded server).", "pgq db status")
app.add_typer(db_app, name="db")
app.add_typer(dlq_app, name="dlq")
app.add_typer(cron_app, name="cron")
add_deprecated_spellings(cron_app)
app.add_typer(pg_cron_app, name="pg-cron")
app.add_typer(workflow_app, name="workflow")
app.add_typer(retention_app, name="retention")
app.add_typer(events_app, name="events")
app.add_typer(queue_app, name="queue")
app.add_typer(task_app, name="task")
app.add_typer(breaker_app, name="breaker")
app.command(
    "work", epilog=example("pgq work myapp.tasks:pgq --queue emails,reports --concurrency 4:32")
)(worker_cmds.work)
app.command("reaper", epilog=example("pgq reaper --interval 10s"))(worker_cmds.reaper)
app.command("maintain", epilog=example("pgq maintain --dsn postgresql://owner@db/app --once"))(
    maintain_cmd.maintain
)
app.command("cancel", epilog=example("pgq cancel 1042 1043"))(control.cancel)
app.command("pause", epilog=example("pgq pause emails"))(control.pause)
app.command("resume", epilog=example("pgq resume emails"))(control.resume)
ops.register(app)
jobs.register(app)
app.command("dashboard", epilog=example("pgq dashboard --host 0.0.0.0 --token s3cret --read-only"))(
    dashboard_cmd.dashboard
)
app.command("roles", epilog=example("pgq roles --apply --dsn postgresql://owner@db.internal/app"))(
    roles.roles_command
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


@app.command(
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
    from pgqueue.cli.common import err_console

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


@app.command(
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


@app.command("stats", epilog=example("pgq stats --json"))
@reader_options
def stats(*, reader: Reader) -> None:
    """Queue depth per queue (the pgqueue.queue_stats view)."""
    from pgqueue.db.views import queue_stats

    rows = reader.read(queue_stats)
    print_rows(
        rows,
        ["queue", "waiting", "ready", "scheduled", "running", "dead", "oldest_ready_age", "paused"],
        fmt=reader.out,
        title="queues",
    )


@app.command("demo", epilog=example("pgq demo --jobs 10000 --workers 4"))
def demo(
    jobs: Annotated[
        int, typer.Option(callback=in_range(1, 10_000_000), help="How many jobs to enqueue.")
    ] = 3000,
    workers: Annotated[
        int, typer.Option(callback=in_range(1, 64), help="Worker processes to start.")
    ] = 2,
    concurrency: Annotated[
        int, typer.Option(callback=in_range(1, 1000), help="Slots per worker.")
    ] = 16,
    dsn: DsnOption = None,
) -> None:
    """Run the demo: enqueue jobs, run real workers with a live view, print a summary."""
    from pgqueue.cli import demo as demo_module

    with friendly_errors():
        demo_module.run(jobs=jobs, workers=workers, concurrency=concurrency, dsn=dsn)


def main() -> None:
    app()
