"""The options of every command that reads from the database and prints what it read:
``--dsn``, ``--read-dsn`` (a streaming replica), ``--format`` and ``--json``, declared here once.

Such a command takes them as one parameter, ``reader: Reader``; :func:`reader_options` puts the
four options in its signature at that place (typer reads the signature), so ``--help`` lists
them where the command declares its reader.
"""

from __future__ import annotations

import functools
import inspect
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, TypeVar

from pgqueue.cli.common import DsnOption, ReadDsnOption, with_reader
from pgqueue.cli.output import FormatOption, JsonFormatOption, OutputFormat, chosen
from pgqueue.client import PgQueue

T = TypeVar("T")


@dataclass(frozen=True, slots=True)
class Reader:
    """Where a command reads (``--dsn``, ``--read-dsn``) and how it prints (``out``)."""

    dsn: str | None
    read_dsn: str | None
    out: OutputFormat

    def read(self, action: Callable[[PgQueue], T]) -> T:
        """Run the read-only ``action(pgq)`` against the read DSN."""
        return with_reader(self.dsn, self.read_dsn, action)


# The options, in the order --help shows them: (name, annotation, default).
_OPTIONS: tuple[tuple[str, Any, Any], ...] = (
    ("dsn", DsnOption, None),
    ("read_dsn", ReadDsnOption, None),
    ("fmt", FormatOption, OutputFormat.table),
    ("as_json", JsonFormatOption, False),
)


def reader_options(command: Callable[..., None]) -> Callable[..., None]:
    """``command`` with its ``reader: Reader`` parameter given as the four options."""
    signature = inspect.signature(command, eval_str=True)
    own = list(signature.parameters.values())
    at = [p.name for p in own].index("reader")
    kind = own[at].kind
    options = [
        inspect.Parameter(name, kind, default=default, annotation=annotation)
        for name, annotation, default in _OPTIONS
    ]

    @functools.wraps(command)
    def run(*args: Any, **given: Any) -> None:
        dsn, read_dsn, fmt, as_json = (given.pop(name, default) for name, _, default in _OPTIONS)
        command(*args, reader=Reader(dsn, read_dsn, chosen(fmt, as_json)), **given)

    run.__signature__ = signature.replace(  # type: ignore[attr-defined]
        parameters=[*own[:at], *options, *own[at + 1 :]]
    )
    return run
