"""``pgq jobs search``: find jobs wherever they are (live, history, dead letters), page by page.

Parses the filters (states, times, ``--args key=value``; :mod:`pgqueue.db.search` has the
parsers the dashboard shares) into :func:`pgqueue.views.search_jobs`
arguments; bad input is a one-line usage error naming the option.
"""

from __future__ import annotations

from datetime import datetime
from typing import Annotated

import typer

from pgqueue.cli.common import (
    MAX_JOB_ID,
    DsnOption,
    ReadDsnOption,
    duration,
    err_console,
    in_range,
    with_reader,
)
from pgqueue.cli.output import (
    FormatOption,
    JsonFormatOption,
    OutputFormat,
    chosen,
    dump_json,
    print_rows,
)
from pgqueue.db import search
from pgqueue.errors import InvalidJobError
from pgqueue.rules.options import check_tags

TIME_HELP = "ISO 8601 (UTC if no offset) or an age such as 30m, 2h, 7d."


def _time(name: str, value: str | None) -> datetime | None:
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


#: ``--tag``, shared by ``pgq jobs list`` and ``pgq jobs search``.
TagOption = Annotated[
    list[str] | None,
    typer.Option(
        "--tag", callback=_tags, help="Only jobs with this tag (repeat: jobs with all of them)."
    ),
]
#: ``--meta``, shared by ``pgq jobs list`` and ``pgq jobs search``.
MetaOption = Annotated[
    list[str] | None,
    typer.Option(
        "--meta",
        callback=_args,
        help=(
            "The job's metadata contains KEY=VALUE (VALUE as JSON if it parses, else text; "
            "repeat to combine) or a JSON object."
        ),
    ),
]


def jobs_search(
    job_id: Annotated[
        int | None,
        typer.Option("--id", callback=in_range(1, MAX_JOB_ID), help="Only this job id."),
    ] = None,
    task: Annotated[str | None, typer.Option("--task", help="Only this task.")] = None,
    queue: Annotated[str | None, typer.Option("--queue", "-q", help="Only this queue.")] = None,
    state: Annotated[
        list[str] | None,
        typer.Option(
            "--state",
            callback=_states,
            help=f"Only jobs in this state (repeat for several): {', '.join(search.STATES)}.",
        ),
    ] = None,
    error: Annotated[
        str | None,
        typer.Option("--error", help="An attempt's error class or message contains this text."),
    ] = None,
    args: Annotated[
        list[str] | None,
        typer.Option(
            "--args",
            callback=_args,
            help=(
                "The job's args contain KEY=VALUE (VALUE as JSON if it parses, else text; "
                "repeat to combine) or a JSON object."
            ),
        ),
    ] = None,
    tag: TagOption = None,
    meta: MetaOption = None,
    since: Annotated[
        str | None, typer.Option("--since", help=f"Enqueued at or after this. {TIME_HELP}")
    ] = None,
    until: Annotated[str | None, typer.Option("--until", help="Enqueued before this.")] = None,
    finished_since: Annotated[
        str | None,
        typer.Option("--finished-since", help="Finished (succeeded, cancelled, died) at or after."),
    ] = None,
    finished_until: Annotated[
        str | None, typer.Option("--finished-until", help="Finished before this.")
    ] = None,
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
        typer.Option(
            parser=duration,
            metavar="DURATION",
            help="Give up after this long (a search no index narrows scans).",
        ),
    ] = search.DEFAULT_TIMEOUT,
    dsn: DsnOption = None,
    read_dsn: ReadDsnOption = None,
    fmt: FormatOption = OutputFormat.table,
    as_json: JsonFormatOption = False,
) -> None:
    """Search jobs wherever they are (live, finished, dead), newest first, a page at a time."""
    from pgqueue.db import views

    out = chosen(fmt, as_json)
    times = {
        name: _time(name, value)
        for name, value in (
            ("--since", since),
            ("--until", until),
            ("--finished-since", finished_since),
            ("--finished-until", finished_until),
        )
    }
    contains = search.parse_args_filter(args or ())
    page = with_reader(
        dsn,
        read_dsn,
        lambda pgq: views.search_jobs(
            pgq,
            id=job_id,
            task=task,
            queue=queue,
            state=state,
            error=error,
            args=contains,
            tags=tag,
            meta=search.parse_args_filter(meta or ()),
            since=times["--since"],
            until=times["--until"],
            finished_since=times["--finished-since"],
            finished_until=times["--finished-until"],
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
