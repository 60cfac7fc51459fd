"""Options and helpers shared by every ``pgq`` command."""

from __future__ import annotations

import json
import sys
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from datetime import datetime, timedelta
from typing import Annotated, Any, TypeVar

import psycopg
import typer
from rich.console import Console
from rich.table import Table

from pgqueue.client import PgQueue
from pgqueue.durations import parse_duration
from pgqueue.errors import PgQueueError

console = Console()
err_console = Console(stderr=True)

T = TypeVar("T")

DsnOption = Annotated[
    str | None,
    typer.Option(
        "--dsn",
        help="PostgreSQL DSN. Default: $PGQUEUE_DSN, else $DATABASE_URL, else the embedded server.",
        show_default=False,
    ),
]
JsonOption = Annotated[bool, typer.Option("--json", help="Print JSON instead of a table.")]


def duration(value: str | float) -> float:
    """typer parser for durations such as 30s, 5m, 250ms (defaults arrive as numbers)."""
    if isinstance(value, int | float):
        return float(value)
    try:
        return parse_duration(value)
    except ValueError as exc:
        raise typer.BadParameter(str(exc)) from None


@contextmanager
def friendly_errors() -> Iterator[None]:
    """Print pgqueue and connection errors as one clear line and exit 1 (no traceback)."""
    try:
        yield
    except PgQueueError as exc:
        err_console.print(f"[red]error:[/red] {exc}", highlight=False)
        raise typer.Exit(1) from None
    except psycopg.OperationalError as exc:
        err_console.print(f"[red]database unreachable:[/red] {exc}", highlight=False)
        raise typer.Exit(1) from None


@contextmanager
def open_queue(dsn: str | None) -> Iterator[PgQueue]:
    """A PgQueue for one command, closed afterwards, with errors as one line (exit 1)."""
    with friendly_errors():
        pgq = PgQueue(dsn)
        try:
            yield pgq
        finally:
            pgq.close()


def with_app(dsn: str | None, action: Callable[[PgQueue], T]) -> T:
    """Run ``action(pgq)`` with a client from :func:`open_queue`."""
    with open_queue(dsn) as pgq:
        return action(pgq)


def print_rows(
    rows: Sequence[dict[str, Any]],
    columns: Sequence[str],
    *,
    as_json: bool,
    title: str | None = None,
    formatters: dict[str, Callable[[Any], str]] | None = None,
) -> None:
    """Rows as a rich table, or as a JSON array (``--json``) for scripts."""
    if as_json:
        sys.stdout.write(json.dumps(list(rows), default=json_default, indent=2) + "\n")
        return
    table = Table(title=title)
    for column in columns:
        table.add_column(column)
    formatters = formatters or {}
    for row in rows:
        table.add_row(*(formatters.get(c, _cell)(row.get(c)) for c in columns))
    console.print(table)


def _cell(value: Any) -> str:
    if value is None:
        return ""
    if isinstance(value, timedelta):
        return str(value).split(".")[0]
    if isinstance(value, datetime):
        return value.isoformat(sep=" ", timespec="seconds")
    if isinstance(value, dict | list):
        return json.dumps(value)
    return str(value)


def json_default(value: Any) -> Any:
    if isinstance(value, datetime):
        return value.isoformat()
    if isinstance(value, timedelta):
        return value.total_seconds()
    return str(value)
