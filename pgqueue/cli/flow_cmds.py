"""``pgq queue``, ``pgq task``, ``pgq breaker``: flow-control settings and circuit breakers.

Settings take a value or ``none`` (clear it); settings not given stay as they are.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Annotated, Any

import typer

from pgqueue.cli.common import (
    DsnOption,
    command_group,
    duration_option,
    example,
    with_app,
)
from pgqueue.cli.listing import list_command
from pgqueue.cli.output import FormatOption, OutputFormat, print_rows
from pgqueue.client import PgQueue
from pgqueue.db.flow_plans import BREAKER_COLUMNS, QUEUE_COLUMNS, TASK_COLUMNS
from pgqueue.errors import ConfigurationError
from pgqueue.rules.flow_control import UNSET, RateLimit

queue_app = command_group(
    "Per-queue flow control: weight, max depth, limits, fairness.", "pgq queue list"
)
task_app = command_group("Per-task limits: concurrency, rate, and per key.", "pgq task list")
breaker_app = command_group("Circuit breakers: list, reset, open.", "pgq breaker list")

Setting = Annotated[str | None, typer.Option(metavar="N|none")]
RateSetting = Annotated[
    str | None, typer.Option("--rate", metavar="20/s|100/m|none", help="Token bucket rate.")
]
Burst = Annotated[float | None, typer.Option(help="Token bucket size (default: one period).")]
Concurrency = Annotated[
    str | None, typer.Option(metavar="N|none", help="Running at once, across all workers.")
]


def _int(value: str | None, what: str) -> Any:
    if value is None:
        return UNSET
    if value.strip().lower() == "none":
        return None
    try:
        return int(value)
    except ValueError:
        raise ConfigurationError(
            f"--{what} must be a whole number or 'none', got {value!r}"
        ) from None


def _rate(value: str | None, burst: float | None, alone: str = "--burst needs --rate") -> Any:
    if value is None:
        if burst is not None:
            raise ConfigurationError(alone)
        return UNSET
    if value.strip().lower() == "none":
        return None
    return RateLimit.parse(value, burst)


def _shared_limits(
    concurrency: str | None, rate: str | None, burst: float | None
) -> dict[str, Any]:
    """The limits queues and tasks both have (``--concurrency``, ``--rate``, ``--burst``), as
    ``configure_queue`` and ``configure_task`` take them."""
    return {"concurrency_limit": _int(concurrency, "concurrency"), "rate_limit": _rate(rate, burst)}


def _change_and_print(
    change: Callable[[PgQueue], dict[str, Any]],
    dsn: str | None,
    fmt: OutputFormat,
    columns: Sequence[str],
    title: str,
) -> None:
    """``pgq queue set`` / ``pgq task set``: make the change (a ``pgq.flow.configure_*`` call)
    and print the row it wrote."""
    print_rows([with_app(dsn, change)], columns, fmt=fmt, title=title)


@queue_app.command(
    "set", epilog=example("pgq queue set emails --concurrency 10 --rate 20/s --max-depth 100000")
)
def queue_set(
    queue: Annotated[str, typer.Argument(help="Queue name.")],
    weight: Annotated[str | None, typer.Option(metavar="N|none", help="Fair-share weight.")] = None,
    max_depth: Annotated[
        str | None, typer.Option(metavar="N|none", help="Refuse enqueues beyond this many waiting.")
    ] = None,
    concurrency: Concurrency = None,
    rate: RateSetting = None,
    burst: Burst = None,
    fair: Annotated[
        bool | None,
        typer.Option(
            "--fair/--no-fair",
            help="Serve the queue's keys (jobs' concurrency keys) round-robin, or in order.",
        ),
    ] = None,
    dsn: DsnOption = None,
    fmt: FormatOption = OutputFormat.table,
) -> None:
    """Change a queue's settings (workers apply them at their next claim)."""

    def change(pgq: PgQueue) -> dict[str, Any]:
        return pgq.flow.configure_queue(
            queue,
            weight=_int(weight, "weight"),
            max_depth=_int(max_depth, "max-depth"),
            **_shared_limits(concurrency, rate, burst),
            fair=UNSET if fair is None else fair,
        )

    _change_and_print(change, dsn, fmt, QUEUE_COLUMNS, "queue")


