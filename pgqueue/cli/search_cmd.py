"""``pgq jobs search``: find jobs wherever they are (live, history, dead letters), page by page.

Its filter options are made from :class:`~pgqueue.db.search.JobFilter`'s fields, each of which
declares its option (a :class:`~pgqueue.rules.flags.Flag` in its metadata); this module knows
what each kind of filter is on the command line (states, times, ``--args key=value``;
:mod:`pgqueue.db.search` has the parsers the dashboard shares) and turns what the command
receives into :func:`pgqueue.db.views.search_jobs` arguments; bad input is a one-line usage
error naming the option.
"""

from __future__ import annotations

from dataclasses import fields
from functools import cache
from typing import Annotated, Any, get_type_hints

import typer

from pgqueue.cli.common import duration_option, err_console, in_range, with_options
from pgqueue.cli.declared import Declared, Kind, parameters
from pgqueue.cli.output import OutputFormat, Reader, dump_json, print_rows, reader_options
from pgqueue.db import search
from pgqueue.errors import InvalidJobError
from pgqueue.rules.flags import plain_type
from pgqueue.rules.options import check_tags


def _time(name: str, value: str | None) -> search.Moment | None:
    if value is None:
        return None
    try:
        return search.parse_time(value)
    except InvalidJobError as exc:
        raise typer.BadParameter(str(exc), param_hint=f"'{name}'") from None


def _states(values: list[str] | None) -> list[str] | None:
    for value in values or ():
        if value not in search.STATES:
            raise typer.BadParameter(f"unknown state {value!r}: one of {', '.join(search.STATES)}")
    return values or None


def _args(values: list[str] | None) -> list[str] | None:
    try:
        search.parse_args_filter(values or ())
    except InvalidJobError as exc:
        raise typer.BadParameter(str(exc)) from None
    return values


def _tags(values: list[str] | None) -> list[str] | None:
    try:
        return list(check_tags(values)) if values else None
    except InvalidJobError as exc:
        raise typer.BadParameter(str(exc)) from None


def _strings(hint: Any) -> Any:
    return list[str]


#: How each kind of filter is written on the command line (the filters' Flags say which).
KINDS = {
    "value": Kind(plain_type),
    "states": Kind(_strings, callback=_states),
    "pairs": Kind(_strings, callback=_args),
    "tags": Kind(_strings, callback=_tags),
    "time": Kind(lambda hint: str),
}


@cache
def declared() -> tuple[Declared, ...]:
    """Every search filter with its flag (all of them have one), in the declaration's order."""
    hints = get_type_hints(search.JobFilter)
    return tuple(
        Declared(f.name, hints[f.name], f.metadata["flag"]) for f in fields(search.JobFilter)
    )


#: The filters' options, as keyword parameters (made once: at import, for every command).
FILTER_PARAMETERS = parameters(declared(), KINDS)


def filter_option(name: str) -> Any:
    """The option of one filter, for a command that takes it alone (``pgq jobs list``)."""
    return next(p for p in FILTER_PARAMETERS if p.name == name).annotation


def filters(received: dict[str, Any]) -> dict[str, Any]:
    """:func:`pgqueue.db.views.search_jobs` filters from what the command received (by
    parameter name: the filter's); a bad time is a usage error naming its option."""
    chosen: dict[str, Any] = {}
    for value in declared():
        given = received[value.name]
        kind = value.flag.kind
        if kind == "pairs":
            given = search.parse_args_filter(given or ())
        elif kind == "time":
            given = _time(value.flag.option_names(value.name)[0], given)
        # views.job_filter takes one state or several as ``state``.
        chosen["state" if value.name == "states" else value.name] = given
    return chosen


#: ``--tag``, shared by ``pgq jobs list`` and ``pgq jobs search``.
TagOption = filter_option("tags")
#: ``--meta``, shared by ``pgq jobs list`` and ``pgq jobs search``.
MetaOption = filter_option("meta")


@reader_options
def jobs_search(
    *,
    # Here: an option for every filter (the JobFilter fields' flags, in their order).
    limit: Annotated[
        int,
        typer.Option(callback=in_range(1, search.MAX_PAGE), help="Rows per page."),
    ] = 50,
    after: Annotated[
        str | None,
        typer.Option("--after", help="The cursor a previous page printed: the next page."),
    ] = None,
    timeout: Annotated[
        float,
        duration_option(help="Give up after this long (a search no index narrows scans)."),
    ] = search.DEFAULT_TIMEOUT,
    reader: Reader,
    **received: Any,
) -> None:
    """Search jobs wherever they are (live, finished, dead), newest first, a page at a time."""
    from pgqueue.db import views

    out = reader.out
    chosen_filters = filters(received)
    page = reader.read(
        lambda pgq: views.search_jobs(
            pgq,
            **chosen_filters,
            limit=limit,
            after=after,
            timeout=timeout,
        ),
    )
    if out is OutputFormat.json:
        dump_json({"jobs": page.jobs, "cursor": page.cursor})
        return
    print_rows(
        page.jobs,
        [
            "id",
            "state",
            "queue",
            "task",
            "attempts",
            "created_at",
            "finished_at",
            "tags",
            "last_error",
        ],
        fmt=out,
        title="jobs",
        narrow_drop={"attempts", "created_at", "tags"},
    )
    if page.cursor is None:
        err_console.print("(last page)", highlight=False)
    else:
        # One line, however narrow the terminal; under plain rows, on stderr (rows only on stdout).
        typer.echo(f"next page: --after {page.cursor}", err=out is OutputFormat.plain)


with_options(jobs_search, FILTER_PARAMETERS, after=0)
