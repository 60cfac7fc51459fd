"""``pgq <thing> list`` commands that print what one client call returns: the rows, as a table
or as ``--format``/``--json`` asks, with the usual ``--dsn``."""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any

import typer

from pgqueue.cli.common import example
from pgqueue.cli.output import Printer, print_rows, printer_options
from pgqueue.client import PgQueue

Fetch = Callable[[PgQueue], list[dict[str, Any]]]


def list_command(
    app: typer.Typer, *, columns: Sequence[str], title: str, shown_by: str
) -> Callable[[Fetch], Fetch]:
    """Decorate ``fetch(pgq)`` to register ``list`` on ``app``: the command prints its rows
    under ``columns``; its help is ``fetch``'s docstring and ends with the example ``shown_by``.
    """

    def register(fetch: Fetch) -> Fetch:
        @printer_options
        def list_rows(*, printer: Printer) -> None:
            print_rows(printer.run(fetch), columns, fmt=printer.out, title=title)

        list_rows.__doc__ = fetch.__doc__
        app.command("list", epilog=example(shown_by))(list_rows)
        return fetch

    return register
