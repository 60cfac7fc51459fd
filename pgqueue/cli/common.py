"""Options and helpers shared by every ``pgq`` command."""

from __future__ import annotations

import inspect
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from typing import TYPE_CHECKING, Annotated, Any, TypeVar, cast

import psycopg
import typer

from pgqueue.client import PgQueue
from pgqueue.errors import PgQueueError
from pgqueue.rules import config, options
from pgqueue.rules.durations import parse_duration

if TYPE_CHECKING:
    from rich.console import Console


class LazyConsole:
    """A rich ``Console`` made on first use: rich (some 45 modules) is loaded by the commands
    that print, never on ``pgq work``'s way to its first job."""

    def __init__(self, **settings: Any) -> None:
        self._settings = settings
        self._console: Console | None = None

    def __getattr__(self, name: str) -> Any:
        if self._console is None:
            from rich.console import Console

            self._console = Console(**self._settings)
        return getattr(self._console, name)


def escape(markup: str) -> str:
    """``rich.markup.escape``, importing rich only when a message is printed."""
    from rich.markup import escape as rich_escape

    return rich_escape(markup)


err_console = cast("Console", LazyConsole(stderr=True))

T = TypeVar("T")


def _given_dsn(value: str | None) -> str | None:
    """``--dsn``, marked so that an error about it names ``--dsn`` (each command reports it
    its own way, when it reads the DSN)."""
    return config.GivenDsn(value, "--dsn") if value else value


DsnOption = Annotated[
    str | None,
    typer.Option(
        "--dsn",
        callback=_given_dsn,
        help="PostgreSQL DSN. Default: $PGQUEUE_DSN, else $DATABASE_URL, else the embedded server.",
        show_default=False,
    ),
]


def read_dsn_option(help_text: str) -> Any:
    """The ``--read-dsn`` option (a streaming replica to read from), with what it reads in this
    command as its help: ``Annotated[str | None, read_dsn_option("...")]``."""
    return typer.Option("--read-dsn", help=help_text, show_default=False)


ReadDsnOption = Annotated[
    str | None,
    read_dsn_option(
        "Read from this DSN (a streaming replica), so operators' queries do not load the "
        "primary; writes still go to --dsn. Default: $PGQUEUE_READ_DSN, else --dsn."
    ),
]
# Commands that print a result rather than rows (rows: --format, see pgqueue.cli.output).
JsonOption = Annotated[bool, typer.Option("--json", help="Print JSON instead of text.")]

# Ranges of numeric options (checked by in_range): out of range is a usage error naming the
# option and the range, not a database error (LIMIT -1) or an overflow (an id past bigint).
MAX_BATCH = 100_000
MAX_JOB_ID = options.MAX_JOB_ID


def example(*commands: str) -> str:
    """The epilog every command's ``--help`` ends with: one example command line (or several),
    written as typed in a shell. ``docs/cli.md`` shows them as code; a test checks that every
    command has one and that each parses."""
    if len(commands) == 1:
        return f"Example: {commands[0]}"
    return "Examples:\n\n" + "\n\n".join(commands)


def command_group(help_text: str, *examples: str) -> typer.Typer:
    """A command group (``pgq jobs``, ``pgq dlq``, ...): its help, the :func:`example` its
    ``--help`` ends with, and that help again when it is called without a command."""
    return typer.Typer(help=help_text, epilog=example(*examples), no_args_is_help=True)


def examples_in(epilog: str | None) -> list[str]:
    """The command lines of an epilog written by :func:`example` (none for anything else)."""
    if epilog is None:
        return []
    if epilog.startswith("Example: "):
        return [epilog.removeprefix("Example: ")]
    if epilog.startswith("Examples:\n\n"):
        return epilog.removeprefix("Examples:\n\n").split("\n\n")
    return []


def in_range(low: int, high: int) -> Callable[[Any], Any]:
    """A typer callback for an int option (or a repeated one): out of range is a usage error
    that names the option and the accepted range."""

    def check(value: Any) -> Any:
        for item in value if isinstance(value, list | tuple) else [value]:
            if item is not None and not low <= item <= high:
                raise typer.BadParameter(f"must be between {low} and {high}, got {item}")
        return value

    return check


def duration(value: str | float) -> float:
    """typer parser for durations such as 30s, 5m, 250ms (defaults arrive as numbers)."""
    if isinstance(value, int | float):
        return float(value)
    try:
        return parse_duration(value)
    except ValueError as exc:
        raise typer.BadParameter(str(exc)) from None


def duration_option(*names: str, help: str, **more: Any) -> Any:
    """A ``typer.Option`` that reads a duration (``30s``, ``5m``, ``250ms``, or seconds):
    ``Annotated[float, duration_option(help="...")]``."""
    return typer.Option(*names, parser=duration, metavar="DURATION", help=help, **more)


@contextmanager
def friendly_errors() -> Iterator[None]:
    """Print pgqueue and connection errors as one clear line and exit 1 (no traceback)."""
    try:
        yield
    except PgQueueError as exc:
        # Escaped: messages carry brackets ("pip install 'pgqueue[embedded]'") that rich
        # would take for markup.
        err_console.print(f"[red]error:[/red] {escape(str(exc))}", highlight=False, soft_wrap=True)
        raise typer.Exit(1) from None
    except psycopg.OperationalError as exc:
        err_console.print(
            f"[red]database unreachable:[/red] {escape(str(exc))}", highlight=False, soft_wrap=True
        )
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


def read_dsn(dsn: str | None, read: str | None) -> str | None:
    """Where a command's reads go: ``--read-dsn`` / ``$PGQUEUE_READ_DSN``, else ``--dsn``."""
    with friendly_errors():
        return config.configured_read_dsn(read) or dsn


def with_reader(dsn: str | None, read: str | None, action: Callable[[PgQueue], T]) -> T:
    """Run a read-only ``action(pgq)`` against the read DSN (see :func:`read_dsn`)."""
    return with_app(read_dsn(dsn, read), action)


def with_options(command: Callable[..., Any], made: list[inspect.Parameter], after: int) -> None:
    """Give ``command`` (whose ``**options`` takes them) the parameters ``made``, after its first
    ``after`` own parameters and before the rest."""
    signature = inspect.signature(command, eval_str=True)
    own = [p for p in signature.parameters.values() if p.kind is not p.VAR_KEYWORD]
    command.__signature__ = signature.replace(  # type: ignore[attr-defined]
        parameters=[*own[:after], *made, *own[after:]]
    )
