"""How ``pgq`` prints rows: ``--format table|plain|json``, declared here once for every command
that prints rows.

A table never cuts a value short: ids, queue and task names are read whole (an operator copies
them into the next command), so a table too wide for the terminal folds its cells and, below
:data:`NARROW` columns (an 80-column CI log, ``kubectl exec``), first drops the columns each
command marks as least needed. ``plain`` is for ``cut``/``awk``: a header line, then one line
per row, fields separated by tabs. Every time is printed the same way, with its zone
(:func:`timestamp`).

A command that prints what it got from the database takes ``--dsn``, ``--format`` and ``--json``
as one parameter, ``printer: Printer`` (one that reads, ``--read-dsn`` too: ``reader: Reader``);
:data:`printer_options` (:data:`reader_options`) puts the options in its signature at that
place (typer reads the signature), so ``--help`` lists them where the command declares it."""

from __future__ import annotations

import functools
import inspect
import json
import sys
from collections.abc import Callable, Collection, Sequence
from dataclasses import dataclass
from datetime import datetime, timedelta
from enum import StrEnum
from typing import TYPE_CHECKING, Annotated, Any, TypeVar, cast

import typer

from pgqueue.cli.common import DsnOption, LazyConsole, ReadDsnOption, with_app, with_reader

if TYPE_CHECKING:
    from rich.console import Console

    from pgqueue.client import PgQueue

T = TypeVar("T")

console = cast("Console", LazyConsole())

# Columns read whole, never folded: what an operator copies into the next command.
WHOLE = frozenset({"id", "queue", "queues", "task", "name"})

# Below this many columns a table takes its narrow layout (lighter borders, fewer columns).
NARROW = 100


class OutputFormat(StrEnum):
    """What a command that prints rows prints."""

    table = "table"
    plain = "plain"
    json = "json"


FormatOption = Annotated[
    OutputFormat,
    typer.Option(
        "--format",
        case_sensitive=False,
        help=(
            "table: for reading (fits the terminal, never cuts a value short); plain: a header "
            "line then one line per row, fields separated by tabs (for cut, awk); json: an array "
            "of objects."
        ),
    ),
]
JsonFormatOption = Annotated[bool, typer.Option("--json", help="The same as --format json.")]


def chosen(fmt: OutputFormat, as_json: bool) -> OutputFormat:
    """The format a command prints in: ``--json`` is a spelling of ``--format json``."""
    if as_json and fmt not in (OutputFormat.table, OutputFormat.json):
        raise typer.BadParameter(
            f"--json and --format {fmt.value} contradict each other: give one", param_hint="--json"
        )
    return OutputFormat.json if as_json else fmt


@dataclass(frozen=True, slots=True)
class Printer:
    """Where a command runs (``--dsn``) and how it prints what it got (``out``)."""

    dsn: str | None
    out: OutputFormat

    def run(self, action: Callable[[PgQueue], T]) -> T:
        """Run ``action(pgq)`` with a client on ``--dsn``."""
        return with_app(self.dsn, action)


@dataclass(frozen=True, slots=True)
class Reader(Printer):
    """A :class:`Printer` that reads from ``--read-dsn`` (a streaming replica) too."""

    read_dsn: str | None

    def read(self, action: Callable[[PgQueue], T]) -> T:
        """Run the read-only ``action(pgq)`` against the read DSN."""
        return with_reader(self.dsn, self.read_dsn, action)


# The options of each, in the order --help shows them: (name, annotation, default).
_DSN = ("dsn", DsnOption, None)
_FORMATS = (("fmt", FormatOption, OutputFormat.table), ("as_json", JsonFormatOption, False))
_PRINTER_OPTIONS = (_DSN, *_FORMATS)
_READER_OPTIONS = (_DSN, ("read_dsn", ReadDsnOption, None), *_FORMATS)

Command = Callable[..., None]


def _options_for(
    parameter: str, options: tuple[tuple[str, Any, Any], ...], make: Callable[..., Printer]
) -> Callable[[Command], Command]:
    """A decorator: the command's ``parameter`` given as ``options``, from which ``make``
    builds it."""

    def given_as_options(command: Command) -> Command:
        signature = inspect.signature(command, eval_str=True)
        own = list(signature.parameters.values())
        at = [p.name for p in own].index(parameter)
        kind = own[at].kind  # keyword-only where the parameter is: a signature keeps Python's order
        made = [
            inspect.Parameter(name, kind, default=default, annotation=annotation)
            for name, annotation, default in options
        ]

        @functools.wraps(command)
        def run(*args: Any, **given: Any) -> None:
            values = {name: given.pop(name, default) for name, _, default in options}
            command(*args, **{parameter: make(**values)}, **given)

        run.__signature__ = signature.replace(  # type: ignore[attr-defined]
            parameters=[*own[:at], *made, *own[at + 1 :]]
        )
        return run

    return given_as_options


def _printer(dsn: str | None, fmt: OutputFormat, as_json: bool) -> Printer:
    return Printer(dsn, chosen(fmt, as_json))


def _reader(dsn: str | None, read_dsn: str | None, fmt: OutputFormat, as_json: bool) -> Reader:
    return Reader(dsn, chosen(fmt, as_json), read_dsn)


#: A command's ``printer: Printer`` parameter given as ``--dsn``, ``--format``, ``--json``.
printer_options = _options_for("printer", _PRINTER_OPTIONS, _printer)
#: A command's ``reader: Reader`` parameter given as ``--dsn``, ``--read-dsn``, ``--format``,
#: ``--json``.
reader_options = _options_for("reader", _READER_OPTIONS, _reader)