@list_command(queue_app, columns=QUEUE_COLUMNS, title="queues", shown_by="pgq queue list --json")
def queue_list(pgq: PgQueue) -> list[dict[str, Any]]:
    """Every configured queue's settings (depth: `pgq stats` or view pgqueue.queue_depth)."""
    return pgq.flow.queue_settings()


@task_app.command(
    "set", epilog=example("pgq task set emails.send --key-limit 2 --key-rate 10/s --rate 100/m")
)
def task_set(
    task: Annotated[str, typer.Argument(help="Task name.")],
    concurrency: Concurrency = None,
    key_limit: Annotated[
        str | None,
        typer.Option(metavar="N|none", help="Running at once per key (none: no limit per key)."),
    ] = None,
    rate: RateSetting = None,
    burst: Burst = None,
    key_rate: Annotated[
        str | None,
        typer.Option(metavar="10/s|600/m|none", help="Token bucket rate per key."),
    ] = None,
    key_burst: Annotated[
        float | None, typer.Option(help="Token bucket size per key (default: one period).")
    ] = None,
    dsn: DsnOption = None,
    fmt: FormatOption = OutputFormat.table,
) -> None:
    """Change a task's limits (a worker start re-applies what the code declares)."""

    def change(pgq: PgQueue) -> dict[str, Any]:
        return pgq.flow.configure_task(
            task,
            **_shared_limits(concurrency, rate, burst),
            key_limit=_int(key_limit, "key-limit"),
            key_rate_limit=_rate(key_rate, key_burst, "--key-burst needs --key-rate"),
        )

    _change_and_print(change, dsn, fmt, TASK_COLUMNS, "task")


@list_command(task_app, columns=TASK_COLUMNS, title="task limits", shown_by="pgq task list --json")
def task_list(pgq: PgQueue) -> list[dict[str, Any]]:
    """Every task with limits (table pgqueue.task_limits)."""
    return pgq.flow.task_limits()


@list_command(
    breaker_app,
    columns=BREAKER_COLUMNS,
    title="circuit breakers",
    shown_by="pgq breaker list --json",
)
def breaker_list(pgq: PgQueue) -> list[dict[str, Any]]:
    """Every circuit breaker (view pgqueue.circuit_breaker_status)."""
    return pgq.flow.circuit_breakers()


@breaker_app.command("reset", epilog=example("pgq breaker reset payments.charge"))
def breaker_reset(
    task: Annotated[str, typer.Argument(help="Task name.")], dsn: DsnOption = None
) -> None:
    """Close a task's breaker now: its waiting jobs are claimed again."""
    _set_breaker(task, dsn, None)


@breaker_app.command("open", epilog=example("pgq breaker open payments.charge --for 10m"))
def breaker_open(
    task: Annotated[str, typer.Argument(help="Task name.")],
    duration_: Annotated[
        float | None,
        duration_option("--for", help="Default: its cooldown."),
    ] = None,
    dsn: DsnOption = None,
) -> None:
    """Open a task's breaker by hand: workers leave its jobs waiting."""
    _set_breaker(task, dsn, duration_ if duration_ is not None else -1.0)


def _set_breaker(task: str, dsn: str | None, open_for: float | None) -> None:
    if open_for is None:
        found = with_app(dsn, lambda pgq: pgq.flow.reset_breaker(task))
    else:
        found = with_app(
            dsn, lambda pgq: pgq.flow.trip_breaker(task, open_for if open_for >= 0 else None)
        )
    if not found:
        typer.echo(f"task {task!r} has no circuit breaker", err=True)
        raise typer.Exit(1)
    typer.echo(f"breaker of {task!r} {'closed' if open_for is None else 'opened'}")