def timestamp(value: datetime) -> str:
    """The one way ``pgq`` prints a time: day, time to the second and zone offset
    (``2026-12-06 14:03:07+00:00``), as the dashboard shows it."""
    return value.isoformat(sep=" ", timespec="seconds")


def cell(value: Any) -> str:
    """A value as a table or plain cell."""
    if value is None:
        return ""
    if isinstance(value, timedelta):
        return str(value).split(".")[0]
    if isinstance(value, datetime):
        return timestamp(value)
    if isinstance(value, dict | list):
        from pgqueue.db.views import json_default

        return json.dumps(value, default=json_default)
    return str(value)


def dump_json(data: Any) -> None:
    """``data`` as indented JSON on stdout."""
    from pgqueue.db.views import json_default

    sys.stdout.write(json.dumps(data, default=json_default, indent=2) + "\n")


def print_rows(
    rows: Sequence[dict[str, Any]],
    columns: Sequence[str],
    *,
    fmt: OutputFormat,
    title: str | None = None,
    formatters: dict[str, Callable[[Any], str]] | None = None,
    narrow_drop: Collection[str] = (),
) -> None:
    """Rows in ``fmt``: a table of ``columns`` (without ``narrow_drop`` on a narrow terminal),
    the same columns tab-separated (plain), or every field of every row (json)."""
    if fmt is OutputFormat.json:
        dump_json(list(rows))
        return
    shown = formatters or {}

    def text(row: dict[str, Any], column: str) -> str:
        return shown.get(column, cell)(row.get(column))

    if fmt is OutputFormat.plain:
        lines = [list(columns)] + [[text(row, c) for c in columns] for row in rows]
        # A tab or newline inside a value would split its field or its row.
        sys.stdout.write("".join("\t".join(_one_field(f) for f in line) + "\n" for line in lines))
        return
    from rich import box
    from rich.table import Table
    from rich.text import Text

    width = console.width
    narrow = width < NARROW
    table_rows = {
        c: [text(row, c) for row in rows] for c in columns if not (narrow and c in narrow_drop)
    }
    least = {c: _least_width(c, values) for c, values in table_rows.items()}
    # Too wide even folded at spaces: drop the last (least needed) columns that are not
    # identifiers until the rest fits; identifiers are never dropped (at worst they fold).
    gap = 3  # between two columns: their padding and the rule (a narrow table has no edges)
    while sum(least.values()) + gap * (len(least) - 1) > width:
        droppable = [c for c in least if c not in WHOLE]
        if len(droppable) <= 1:
            break
        del least[droppable[-1]]
    widths = _fit(least, table_rows, width - gap * (len(least) - 1)) if narrow else {}
    table = Table(
        title=title,
        box=box.SIMPLE_HEAD if narrow else box.HEAVY_HEAD,
        pad_edge=not narrow,
        show_edge=not narrow,
    )
    for column, minimum in least.items():
        # Fold, never an ellipsis. Words, not snake_case, so that a header wraps between them.
        table.add_column(
            column.replace("_", " "),
            overflow="fold",
            min_width=None if narrow else minimum,
            width=widths.get(column),
        )
    for index in range(len(rows)):
        # Text, not str: a value with brackets (args, error messages) is not rich markup.
        table.add_row(*(Text(table_rows[c][index]) for c in least))
    console.print(table)


def _fit(least: dict[str, int], cells: dict[str, list[str]], room: int) -> dict[str, int]:
    """Column widths that fill at most ``room``: each column as wide as its widest cell or
    header, the widest shrunk first, none below its least width (an identifier's is its
    widest value) while the least widths fit."""
    widths = {c: max([least[c], len(c), *(len(v) for v in cells[c])]) for c in least}
    # Names longer than the terminal: past their least widths, the widest columns fold too
    # (never below a few characters; ids are short and stay whole).
    floor = {c: least[c] if c == "id" else min(least[c], 8) for c in widths}
    for bound in (least, floor):
        while sum(widths.values()) > room:
            shrinkable = [c for c in widths if widths[c] > bound[c]]
            if not shrinkable:
                break
            widest = max(shrinkable, key=lambda c: widths[c] - bound[c])
            widths[widest] -= 1
    return widths


def _least_width(column: str, values: Sequence[str]) -> int:
    """The narrowest a column may get: an identifier's longest value (read whole), else its
    longest word (header or value, so that it folds between words), at most 20."""
    words = [len(word) for word in column.split("_")]
    if column in WHOLE:
        return max([*words, *(len(v) for v in values)])
    return min(20, max([*words, *(len(w) for v in values for w in v.split())]))


def print_fields(fields: Sequence[tuple[str, str]], *, fmt: OutputFormat, title: str) -> None:
    """One record as ``field  value`` lines: a two-column table, or tab-separated (plain)."""
    if fmt is OutputFormat.plain:
        lines = [("field", "value"), *fields]
        sys.stdout.write("".join(f"{k}\t{_one_field(v)}\n" for k, v in lines))
        return
    from rich import box
    from rich.table import Table
    from rich.text import Text

    table = Table(title=title, show_header=False, box=box.SIMPLE)
    table.add_column("field", style="bold", no_wrap=True)
    table.add_column("value", overflow="fold")
    for key, value in fields:
        table.add_row(key, Text(value))
    console.print(table)


def _one_field(value: str) -> str:
    return value.replace("\t", " ").replace("\r\n", " ").replace("\n", " ")
